"""SQL of the process runner's own connections (psycopg, outside any SQLAlchemy pool)."""

from __future__ import annotations

from typing import Any

import psycopg


async def try_presence_lock(conn: psycopg.AsyncConnection[Any], namespace: int, key: int) -> bool:
    """Take the session-level advisory lock (namespace, key) if nobody holds it."""
    cursor = await conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (namespace, key))
    row = await cursor.fetchone()
    return bool(row and row[0])


async def ping(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.execute("SELECT 1")
