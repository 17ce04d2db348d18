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
) -> set[int]:
    result = await conn.execute(
        SQL["throttled_deliveries"],
        {"ids": list(ids), "cap": cap, "window_seconds": window_seconds, "exempt": list(exempt)},
    )
    return {int(row.id) for row in result}
