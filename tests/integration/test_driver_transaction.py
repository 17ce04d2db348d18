"""The inbox's routes run their transaction on a pooled connection's own psycopg connection
(db.engine.driver_transaction): the block's end commits, an error rolls back and gives the
connection back fit for the next request, and a connection that broke is invalidated, never
handed out again, the pool's bound and checkout staying SQLAlchemy's."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from herald.db.engine import driver_transaction, libpq_url, make_async_engine

PID = "SELECT pg_backend_pid()"


def scratch_table(database_url: str) -> str:
    name = f"scratch_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(libpq_url(database_url), autocommit=True) as admin:
        admin.execute(f"CREATE TABLE {name} (n int)")
    return name


def rows_in(database_url: str, table: str) -> list[int]:
    with psycopg.connect(libpq_url(database_url), autocommit=True) as admin:
        return [n for (n,) in admin.execute(f"SELECT n FROM {table} ORDER BY n").fetchall()]


async def test_the_end_of_the_block_commits_and_an_error_rolls_back(database_url: str) -> None:
    engine = make_async_engine(database_url, pool_size=1, ping_after_idle=1.0)
    table = scratch_table(database_url)
    try:
        async with driver_transaction(engine) as conn:
            await conn.execute(f"INSERT INTO {table} VALUES (1)")
            [(pid,)] = await (await conn.execute(PID)).fetchall()
        assert rows_in(database_url, table) == [1]

        with pytest.raises(ZeroDivisionError):
            async with driver_transaction(engine) as conn:
                await conn.execute(f"INSERT INTO {table} VALUES (2)")
                raise ZeroDivisionError
        assert rows_in(database_url, table) == [1]

        with pytest.raises(psycopg.errors.DivisionByZero):
            async with driver_transaction(engine) as conn:
                await conn.execute(f"INSERT INTO {table} VALUES (3)")
                await conn.execute("SELECT 1 / 0")
        assert rows_in(database_url, table) == [1]

        # Rolled back, not broken: the same connection serves the next block, in a fresh
        # transaction, and nothing is left checked out.
        async with driver_transaction(engine) as conn:
            [(again,)] = await (await conn.execute(PID)).fetchall()
            await conn.execute(f"INSERT INTO {table} VALUES (4)")
        assert again == pid
        assert rows_in(database_url, table) == [1, 4]
        assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    finally:
        with psycopg.connect(libpq_url(database_url), autocommit=True) as admin:
            admin.execute(f"DROP TABLE {table}")
        await engine.dispose()


async def test_a_connection_that_broke_is_never_handed_out_again(database_url: str) -> None:
    """Nor is any other connection opened before it broke: as SQLAlchemy does on a disconnect,
    the whole pool is replaced, each connection at its next checkout, so a restart or a failover
    costs one failed request, not one per pooled connection."""
    engine = make_async_engine(database_url, pool_size=1, ping_after_idle=60)
    try:
        async with driver_transaction(engine) as one, driver_transaction(engine) as other:
            [(first,)] = await (await one.execute(PID)).fetchall()
            [(second,)] = await (await other.execute(PID)).fetchall()
        with psycopg.connect(libpq_url(database_url), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (first,))

        # Each used a moment ago, so not pinged at checkout: the statement finds it dead.
        with pytest.raises(psycopg.OperationalError):
            async with driver_transaction(engine) as one, driver_transaction(engine) as other:
                for conn in (one, other):
                    await conn.execute(PID)

        async with driver_transaction(engine) as one, driver_transaction(engine) as other:
            [(a,)] = await (await one.execute(PID)).fetchall()
            [(b,)] = await (await other.execute(PID)).fetchall()
        assert {a, b}.isdisjoint({first, second})
        assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    finally:
        await engine.dispose()
