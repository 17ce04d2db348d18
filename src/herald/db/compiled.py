"""Hot statements built and compiled once per process.

SQLAlchemy Core builds a statement as a tree of Python objects and, on every execution, walks it
for its cache key before finding the compiled SQL in its cache; for the inbox's statements (four
correlated subqueries) building and walking cost more than PostgreSQL's execution. A hot path
builds its statement once (functools.cache), with bind parameters for the values of a request,
compiles it once for the psycopg dialect, and runs the SQL text on psycopg's cursor (`rows`) or
with `exec_driver_sql` (`execute`, when a caller wants SQLAlchemy's result). The
statement object stays available for EXPLAIN and tests (`statement.params(...)`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy import CursorResult
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ClauseElement

DIALECT = psycopg_dialect.dialect()  # type: ignore[no-untyped-call]

# A pooled connection's own psycopg connection, in a transaction a caller runs itself
# (herald.db.engine.driver_transaction).
Driver = psycopg.AsyncConnection[Any]


@dataclass(frozen=True)
class Compiled:
    """A statement compiled once for psycopg; executed with exec_driver_sql and a dict."""

    statement: ClauseElement
    sql: str
    # The values the statement itself binds (a subquery's LIMIT 1), under a request's own.
    defaults: dict[str, Any]

    @classmethod
    def of(cls, statement: ClauseElement) -> Compiled:
        compiled = statement.compile(dialect=DIALECT)
        return cls(statement, str(compiled), dict(compiled.params))

    async def execute(self, conn: AsyncConnection, params: dict[str, Any]) -> CursorResult[Any]:
        return await conn.exec_driver_sql(self.sql, self.defaults | params)

    async def rows(
        self, conn: AsyncConnection | Driver, params: dict[str, Any]
    ) -> list[tuple[Any, ...]]:
        """Every row, as plain tuples, straight from psycopg's cursor on the connection's own
        driver connection, in its transaction.

        `exec_driver_sql` costs about 70 µs of Python a statement on top of psycopg (a greenlet
        switch, an execution context, a CursorResult and its metadata built from the cursor's
        description), a tenth of an inbox request; SQLAlchemy adds no type processing to a
        driver-level statement, so the values are the same. psycopg starts the transaction
        SQLAlchemy began (its implicit BEGIN, as for any first statement), and an error reaches
        the route as psycopg's own (herald.outages reads both); the transaction's
        rollback then goes through SQLAlchemy, which replaces a connection that broke. Given a
        psycopg connection (a Driver), the statement runs on it as it is."""
        async with (await _driver(conn)).cursor() as cursor:
            await cursor.execute(self.sql, self.defaults | params)
            return await cursor.fetchall() if cursor.description is not None else []

    async def rowcount(self, conn: AsyncConnection | Driver, params: dict[str, Any]) -> int:
        """How many rows the statement changed, run as `rows` runs it."""
        async with (await _driver(conn)).cursor() as cursor:
            await cursor.execute(self.sql, self.defaults | params)
            return cursor.rowcount


async def _driver(conn: AsyncConnection | Driver) -> Driver:
    """The psycopg connection itself: given, or the one under SQLAlchemy's connection."""
    if isinstance(conn, psycopg.AsyncConnection):
        return conn
    raw = await conn.get_raw_connection()
    driver: Driver = raw.driver_connection  # type: ignore[assignment]
    return driver


@asynccontextmanager
async def unprepared(conn: AsyncConnection) -> AsyncIterator[None]:
    """Statements run on `conn` inside the block are sent unprepared, so PostgreSQL plans each
    with the values it is given, every time (an unnamed statement always gets a custom plan).

    For a statement whose best plan depends on its values (an audience page: the tenant and the
    cursor), where psycopg would otherwise prepare it after its fifth run and the server could
    then settle on one generic plan. It is not `plan_cache_mode = force_custom_plan`: that
    setting also re-plans every saved plan the statement runs — the foreign-key checks of each
    row it inserts among them. A fan-out batch spent half of its server time planning those
    checks under it (perf, 2026-12-03). psycopg's threshold is put back after the block."""
    driver = await _driver(conn)
    threshold = driver.prepare_threshold
    driver.prepare_threshold = None
    try:
        yield
    finally:
        driver.prepare_threshold = threshold
