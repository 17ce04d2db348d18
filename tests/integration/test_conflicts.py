"""A request PostgreSQL rolls back to break a deadlock is answered as one, not as an outage.

Staged for real on "mark all read": a second connection (in a worker's place) holds the middle
of a person's three unread rows, so the request's UPDATE locks the row before it and waits; the
connection then asks for that row. Its own deadlock_timeout is long, so the request's backend, at
the server's default of one second, is the one that finds the cycle and is rolled back.
"""

from __future__ import annotations

import asyncio
import logging

import psycopg
import pytest
from httpx import AsyncClient
from sqlalchemy import select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald import outages
from herald.auth.service import sign_token
from herald.config import Settings
from herald.db import schema as s
from tests.integration.test_centre import Item, Seed

r = s.notification_recipient


async def _lock(conn: AsyncConnection, item: Item, *, nowait: bool = False) -> None:
    await conn.execute(
        select(r.c.id)
        .where(r.c.id == item.recipient_id, r.c.occurred_at == item.occurred_at)
        .with_for_update(nowait=nowait)
    )


async def _held_by_the_request(conn: AsyncConnection, item: Item) -> bool:
    """Whether another transaction holds this row (a NOWAIT lock refused), asked in a savepoint."""
    savepoint = await conn.begin_nested()
    try:
        await _lock(conn, item, nowait=True)
    except OperationalError as exc:
        await savepoint.rollback()
        assert isinstance(exc.orig, psycopg.errors.LockNotAvailable), exc
        return True
    await savepoint.rollback()
    return False


async def _waiting_on_a_lock(engine: AsyncEngine, own_pid: int) -> bool:
    async with engine.connect() as conn:
        waiting = await conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND pid <> :own AND datname = current_database()"
            ),
            {"own": own_pid},
        )
        return bool(waiting.scalar_one())


async def test_a_request_chosen_to_break_a_deadlock_is_a_conflict_not_an_outage(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seed = Seed(engine, tenant)
    person = await seed.person("reader")
    first, middle, last = await seed.notify_many(person, 3)
    me = {"Authorization": f"Bearer {sign_token(settings, tenant_id=tenant, subject='reader')}"}

    async with engine.connect() as other:
        own_pid = (await other.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        await other.execute(text("SET deadlock_timeout = '20s'"))
        await _lock(other, middle)
        with caplog.at_level(logging.INFO):
            request = asyncio.create_task(client.post("/v1/me/notifications/read-all", headers=me))
            for _ in range(100):
                if await _waiting_on_a_lock(engine, own_pid):
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the request never waited for the middle row")
            # Whichever way the UPDATE walks the three rows, it holds the one it met first.
            held = [item for item in (first, last) if await _held_by_the_request(other, item)]
            assert len(held) == 1, "the request should hold exactly one outer row"
            await _lock(other, held[0])  # the cycle: the request's backend breaks it
            answer = await request
        await other.rollback()

    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "DATABASE_CONFLICT"
    assert answer.headers["Retry-After"] == "1"
    assert not outages.state(outages.DATABASE).is_down
    assert "unavailable" not in caplog.text
    assert "rolled back to break a lock conflict" in caplog.text
    # Nothing was changed, and the same request now succeeds.
    async with engine.connect() as conn:
        unread = await conn.execute(
            select(r.c.id).where(r.c.tenant_id == tenant, r.c.read_at.is_(None))
        )
        assert len(unread.all()) == 3
    again = await client.post("/v1/me/notifications/read-all", headers=me)
    assert again.status_code == 200 and again.json() == {"updated": 3}
