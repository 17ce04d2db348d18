"""SQL of the console: its sessions, the outcome aggregate, queue depth and an override's audit
records. Counts and identities only: no statement here reads a name, an address or content."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import case, delete, func, insert, select
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.db import queue
from herald.db import schema as s

cs = s.console_session
p = s.person
d = s.notification_delivery
a = s.audit_record


# ---------------------------------------------------------------------------------------------
# Sessions


async def insert_session(
    conn: AsyncConnection,
    *,
    tenant_id: str,
    token_hash: str,
    person_id: int,
    role_code: str | None,
    expires_at: datetime,
) -> None:
    await conn.execute(
        insert(cs).values(
            tenant_id=tenant_id,
            token_hash=token_hash,
            person_id=person_id,
            role_code=role_code,
            expires_at=expires_at,
        )
    )


async def find_live_session(conn: AsyncConnection, token_hash: str) -> dict[str, Any] | None:
    """The unexpired session with this hash and its live person's external id and zone."""
    stmt = (
        select(
            cs.c.tenant_id,
            cs.c.person_id,
            cs.c.role_code,
            cs.c.expires_at,
            p.c.external_id,
            p.c.timezone,
        )
        .select_from(cs.join(p, p.c.id == cs.c.person_id))
        .where(
            cs.c.token_hash == token_hash,
            cs.c.expires_at > func.now(),
            p.c.deleted_at.is_(None),
        )
    )
    row = (await conn.execute(stmt)).mappings().first()
    return dict(row) if row is not None else None


async def delete_session(conn: AsyncConnection, token_hash: str) -> int:
    result = await conn.execute(delete(cs).where(cs.c.token_hash == token_hash))
    return int(result.rowcount)


# ---------------------------------------------------------------------------------------------
# Outcomes and queue depth


_OUTCOME_CLASS = case(
    (d.c.status.in_(("sent", "delivered")), "delivered"),
    (d.c.status.in_(("failed", "dead")), "failed"),
    (d.c.status.in_(vocabulary.SKIPPED_STATUSES), "skipped"),
    else_="in_flight",
)


async def current_hour(conn: AsyncConnection) -> datetime:
    moment: datetime = (
        await conn.execute(select(func.date_trunc("hour", func.now())))
    ).scalar_one()
    return moment


async def outcome_counts(conn: AsyncConnection, tenant_id: str, since: datetime) -> list[Row[Any]]:
    """(bucket hour, channel, outcome class, count) of deliveries queued since `since`."""
    bucket = func.date_trunc("hour", d.c.queued_at).label("bucket")
    stmt = (
        select(bucket, d.c.channel, _OUTCOME_CLASS.label("outcome"), func.count().label("n"))
        .where(d.c.tenant_id == tenant_id, d.c.queued_at >= since)
        .group_by(bucket, d.c.channel, _OUTCOME_CLASS)
    )
    return list(await conn.execute(stmt))


async def in_flight_counts(conn: AsyncConnection, tenant_id: str) -> list[Row[Any]]:
    # `processing`: a queued delivery a worker holds (herald.db.queue).
    status = queue.published_status(d.c.status, d.c.id).label("status")
    stmt = (
        select(d.c.channel, status, func.count().label("n"))
        .where(d.c.tenant_id == tenant_id, d.c.status.in_(vocabulary.IN_FLIGHT_STATUSES))
        .group_by(d.c.channel, status)
    )
    return list(await conn.execute(stmt))


# ---------------------------------------------------------------------------------------------
# Audit records of one entity


async def audit_records(
    conn: AsyncConnection, tenant_id: str, entity_type: str, entity_id: str, *, limit: int
) -> list[Row[Any]]:
    stmt = (
        select(a.c.action, a.c.actor_kind, a.c.actor_id, a.c.changes, a.c.created_at)
        .where(
            a.c.tenant_id == tenant_id,
            a.c.entity_type == entity_type,
            a.c.entity_id == entity_id,
        )
        .order_by(a.c.id.desc())
        .limit(limit)
    )
    return list(await conn.execute(stmt))
