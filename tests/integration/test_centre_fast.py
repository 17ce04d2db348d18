"""herald.centre.fast: the inbox's plain requests answered without FastAPI's request machinery,
held to answering every request exactly as the FastAPI routes do.

Two apps over one database: one as Herald runs (fast routes installed) and one with them taken
out, so every request goes through FastAPI. Each request of a corpus — plain ones, and every way
of writing a parameter or a header that FastAPI reads differently or refuses — goes to both, and
the two answers must have the same status, headers (but the request id) and body. The fast
routes must also have answered the plain ones (a counter on FastRoute.handle), or the comparison
would prove nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from httpx import ASGITransport, AsyncClient, Response
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.api.app import create_app
from herald.auth.service import sign_token
from herald.centre import fast
from herald.config import Settings
from herald.kinds import Registry
from tests.integration.test_centre import BASE, Seed


class Pair:
    """The same request to Herald as it runs and to Herald without its fast routes."""

    def __init__(self, fast_client: AsyncClient, slow_client: AsyncClient) -> None:
        self.fast = fast_client
        self.slow = slow_client

    async def same(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        between: Callable[[], Awaitable[None]] | None = None,
    ) -> Response:
        """`between` runs after the first request: to undo what a write did."""
        fast_answer = await self.fast.request(method, url, headers=headers)
        if between is not None:
            await between()
        slow_answer = await self.slow.request(method, url, headers=headers)
        assert _shape(fast_answer) == _shape(slow_answer), f"{method} {url} {headers}"
        return fast_answer


def _shape(response: Response) -> tuple[int, list[tuple[str, str]], bytes]:
    headers = sorted((k, v) for k, v in response.headers.items() if k != "x-request-id")
    return response.status_code, headers, response.content


ORIGIN = "https://school.example"


@pytest.fixture
async def pair(settings: Settings, engine: AsyncEngine, registry: Registry) -> AsyncIterator[Pair]:
    # With a CORS origin, as the drop-in inbox is deployed: its headers must match too.
    settings = settings.model_copy(update={"cors_origins": ORIGIN})
    running = create_app(settings, engine, registry)
    without = create_app(settings, engine, registry)
    fast.uninstall(without)
    assert any(isinstance(r, fast.FastRoute) for r in running.router.routes)
    assert not any(isinstance(r, fast.FastRoute) for r in without.router.routes)
    async with (
        AsyncClient(transport=ASGITransport(app=running), base_url="http://herald.test") as one,
        AsyncClient(transport=ASGITransport(app=without), base_url="http://herald.test") as two,
    ):
        yield Pair(one, two)


def test_named_routes_are_still_found_past_the_fast_routes(
    settings: Settings, engine: AsyncEngine, registry: Registry
) -> None:
    """The fast routes come first and are not named: `url_for` must pass over them (the
    console builds its links with it)."""
    app = create_app(settings, engine, registry)
    assert isinstance(app.router.routes[0], fast.FastRoute)
    assert app.url_path_for("healthz") == "/healthz"


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths the fast routes answered."""
    paths: list[str] = []
    original = fast.FastRoute.handle

    async def counting(self: fast.FastRoute, scope: Any, receive: Any, send: Any) -> None:
        paths.append(f"{scope['method']} {scope['path']}?{scope['query_string'].decode()}")
        await original(self, scope, receive, send)

    monkeypatch.setattr(fast.FastRoute, "handle", counting)
    return paths


@pytest.fixture
async def inbox(engine: AsyncEngine, tenant: str) -> dict[str, Any]:
    seed = Seed(engine, tenant)
    person = await seed.person("reader")
    await seed.person("other")
    items = await seed.notify_many(person, 7)
    return {"items": items, "tenant": tenant}


def _bearer(settings: Settings, tenant: str, subject: str = "reader") -> str:
    return sign_token(settings, tenant_id=tenant, subject=subject)


def _header_corpus(settings: Settings, tenant: str) -> list[dict[str, str]]:
    token = _bearer(settings, tenant)
    return [
        {"Authorization": f"Bearer {token}"},
        {"Authorization": f"bearer {token}"},
        {"Authorization": f"BEARER   {token}  "},
        {},
        {"Authorization": ""},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer "},
        {"Authorization": f"Basic {token}"},
        {"Authorization": "Bearer not-a-jwt"},
        {"Authorization": f"Bearer {token}x"},
        {"Authorization": f"Bearer {_bearer(settings, tenant, 'nobody')}"},
        {"Authorization": f"Bearer {_bearer(settings, 'no-such-tenant')}"},
        {"Authorization": "Bearer " + "a" * 9000},
        # A browser's request from the allowed origin, and one from another.
        {"Authorization": f"Bearer {token}", "Origin": ORIGIN},
        {"Authorization": f"Bearer {token}", "Origin": "https://elsewhere.example"},
    ]


