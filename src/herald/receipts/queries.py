"""SQL of delivery receipts: find the delivery a receipt names, move it, mark its address."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import schema as s
from herald.db import sqlfile

SQL = sqlfile.load(Path(__file__).with_name("queries.sql"))


async def find_by_provider_message_id(
    conn: AsyncConnection, channel: str, provider_message_id: str
) -> list[tuple[int, str]]:
    result = await conn.execute(
        SQL["find_by_provider_message_id"],
        {"channel": channel, "provider_message_id": provider_message_id},
    )
    return [(int(row.id), str(row.tenant_id)) for row in result]


async def apply_receipt(
    conn: AsyncConnection, delivery_id: int, status: str, code: str | None
) -> dict[str, Any] | None:
    row = (
        await conn.execute(
            SQL["apply_receipt"], {"id": delivery_id, "status": status, "code": code}
        )
    ).first()
    return dict(row._mapping) if row else None


async def mark_undeliverable(
    conn: AsyncConnection,
    channel: str,
    recipient_id: int,
    reason: str,
    delivery_public_id: uuid.UUID,
) -> None:
    await conn.execute(
        SQL["mark_undeliverable"],
        {
            "channel": channel,
            "recipient_id": recipient_id,
            "reason": reason,
            "delivery_public_id": delivery_public_id,
        },
    )


async def delivery_status(conn: AsyncConnection, delivery_id: int) -> str | None:
    d = s.notification_delivery
    row = (await conn.execute(select(d.c.status).where(d.c.id == delivery_id))).first()
    return str(row.status) if row else None
