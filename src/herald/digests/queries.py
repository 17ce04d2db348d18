"""SQL of the digest sweeper: due groups, one group's rows, and the digest's own rows."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import queue, sqlfile
from herald.db import schema as s

SQL = sqlfile.load(Path(__file__).with_name("queries.sql"))


async def due_digest_groups(
    conn: AsyncConnection, windows: Mapping[str, int], limit: int
) -> list[dict[str, Any]]:
    if not windows:
        return []
    result = await conn.execute(
        SQL["due_digest_groups"],
        {"kinds": list(windows), "windows": list(windows.values()), "limit": limit},
    )
    return [dict(row._mapping) for row in result]


async def lock_held_group(
    conn: AsyncConnection, *, channel: str, kind: str, person_id: int | None, limit: int
) -> list[dict[str, Any]]:
    result = await conn.execute(
        SQL["lock_held_group"],
        {"channel": channel, "kind": kind, "person_id": person_id, "limit": limit},
    )
    return [dict(row._mapping) for row in result]


async def release_held(conn: AsyncConnection, ids: Sequence[int]) -> int:
    result = await conn.execute(SQL["release_held"], {"ids": list(ids)})
    return int(result.scalar_one())


async def mark_digested(conn: AsyncConnection, ids: Sequence[int], digest_id: int) -> int:
    result = await conn.execute(SQL["mark_digested"], {"ids": list(ids), "digest_id": digest_id})
    return int(result.rowcount)


async def insert_digest(
    conn: AsyncConnection,
    *,
    tenant_id: str,
    kind: str,
    channel: str,
    first: Mapping[str, Any],
    variables: Mapping[str, str],
    person_id: int,
) -> dict[str, Any]:
    """The digest as an ordinary event already fanned out to its one recipient, and its one
    queued delivery, which the channel worker claims, retries and dead-letters like any other."""
    e, r, d = s.notification_event, s.notification_recipient, s.notification_delivery
    # The oldest item's id is carried by exactly one digest, so the key is unique per digest.
    dedupe = hashlib.sha256(f"digest:{first['public_id']}".encode()).hexdigest()
    event_id = (
        await conn.execute(
            e.insert()
            .values(
                tenant_id=tenant_id,
                kind=kind,
                category=first["category"],
                priority=first["priority"],
                audience={"kind": "users", "userIds": [first["external_id"]]},
                channels=[channel],
                variables=dict(variables),
                dedupe_key=dedupe,
                fanout_claimed_at=func.now(),
                fanout_claim_token=uuid.uuid4(),
                fanout_completed_at=func.now(),
                recipient_count=1,
                fanout_attempts=1,
            )
            .returning(e.c.id)
        )
    ).scalar_one()
    occurred_at = (
        await conn.execute(select(e.c.occurred_at).where(e.c.id == event_id))
    ).scalar_one()
    recipient_id = (
        await conn.execute(
            r.insert()
            .values(
                tenant_id=tenant_id,
                event_id=event_id,
                user_id=person_id,
                user_public_id_snapshot=first["person_public_id"],
                variables={"name": first["full_name"] or "there"},
                locale=first["locale"],
                occurred_at=occurred_at,
            )
            .returning(r.c.id)
        )
    ).scalar_one()
    entered = (
        d.insert()
        .values(
            tenant_id=tenant_id,
            event_id=event_id,
            recipient_id=recipient_id,
            channel=channel,
            status="queued",
            occurred_at=occurred_at,  # its recipient's month (the partition key)
        )
        .returning(
            d.c.id,
            d.c.public_id,
            d.c.tenant_id,
            d.c.channel,
            d.c.status,
            d.c.occurred_at,
            d.c.next_attempt_at,
        )
        .cte("entered")
    )
    # The delivery's queue row in the same statement (herald.db.queue).
    enqueued = queue.enter_queue(entered).cte("enqueued")
    row = (await conn.execute(select(entered.c.id, entered.c.public_id).add_cte(enqueued))).one()
    return {"id": int(row.id), "public_id": row.public_id, "event_id": int(event_id)}
