"""Hot statements built and compiled once per process.

SQLAlchemy Core builds a statement as a tree of Python objects and, on every execution, walks it
for its cache key before finding the compiled SQL in its cache; for the inbox's statements (four
correlated subqueries) building and walking cost more than PostgreSQL's execution. A hot path
builds its statement once (functools.cache), with bind parameters for the values of a request,
compiles it once for the psycopg dialect, and runs the SQL text with `exec_driver_sql`. The
statement object stays available for EXPLAIN and tests (`statement.params(...)`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import CursorResult
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ClauseElement

DIALECT = psycopg_dialect.dialect()  # type: ignore[no-untyped-call]


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

    async def rows(self, conn: AsyncConnection, params: dict[str, Any]) -> list[Any]:
        """Every row, as plain tuples."""
        return [tuple(row) for row in await self.execute(conn, params)]
