"""The API's engine checks a pooled connection at checkout only once it has sat idle
(db.engine.make_async_engine(ping_after_idle=…)): a connection in steady use skips the round trip,
and one whose server end went away while it was idle is noticed at checkout and replaced, so the
request that checks it out still succeeds."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from sqlalchemy import text

from herald.db.engine import libpq_url, make_async_engine

IDLE = 0.3


async def test_only_an_idle_connection_is_pinged_and_a_dead_one_is_replaced(
    database_url: str,
) -> None:
    engine = make_async_engine(database_url, pool_size=1, ping_after_idle=IDLE)
    pings: list[int] = []
    real_ping = engine.dialect.do_ping

    def counted_ping(dbapi_connection: Any) -> bool:
        pings.append(1)
        return real_ping(dbapi_connection)

    engine.dialect.do_ping = counted_ping  # type: ignore[method-assign]
    backend = text("SELECT pg_backend_pid()")
    try:
        async with engine.connect() as conn:
            first = (await conn.execute(backend)).scalar_one()
        for _ in range(3):  # in steady use: no ping, the same connection
            async with engine.connect() as conn:
                assert (await conn.execute(backend)).scalar_one() == first
        assert pings == []

        await asyncio.sleep(IDLE + 0.1)  # idle long enough: pinged, still alive, kept
        async with engine.connect() as conn:
            assert (await conn.execute(backend)).scalar_one() == first
        assert len(pings) == 1

        with psycopg.connect(libpq_url(database_url), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (first,))
        await asyncio.sleep(IDLE + 0.1)
        async with engine.connect() as conn:  # the ping finds it dead: a new connection
            replaced = (await conn.execute(backend)).scalar_one()
        assert replaced != first
        assert len(pings) == 2
    finally:
        await engine.dispose()


async def test_without_ping_after_idle_every_checkout_is_pinged(database_url: str) -> None:
    """The default (the worker's engine): SQLAlchemy's pre-ping at every checkout."""
    engine = make_async_engine(database_url, pool_size=1)
    try:
        assert engine.sync_engine.pool._pre_ping is True
    finally:
        await engine.dispose()
