"""herald.centre.functions: the inbox's plain requests as one statement each.

test_centre_fast.py holds every answer of the fast routes equal to the FastAPI routes' (which
still run the four-trip transaction); this file holds what is particular to the functions: that
the fast routes really answer through them, that the functions in the database are the code's
statements, that nobody but their owner may run them (a herald_app session could otherwise
enter another tenant), that a database replaced under a running process gets them again, and
that a database where they cannot be created still answers.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from httpx import ASGITransport, AsyncClient
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.api.app import create_app
from herald.auth.service import sign_token
from herald.centre import functions
from herald.config import Settings
from herald.db import tenancy
from herald.kinds import Registry
from tests.integration.test_centre import Seed

BASE = "/v1/me/notifications"


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The functions the routes called (each call still runs)."""
    called: list[str] = []
    original = functions.call

    async def counting(engine: AsyncEngine, function: Any, *args: Any) -> Any:
        called.append(function.route)
        return await original(engine, function, *args)

    monkeypatch.setattr(functions, "call", counting)
    return called


def _auth(settings: Settings, tenant: str, subject: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {sign_token(settings, tenant_id=tenant, subject=subject)}"}


async def test_every_plain_inbox_request_is_one_function_call(
    client: AsyncClient, calls: list[str], settings: Settings, engine: AsyncEngine, tenant: str
) -> None:
    seed = Seed(engine, tenant)
    person = await seed.person("reader")
    items = await seed.notify_many(person, 3)
    me = _auth(settings, tenant, "reader")

    first = await client.get(f"{BASE}?limit=2", headers=me)
    assert first.status_code == 200
    cursor = first.json()["nextCursor"]
    assert [i["id"] for i in first.json()["items"]] == [str(p.public_id) for p in items[::-1][:2]]
    after = await client.get(f"{BASE}?limit=2&cursor={cursor}&unreadOnly=true", headers=me)
    assert [i["id"] for i in after.json()["items"]] == [str(items[0].public_id)]
    assert (await client.get(f"{BASE}/unread-count", headers=me)).json() == {
        "count": 3,
        "capped": False,
    }
    marked = await client.post(f"{BASE}/{items[0].public_id}/read", headers=me)
    assert marked.status_code == 200 and marked.json()["id"] == str(items[0].public_id)
    assert (await client.post(f"{BASE}/read-all", headers=me)).json() == {"updated": 2}
    unknown = await client.get(BASE, headers=_auth(settings, tenant, "nobody"))
    assert unknown.status_code == 401 and unknown.json()["error"]["code"] == "UNAUTHENTICATED"
    assert calls == [
        "list",
        "list_after_unread",
        "unread_count",
        "mark_read",
        "mark_all_read",
        "list",
    ]


async def test_the_functions_in_the_database_are_the_codes_statements(
    client: AsyncClient, settings: Settings, engine: AsyncEngine, tenant: str
) -> None:
    await Seed(engine, tenant).person("reader")
    assert (await client.get(BASE, headers=_auth(settings, tenant, "reader"))).status_code == 200
    async with engine.connect() as conn:
        stored = dict(
            (
                await conn.execute(
                    text("SELECT proname, prosrc FROM pg_proc WHERE proname LIKE 'herald_centre_%'")
                )
            ).all()
        )
    for function in functions.ALL:
        assert stored[function.name].strip() == function.body.strip(), function.route


async def test_no_role_but_the_owner_may_run_them(
    client: AsyncClient, settings: Settings, engine: AsyncEngine, tenant: str
) -> None:
    """A herald_app session runs as one tenant; the functions enter the tenant they are given.
    Were they executable by herald_app, a statement run under one tenant could read another's
    inbox through them; EXECUTE is revoked from PUBLIC, so it is refused."""
    await Seed(engine, tenant).person("reader")
    assert (await client.get(BASE, headers=_auth(settings, tenant, "reader"))).status_code == 200
    function = functions.LIST[(False, False)]
    async with engine.connect() as conn:
        raw = await conn.get_raw_connection()
        driver: psycopg.AsyncConnection[Any] = raw.driver_connection  # type: ignore[assignment]
        await tenancy.enter_tenant(conn, "someone-else")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await driver.execute(
                function.call_sql,
                {"tenant_id": tenant, "external_id": "reader", "role_code": None, "limit": 5},
            )
        await conn.rollback()
        public = await conn.execute(
            text(
                "SELECT bool_or(has_function_privilege(r, p.oid, 'EXECUTE')) FROM pg_proc p, "
                "unnest(ARRAY['public', :app]) AS r WHERE p.proname LIKE 'herald_centre_%'"
            ),
            {"app": tenancy.APP_ROLE},
        )
        assert public.scalar_one() is False


async def test_a_database_replaced_under_the_process_gets_them_again(
    client: AsyncClient, settings: Settings, engine: AsyncEngine, tenant: str
) -> None:
    await Seed(engine, tenant).person("reader")
    me = _auth(settings, tenant, "reader")
    assert (await client.get(BASE, headers=me)).status_code == 200
    async with engine.begin() as conn:
        for function in functions.ALL:
            await conn.execute(text(f"DROP FUNCTION {function.name}"))
    answer = await client.get(f"{BASE}/unread-count", headers=me)
    assert answer.status_code == 200 and answer.json()["count"] == 0


async def test_where_they_cannot_be_created_the_routes_still_answer(
    monkeypatch: pytest.MonkeyPatch,
    calls: list[str],
    settings: Settings,
    engine: AsyncEngine,
    registry: Registry,
    tenant: str,
) -> None:
    """The connecting user may lack CREATE on the schema: the routes then run their four-trip
    transaction, with the same answers."""
    monkeypatch.setattr(functions, "_ready", type(functions._ready)())
    monkeypatch.setattr(functions, "_unavailable", ["InsufficientPrivilege"])
    seed = Seed(engine, tenant)
    person = await seed.person("reader")
    items = await seed.notify_many(person, 2)
    me = _auth(settings, tenant, "reader")
    app = create_app(settings, engine, registry)
    async with AsyncClient(transport=ASGITransport(app=app), base_url="http://herald.test") as c:
        listed = await c.get(BASE, headers=me)
        assert [i["id"] for i in listed.json()["items"]] == [str(p.public_id) for p in items[::-1]]
        assert (await c.get(f"{BASE}/unread-count", headers=me)).json()["count"] == 2
        assert (await c.post(f"{BASE}/{items[0].public_id}/read", headers=me)).status_code == 200
        assert (await c.post(f"{BASE}/read-all", headers=me)).json() == {"updated": 1}
    assert calls == []
