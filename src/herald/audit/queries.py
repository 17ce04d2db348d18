"""SQL of the audit trail. Rows are only ever inserted: the trail is append-only."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import schema as s

a = s.audit_record


async def insert_record(
    conn: AsyncConnection,
    *,
    tenant_id: str,
    actor_kind: str,
    actor_id: str,
    action: str,
    entity_type: str,
    entity_id: str,
    changes: dict[str, Any],
) -> None:
    await conn.execute(
        insert(a).values(
            tenant_id=tenant_id,
            actor_kind=actor_kind,
            actor_id=actor_id,
            action=action,
            entity_type=entity_type,
            entity_id=entity_id,
            changes=changes,
        )
    )