async def test_the_list_answers_every_query_as_fastapi_does(
    pair: Pair, served: list[str], inbox: dict[str, Any], settings: Settings
) -> None:
    headers = {"Authorization": f"Bearer {_bearer(settings, inbox['tenant'])}"}
    first = await pair.same("GET", f"{BASE}?limit=3", headers)
    cursor = first.json()["nextCursor"]
    assert cursor
    plain = [
        "",
        "limit=1",
        "limit=100",
        "limit=3&unreadOnly=true",
        "unreadOnly=false",
        "unreadOnly=1",
        "unreadOnly=0",
        f"cursor={cursor}",
        f"cursor={cursor}&limit=2&unreadOnly=false",
        "other=1",
        "limit=5&unreadonly=yes",
        "cursor=abc",  # plain in shape: the service refuses it (400 CURSOR_INVALID) either way
    ]
    unusual = [
        "limit=0",
        "limit=101",
        "limit=007",
        "limit=abc",
        "limit=",
        "limit=5&limit=6",
        "limit=5.0",
        "limit=%205",
        "limit=+5",
        "limit=1000",
        "unreadOnly=TRUE",
        "unreadOnly=yes",
        "unreadOnly=",
        "cursor=",
        "cursor=!!",
        "cursor=" + "a" * 1025,
        f"cursor={cursor}&cursor={cursor}",
        "pagination=false",
        "pagination=",
    ]
    served.clear()
    for query in plain + unusual:
        await pair.same("GET", f"{BASE}?{query}" if query else BASE, headers)
    # Every plain query was answered by the fast route (the first is "" and has no "?"), none of
    # the unusual ones.
    assert served == [f"GET {BASE}?{q}" for q in plain]


async def test_every_route_answers_every_credential_as_fastapi_does(
    pair: Pair, served: list[str], inbox: dict[str, Any], settings: Settings, engine: AsyncEngine
) -> None:
    item = inbox["items"][0].id

    async def unread_again() -> None:
        await _unread_again(engine, inbox["tenant"])

    for headers in _header_corpus(settings, inbox["tenant"]):
        for method, url in (
            ("GET", BASE),
            ("GET", f"{BASE}/unread-count"),
            ("POST", f"{BASE}/{item}/read"),
            ("POST", f"{BASE}/read-all"),
        ):
            # Mark-read keeps the first read time; read-all says how many it marked, so the
            # rows are made unread again before the second app is asked.
            again = unread_again if url.endswith("read-all") else None
            if again is not None:
                await again()
            await pair.same(method, url, headers, between=again)
    assert len(served) == 4 * len(_header_corpus(settings, inbox["tenant"]))
    # The CORS comparison above compared something: the allowed origin is answered.
    browser = {"Authorization": f"Bearer {_bearer(settings, inbox['tenant'])}", "Origin": ORIGIN}
    answer = await pair.same("GET", BASE, browser)
    assert answer.headers["access-control-allow-origin"] == ORIGIN


async def test_the_writes_and_the_count_answer_as_fastapi_does(
    pair: Pair, served: list[str], inbox: dict[str, Any], settings: Settings, engine: AsyncEngine
) -> None:
    headers = {"Authorization": f"Bearer {_bearer(settings, inbox['tenant'])}"}
    first, second = inbox["items"][0].id, inbox["items"][1].id
    count = await pair.same("GET", f"{BASE}/unread-count", headers)
    assert count.json()["count"] == 7
    # Mark-read is idempotent (the first read time stays), so both apps give the same receipt.
    receipt = await pair.same("POST", f"{BASE}/{first}/read", headers)
    assert receipt.status_code == 200 and receipt.json()["readAt"]
    for wrong in (str(uuid.uuid4()), "not-a-uuid", f"{second}x", "%20"):
        refused = await pair.same("POST", f"{BASE}/{wrong}/read", headers)
        assert refused.status_code == 404
    # Query strings on the routes without parameters are left to FastAPI.
    await pair.same("GET", f"{BASE}/unread-count?x=1", headers)
    await pair.same("POST", f"{BASE}/{second}/read?x=1", headers)

    # Read-all answers how many it marked: reset between the two apps.
    async def unread_again() -> None:
        await _unread_again(engine, inbox["tenant"])

    await unread_again()
    marked = await pair.same("POST", f"{BASE}/read-all", headers, between=unread_again)
    assert marked.json()["updated"] == 7
    # The wrong method is FastAPI's 405, whichever app.
    await pair.same("DELETE", f"{BASE}/read-all", headers)
    await pair.same("GET", f"{BASE}/{first}/read", headers)
    assert sum(1 for s in served if "x=1" not in s) == len(served) > 0


async def _unread_again(engine: AsyncEngine, tenant: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE notification_recipient SET read_at = NULL WHERE tenant_id = :t"),
            {"t": tenant},
        )


_NAMES = st.sampled_from(["limit", "cursor", "unreadOnly", "pagination", "x", "Limit"])
_VALUES = st.one_of(
    st.sampled_from(["1", "20", "100", "101", "0", "true", "false", "1.5", "", "-1", "eyJ"]),
    st.text(alphabet="0123456789abcAZ_-+ .%=&!", max_size=8),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(query=st.lists(st.tuples(_NAMES, _VALUES), max_size=4))
async def test_any_list_query_is_answered_as_fastapi_does(
    pair: Pair, inbox: dict[str, Any], settings: Settings, query: list[tuple[str, str]]
) -> None:
    from urllib.parse import urlencode

    headers = {"Authorization": f"Bearer {_bearer(settings, inbox['tenant'])}"}
    await pair.same("GET", f"{BASE}?{urlencode(query)}", headers)
