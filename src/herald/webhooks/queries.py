"""SQL of outbound webhooks: endpoints, the outbox insert, the sender's claim and record."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import schema as s
from herald.db import sqlfile

SQL = sqlfile.load(Path(__file__).with_name("queries.sql"))

w = s.webhook_endpoint
m = s.webhook_message

ENDPOINT_COLUMNS = (
    w.c.id,
    w.c.public_id,
    w.c.url,
    w.c.event_types,
    w.c.description,
    w.c.enabled,
    w.c.created_at,
    w.c.updated_at,
)


async def count_endpoints(conn: AsyncConnection, tenant_id: str) -> int:
    stmt = select(func.count()).select_from(w).where(w.c.tenant_id == tenant_id)
    return int((await conn.execute(stmt)).scalar_one())


async def insert_endpoint(
    conn: AsyncConnection, tenant_id: str, values: Mapping[str, Any]
) -> dict[str, Any]:
    stmt = w.insert().values(tenant_id=tenant_id, **values).returning(*ENDPOINT_COLUMNS)
    return dict((await conn.execute(stmt)).mappings().one())


async def list_endpoints(conn: AsyncConnection, tenant_id: str) -> list[dict[str, Any]]:
    stmt = select(*ENDPOINT_COLUMNS).where(w.c.tenant_id == tenant_id).order_by(w.c.id)
    return [dict(row) for row in (await conn.execute(stmt)).mappings()]


async def lock_endpoint(
    conn: AsyncConnection, tenant_id: str, public_id: uuid.UUID
) -> dict[str, Any] | None:
    stmt = (
        select(*ENDPOINT_COLUMNS)
        .where(w.c.tenant_id == tenant_id, w.c.public_id == public_id)
        .with_for_update()
    )
    row = (await conn.execute(stmt)).mappings().first()
    return dict(row) if row else None


async def update_endpoint(
    conn: AsyncConnection, endpoint_id: int, values: Mapping[str, Any]
) -> dict[str, Any]:
    stmt = (
        w.update()
        .where(w.c.id == endpoint_id)
        .values(**values, updated_at=func.now())
        .returning(*ENDPOINT_COLUMNS)
    )
    return dict((await conn.execute(stmt)).mappings().one())


async def delete_endpoint(conn: AsyncConnection, endpoint_id: int) -> None:
    await conn.execute(w.delete().where(w.c.id == endpoint_id))


async def emit(
    conn: AsyncConnection, tenant_id: str, event_type: str, data: Mapping[str, Any]
) -> int:
    result = await conn.execute(
        SQL["emit"],
        {"tenant_id": tenant_id, "event_type": event_type, "data": json.dumps(data, default=str)},
    )
    return int(result.rowcount)


async def emit_for_deliveries(conn: AsyncConnection, tenant_id: str, ids: Sequence[int]) -> int:
    if not ids:
        return 0
    result = await conn.execute(
        SQL["emit_for_deliveries"], {"tenant_id": tenant_id, "ids": list(ids)}
    )
    return int(result.rowcount)


async def insert_test_message(
    conn: AsyncConnection, tenant_id: str, endpoint_id: int, payload: Mapping[str, Any]
) -> uuid.UUID:
    stmt = (
        m.insert()
        .values(
            tenant_id=tenant_id,
            endpoint_id=endpoint_id,
            event_type="webhook.test",
            payload=dict(payload),
        )
        .returning(m.c.public_id)
    )
    return uuid.UUID(str((await conn.execute(stmt)).scalar_one()))


async def claim_due_messages(
    conn: AsyncConnection, limit: int, lease_seconds: int, tenant_id: str | None
) -> list[tuple[int, str]]:
    result = await conn.execute(
        SQL["claim_due_messages"],
        {"limit": limit, "lease_seconds": lease_seconds, "tenant_id": tenant_id},
    )
    return [(int(row.id), str(row.tenant_id)) for row in result]


async def reclaim_expired_messages(
    conn: AsyncConnection, max_attempts: int, limit: int
) -> list[str]:
    """The new status (queued or dead) of each message whose sender died holding it."""
    result = await conn.execute(
        SQL["reclaim_expired_messages"], {"max_attempts": max_attempts, "limit": limit}
    )
    return [str(row.status) for row in result]


async def load_message_contexts(conn: AsyncConnection, ids: Sequence[int]) -> list[dict[str, Any]]:
    result = await conn.execute(SQL["load_message_contexts"], {"ids": list(ids)})
    return [dict(row._mapping) for row in result]


@dataclass
class MessageOutcomes:
    ids: list[int] = field(default_factory=list)
    claimed_ats: list[datetime] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    delays: list[int | None] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)
    response_statuses: list[int | None] = field(default_factory=list)

    def subset(self, indexes: Sequence[int]) -> MessageOutcomes:
        part = MessageOutcomes()
        for name, values in vars(self).items():
            getattr(part, name).extend(values[i] for i in indexes)
        return part


async def record_message_outcomes(conn: AsyncConnection, rows: MessageOutcomes) -> set[int]:
    if not rows.ids:
        return set()
    result = await conn.execute(SQL["record_message_outcomes"], vars(rows))
    return {int(row.id) for row in result}


async def requeue_dead_message(
    conn: AsyncConnection, tenant_id: str, public_id: uuid.UUID
) -> uuid.UUID | None:
    row = (
        await conn.execute(
            SQL["requeue_dead_message"], {"tenant_id": tenant_id, "public_id": public_id}
        )
    ).first()
    return uuid.UUID(str(row.public_id)) if row else None
