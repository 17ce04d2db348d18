"""A multi-host HERALD_DATABASE_URL against a real server: every way Herald connects skips a host
that is down, and a host that accepts TCP but never answers costs connect_timeout, not a hang."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from dataclasses import replace

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from herald.db import migrate
from herald.db.engine import libpq_url, make_async_engine, make_sync_engine, parse_database_url
from tests.e2e.harness import free_port


def in_front(database_url: str, port: int, **params: str) -> str:
    """`database_url` with 127.0.0.1:`port` tried first, then the real server."""
    parsed = parse_database_url(database_url)
    assert len(parsed.hosts) == 1, parsed
    parsed = replace(parsed, hosts=(("127.0.0.1", port), *parsed.hosts))
    for name, value in params.items():
        parsed = parsed.with_param(name, value)
    return parsed.render()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that completes the TCP handshake (the kernel's backlog) but never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield sock.getsockname()[1]


async def test_every_connection_path_skips_a_host_that_is_down(database_url: str) -> None:
    """The async engine (API, worker), the sync engine, the LISTEN connection built from the
    engine's URL, and Alembic all reach the read-write server behind a host that refuses."""
    url = in_front(database_url, free_port(), target_session_attrs="read-write")
    engine = make_async_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT pg_is_in_recovery()"))).scalar_one() is False
        listen_url = libpq_url(engine.url.render_as_string(hide_password=False))
        async with await psycopg.AsyncConnection.connect(listen_url, autocommit=True) as raw:
            await raw.execute("LISTEN herald_multihost_probe")
            await raw.execute("NOTIFY herald_multihost_probe, 'x'")
            notices = [n.payload async for n in raw.notifies(timeout=5, stop_after=1)]
            assert notices == ["x"]
    finally:
        await engine.dispose()
    sync = make_sync_engine(url, pool_size=1)
    try:
        with sync.connect() as conn:
            assert conn.execute(text("SELECT 1")).scalar_one() == 1
    finally:
        sync.dispose()
    await asyncio.to_thread(migrate.upgrade, url)  # idempotent: already at head


async def test_a_host_that_never_answers_costs_connect_timeout_not_a_hang(
    database_url: str, silent_port: int
) -> None:
    """libpq gives up on the silent host after connect_timeout and moves on; alone, the silent
    host is an OperationalError, not a request that waits forever. (The bounds are generous
    correctness bounds: without connect_timeout both would wait for the kernel's TCP timeout.)"""
    engine = make_async_engine(in_front(database_url, silent_port, connect_timeout="2"))
    try:
        async with asyncio.timeout(30):
            async with engine.connect() as conn:
                assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1
    finally:
        await engine.dispose()
    alone = replace(parse_database_url(database_url), hosts=(("127.0.0.1", silent_port),))
    engine = make_async_engine(alone.with_param("connect_timeout", "2").render())
    try:
        with pytest.raises(OperationalError) as caught:
            async with asyncio.timeout(30):
                async with engine.connect():
                    pass
        assert "timeout" in str(caught.value).lower(), caught.value
    finally:
        await engine.dispose()
