"""SQL of the throttle."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import sqlfile

SQL = sqlfile.load(Path(__file__).with_name("queries.sql"))


async def throttled_deliveries(
    conn: AsyncConnection,
    ids: Sequence[int],
    *,
    cap: int,
    window_seconds: int,
    exempt: Sequence[str],
) -> dict[int, str]:
    """The deliveries past the cap, each with its category."""
    result = await conn.execute(
        SQL["throttled_deliveries"],
        {"ids": list(ids), "cap": cap, "window_seconds": window_seconds, "exempt": list(exempt)},
    )
    return {int(row.id): str(row.category) for row in result}
