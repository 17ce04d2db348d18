"""The routers' order in the app: the end user's inbox first (FastAPI tries the routers in order
on every request), and an order that decides nothing else, because no route of one router
serves a path another router serves."""

from __future__ import annotations

import re

from starlette.routing import compile_path

from herald.api.app import _routers
from herald.centre import routes as centre


def _routes() -> list[tuple[int, str, set[str], re.Pattern[str]]]:
    found = []
    for index, router in enumerate(_routers()):
        for route in router.routes:
            path = getattr(route, "path", None)
            methods = getattr(route, "methods", None)
            if isinstance(path, str) and methods:
                found.append((index, path, set(methods), compile_path(path)[0]))
    return found


def test_the_inbox_router_is_tried_first() -> None:
    assert _routers()[0] is centre.router


def test_no_route_of_one_router_answers_for_a_path_of_another() -> None:
    routes = _routes()
    assert len({index for index, *_ in routes}) == len(_routers())
    clashes = []
    for index, path, methods, _ in routes:
        # The path with each parameter filled in, as a request for it would arrive.
        sample = re.sub(r"{[^}]+}", "x", path)
        for other, other_path, other_methods, pattern in routes:
            if other != index and methods & other_methods and pattern.match(sample):
                clashes.append(f"{sorted(methods & other_methods)} {path} ~ {other_path}")
    assert clashes == []
