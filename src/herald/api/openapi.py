"""The published OpenAPI: FastAPI's document, with every error a route can answer declared.

FastAPI declares a route's success and a 422 in its own `{"detail": [...]}` shape, which Herald
never answers. Here every operation instead lists each error status it can answer in Herald's
envelope, `{"error": {"code", "message"}}`, with the codes that status can carry as an enum:

- the errors its code can raise, read from that code (herald.api.raises);
- 401 UNAUTHENTICATED where the operation takes a credential;
- 422 REQUEST_MALFORMED where it takes a parameter or a body, 413 REQUEST_TOO_LARGE with a body;
- 503 (with Retry-After) and 500, which any operation can answer.

The document is built once, on the first request for it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import fastapi.routing
from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from herald import vocabulary
from herald.api import raises
from herald.errors import (
    DatabaseUnavailable,
    HeraldError,
    InternalError,
    RedisUnavailable,
    RequestMalformed,
    RequestTooLarge,
    ServiceUnavailable,
    Unauthenticated,
)
from herald.kinds import Registry

DESCRIPTION = """\
Herald's HTTP API. The host's server calls it with an API key; people (end users and operators)
call it with a JWT the host signs. Both travel as `Authorization: Bearer …`.

Every error is answered as `{"error": {"code": "…", "message": "…"}}`; each operation lists the
codes each of its error statuses can carry. A 503 carries `Retry-After`.
"""

# What any operation can answer, whatever its code: a dependency's outage, or a bug.
ALWAYS: tuple[type[HeraldError], ...] = (
    ServiceUnavailable,
    DatabaseUnavailable,
    RedisUnavailable,
    InternalError,
)
# The bases of the hierarchy are named in `except` clauses, never raised as such.
_NEVER_ANSWERED = frozenset({HeraldError})


def install(app: FastAPI) -> None:
    def schema() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build(app)
        return app.openapi_schema

    app.openapi = schema  # type: ignore[method-assign]


def build(app: FastAPI) -> dict[str, Any]:
    spec = get_openapi(
        title=app.title, version=app.version, description=DESCRIPTION, routes=app.routes
    )
    schemas = spec.get("components", {}).get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    _publish_registry(schemas, app.state.herald.registry)
    for route in leaf_routes(app):
        if not isinstance(getattr(route, "original_route", route), APIRoute):
            continue
        if not route.include_in_schema:
            continue
        raised = raises.errors_raised(_callables(route.dependant))
        for method in sorted(route.methods):
            operation = spec["paths"][route.path_format].get(method.lower())
            if operation is not None:
                _declare_errors(operation, declared_errors(operation, raised))
    return spec


def _publish_registry(schemas: dict[str, Any], registry: Registry) -> None:
    """A kind is one of the loaded registry's kinds and a channel one of Herald's: published as
    enums, so a client (and a fuzzer) knows the names the server accepts."""
    kinds = sorted(kind.name for kind in registry)
    for model in ("EventCreate", "TemplateCreate", "PreviewRequest"):
        properties = schemas.get(model, {}).get("properties", {})
        if "kind" in properties:
            properties["kind"] = {"type": "string", "enum": kinds, "title": "Kind"}
    channels = schemas.get("EventCreate", {}).get("properties", {}).get("channels")
    if channels is not None:
        channels["anyOf"] = [
            {
                "type": "array",
                "items": {"type": "string", "enum": list(vocabulary.CHANNELS)},
                "minItems": 1,
                "maxItems": len(vocabulary.CHANNELS),
            },
            {"type": "null"},
        ]


def leaf_routes(app: FastAPI) -> Iterator[Any]:
    """Every route the app serves, through included routers. Newer FastAPI keeps an included
    router as one entry of `app.routes` and walks it with `iter_route_contexts`; older versions
    copy its routes in. Either way each item has path_format, path_regex, methods, dependant."""
    iterate = getattr(fastapi.routing, "iter_route_contexts", None)
    routes: Iterator[Any] = iter(iterate(app.routes) if iterate is not None else app.routes)
    return routes


def declared_errors(
    operation: dict[str, Any], raised: frozenset[type[HeraldError]]
) -> set[type[HeraldError]]:
    """The errors one operation can answer: what its code raises plus the always-present ones."""
    errors = set(raised) - _NEVER_ANSWERED
    errors.update(ALWAYS)
    if operation.get("security"):
        errors.add(Unauthenticated)
    if operation.get("parameters") or "requestBody" in operation:
        errors.add(RequestMalformed)
    if "requestBody" in operation:
        errors.add(RequestTooLarge)
    return errors


def error_response(errors: list[type[HeraldError]]) -> dict[str, Any]:
    """One status's response: the envelope with its codes as an enum, each code explained."""
    ordered = sorted(errors, key=lambda error: error.code)
    codes = list(dict.fromkeys(error.code for error in ordered))
    lines = [f"- `{error.code}`: {error.default_message()}" for error in ordered]
    response: dict[str, Any] = {
        "description": "\n".join(dict.fromkeys(lines)),
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {
                        "error": {
                            "type": "object",
                            "required": ["code", "message"],
                            "properties": {
                                "code": {"type": "string", "enum": codes},
                                "message": {"type": "string"},
                            },
                        }
                    },
                }
            }
        },
    }
    if all(issubclass(error, ServiceUnavailable) for error in errors):
        response["headers"] = {
            "Retry-After": {
                "description": "Seconds to wait before trying again.",
                "required": True,
                "schema": {"type": "integer", "minimum": 0},
            }
        }
    return response


def _declare_errors(operation: dict[str, Any], errors: set[type[HeraldError]]) -> None:
    by_status: dict[int, list[type[HeraldError]]] = defaultdict(list)
    for error in errors:
        by_status[error.status].append(error)
    responses: dict[str, Any] = operation["responses"]
    # FastAPI's own 422 (`{"detail": [...]}`) is not what Herald answers.
    responses.pop("422", None)
    for status in sorted(by_status):
        responses[str(status)] = error_response(by_status[status])


def _callables(dependant: Dependant) -> Iterator[Callable[..., Any]]:
    if dependant.call is not None:
        yield dependant.call
    for sub in dependant.dependencies:
        yield from _callables(sub)
