"""SQL of delivery receipts: find the delivery a receipt names, move it, mark its address; keep
a receipt that came before its send was recorded, and take it back when it is."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import queue, sqlfile
from herald.db import schema as s

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


async def park_receipt(
    conn: AsyncConnection,
    *,
    provider: str,
    channel: str,
    provider_message_id: str,
    status: str,
    code: str | None,
    hard: bool,
    provider_status: str,
) -> None:
    await conn.execute(
        SQL["park_receipt"],
        {
            "provider": provider,
            "channel": channel,
            "provider_message_id": provider_message_id,
            "status": status,
            "code": code,
            "hard": hard,
            "provider_status": provider_status,
        },
    )


async def lock_message_ids(
    conn: AsyncConnection, channel: str, provider_message_ids: list[str]
) -> None:
    await conn.execute(
        SQL["lock_message_ids"],
        {"channel": channel, "provider_message_ids": provider_message_ids},
    )


async def take_parked_receipts(
    conn: AsyncConnection, channel: str, provider_message_ids: list[str]
) -> list[dict[str, Any]]:
    result = await conn.execute(
        SQL["take_parked_receipts"],
        {"channel": channel, "provider_message_ids": provider_message_ids},
    )
    return sorted((dict(row._mapping) for row in result), key=lambda row: int(row["id"]))


async def mark_person_undeliverable(
    conn: AsyncConnection,
    channel: str,
    person_id: int,
    reason: str,
    delivery_public_id: uuid.UUID,
) -> None:
    await conn.execute(
        SQL["mark_person_undeliverable"],
        {
            "channel": channel,
            "person_id": person_id,
            "reason": reason,
            "delivery_public_id": delivery_public_id,
        },
    )


async def delivery_status(conn: AsyncConnection, delivery_id: int) -> str | None:
    """The delivery's published status (`processing` while a worker holds it, herald.db.queue)."""
    d = s.notification_delivery
    status = queue.published_status(d.c.status, d.c.id).label("status")
    row = (await conn.execute(select(status).where(d.c.id == delivery_id))).first()
    return str(row.status) if row else None
