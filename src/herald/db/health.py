"""The readiness probe's one statement."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection


async def ping(conn: AsyncConnection) -> None:
    await conn.execute(text("SELECT 1"))
