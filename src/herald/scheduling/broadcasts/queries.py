"""SQL of broadcasts.

Every admin statement is scoped by tenant_id (and runs under the tenant's row-level security).
Operator changes are compare-and-sets: `UPDATE … SET version = version + 1 … WHERE state =
'draft' AND version = :read RETURNING …`, zero rows back being the refusal the service then
explains from a re-read.

The scheduler's statements: `due_broadcasts` and `unsettled_broadcasts` are the cross-tenant
reads (ids and tenants only); `lock_due` and `lock_unsettled` lock one broadcast still in the
state it was seen in (SKIP LOCKED: another scheduler or an operator's cancel holds it).

Counts are read from the delivery and recipient rows themselves, never from counters kept
beside them (R-BCAST-10).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, literal_column, select, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.db import queue, records
from herald.db import schema as s

b = s.broadcast
e = s.notification_event
d = s.notification_delivery
rcp = s.notification_recipient

COLUMNS = tuple(c for c in b.c)


now = records.now


# ---------------------------------------------------------------------------------------------
# Admin


async def insert_broadcast(
    conn: AsyncConnection, tenant_id: str, values: Mapping[str, Any], *, actor: str
) -> RowMapping:
    return await records.insert_authored(conn, b, COLUMNS, tenant_id, values, actor=actor)


async def find(conn: AsyncConnection, tenant_id: str, public_id: uuid.UUID) -> RowMapping | None:
    return await records.find_by_public_id(conn, b, COLUMNS, tenant_id, public_id)


async def list_page(
    conn: AsyncConnection, tenant_id: str, *, before_id: int | None, limit: int
) -> Sequence[RowMapping]:
    """One page of a tenant's broadcasts, newest first (id is the order and the tie-break)."""
    query = select(*COLUMNS).where(b.c.tenant_id == tenant_id)
    if before_id is not None:
        query = query.where(b.c.id < before_id)
    query = query.order_by(b.c.id.desc()).limit(limit)
    return (await conn.execute(query)).mappings().all()


async def update_draft(
    conn: AsyncConnection,
    tenant_id: str,
    row_id: int,
    *,
    expected_version: int,
    changes: Mapping[str, Any],
    actor: str,
) -> RowMapping | None:
    stmt = (
        update(b)
        .where(
            b.c.tenant_id == tenant_id,
            b.c.id == row_id,
            b.c.state == "draft",
            b.c.version == expected_version,
        )
        .values(version=b.c.version + 1, updated_by=actor, updated_at=func.now(), **dict(changes))
        .returning(*COLUMNS)
    )
    return (await conn.execute(stmt)).mappings().one_or_none()


async def approve(
    conn: AsyncConnection, tenant_id: str, row_id: int, *, expected_version: int, approver: str
) -> RowMapping | None:
    """draft → approved, on the version the approver read. The CHECK approver_not_creator backs
    the service's own refusal of a self-approval (R-BCAST-5)."""
    stmt = (
        update(b)
        .where(
            b.c.tenant_id == tenant_id,
            b.c.id == row_id,
            b.c.state == "draft",
            b.c.version == expected_version,
        )
        .values(
            state="approved",
            approved_by=approver,
            approved_at=func.now(),
            version=b.c.version + 1,
            updated_by=approver,
            updated_at=func.now(),
        )
        .returning(*COLUMNS)
    )
    return (await conn.execute(stmt)).mappings().one_or_none()


async def cancel(
    conn: AsyncConnection, tenant_id: str, row_id: int, actor: str
) -> RowMapping | None:
    """draft, approved or sending → cancelled, one compare-and-set. Waits for a scheduler that
    is releasing the broadcast (it holds the row), then sees the released row, event and all.
    A broadcast never released is settled at once; a released one once its deliveries are."""
    stmt = (
        update(b)
        .where(
            b.c.tenant_id == tenant_id,
            b.c.id == row_id,
            b.c.state.in_(vocabulary.CANCELLABLE_BROADCAST_STATES),
        )
        .values(
            state="cancelled",
            cancelled_at=func.now(),
            cancelled_by=actor,
            settled_at=func.coalesce(b.c.settled_at, _now_if_unreleased()),
            version=b.c.version + 1,
            updated_by=actor,
            updated_at=func.now(),
        )
        .returning(*COLUMNS)
    )
    return (await conn.execute(stmt)).mappings().one_or_none()


def _now_if_unreleased() -> Any:
    return literal_column("CASE WHEN broadcast.event_id IS NULL THEN now() END")


async def delivery_counts(conn: AsyncConnection, event_id: int) -> list[tuple[str, str, int]]:
    """(channel, status, n) of the event's delivery rows."""
    status = queue.published_status(d.c.status, d.c.id)  # processing: claimed (db.queue)
    query = (
        select(d.c.channel, status, func.count())
        .where(d.c.event_id == event_id)
        .group_by(d.c.channel, status)
    )
    return [(row[0], row[1], int(row[2])) for row in await conn.execute(query)]


async def recipient_count(conn: AsyncConnection, event_id: int) -> int:
    query = select(func.count()).select_from(rcp).where(rcp.c.event_id == event_id)
    return int((await conn.execute(query)).scalar_one())


async def external_ids(conn: AsyncConnection, person_ids: Sequence[int]) -> dict[int, str]:
    """The preview sample's external ids (at most 20 people, by primary key)."""
    if not person_ids:
        return {}
    p = s.person
    query = select(p.c.id, p.c.external_id).where(p.c.id.in_(list(person_ids)))
    return {row.id: row.external_id for row in await conn.execute(query)}


async def rename_actor(conn: AsyncConnection, tenant_id: str, label: str, replacement: str) -> int:
    """An erased operator's label, in every column that names who acted, becomes `replacement`
    (distinct per person, so the approver_not_creator CHECK still holds)."""
    total = 0
    for column in ("created_by", "updated_by", "approved_by", "cancelled_by"):
        stmt = (
            update(b)
            .where(b.c.tenant_id == tenant_id, b.c[column] == label)
            .values({column: replacement})
        )
        total += (await conn.execute(stmt)).rowcount
    return total


# ---------------------------------------------------------------------------------------------
# The scheduler


async def due_broadcasts(conn: AsyncConnection, *, limit: int) -> Sequence[RowMapping]:
    """Approved broadcasts whose time has come (at approval when unscheduled), oldest first,
    through broadcast_due_idx. Across tenants, so ids and tenants only."""
    due_at = func.coalesce(b.c.scheduled_for, b.c.approved_at)
    query = (
        select(b.c.id, b.c.tenant_id)
        .where(b.c.state == "approved", due_at <= func.now())
        .order_by(due_at, b.c.id)
        .limit(limit)
    )
    return (await conn.execute(query)).mappings().all()


async def lock_due(conn: AsyncConnection, tenant_id: str, row_id: int) -> RowMapping | None:
    query = (
        select(*COLUMNS)
        .where(
            b.c.tenant_id == tenant_id,
            b.c.id == row_id,
            b.c.state == "approved",
            func.coalesce(b.c.scheduled_for, b.c.approved_at) <= func.now(),
        )
        .with_for_update(skip_locked=True)
    )
    return (await conn.execute(query)).mappings().one_or_none()


async def event_id_of(conn: AsyncConnection, tenant_id: str, public_id: uuid.UUID) -> int:
    query = select(e.c.id).where(e.c.tenant_id == tenant_id, e.c.public_id == public_id)
    return int((await conn.execute(query)).scalar_one())


async def mark_sending(
    conn: AsyncConnection,
    row_id: int,
    *,
    frozen_at: datetime,
    event_id: int,
    event_public_id: uuid.UUID,
) -> None:
    stmt = (
        update(b)
        .where(b.c.id == row_id, b.c.state == "approved")
        .values(
            state="sending",
            audience_frozen_at=frozen_at,
            event_id=event_id,
            event_public_id=event_public_id,
            updated_at=func.now(),
        )
    )
    if (await conn.execute(stmt)).rowcount != 1:
        raise RuntimeError("the broadcast moved while it was locked")


async def mark_release_failed(conn: AsyncConnection, row_id: int, actor: str) -> None:
    """A release the send path refuses (the registry changed under an approved broadcast) is
    cancelled with the reason as its actor, rather than retried every tick forever."""
    stmt = (
        update(b)
        .where(b.c.id == row_id, b.c.state == "approved")
        .values(
            state="cancelled",
            cancelled_at=func.now(),
            cancelled_by=actor,
            settled_at=func.now(),
            updated_at=func.now(),
        )
    )
    await conn.execute(stmt)


async def unsettled_broadcasts(
    conn: AsyncConnection, *, after_id: int, limit: int
) -> Sequence[RowMapping]:
    """Released or cancelled broadcasts with work possibly in flight (broadcast_unsettled_idx).
    Across tenants: ids and tenants only."""
    query = (
        select(b.c.id, b.c.tenant_id)
        .where(b.c.state.in_(("sending", "cancelled")), b.c.settled_at.is_(None), b.c.id > after_id)
        .order_by(b.c.id)
        .limit(limit)
    )
    return (await conn.execute(query)).mappings().all()


async def lock_unsettled(conn: AsyncConnection, tenant_id: str, row_id: int) -> RowMapping | None:
    """The broadcast, locked, with whether its event's fan-out has completed or given up."""
    completed = (
        select(e.c.fanout_completed_at.is_not(None))
        .where(e.c.id == b.c.event_id)
        .scalar_subquery()
        .label("fanout_completed")
    )
    failed = (
        select(e.c.fanout_failed_at.is_not(None))
        .where(e.c.id == b.c.event_id)
        .scalar_subquery()
        .label("fanout_failed")
    )
    query = (
        select(*COLUMNS, completed, failed)
        .where(
            b.c.tenant_id == tenant_id,
            b.c.id == row_id,
            b.c.state.in_(("sending", "cancelled")),
            b.c.settled_at.is_(None),
        )
        .with_for_update(of=b, skip_locked=True)
    )
    return (await conn.execute(query)).mappings().one_or_none()


async def mark_completed(conn: AsyncConnection, row_id: int) -> None:
    stmt = (
        update(b)
        .where(b.c.id == row_id, b.c.state == "sending")
        .values(state="completed", completed_at=func.now(), settled_at=func.now())
    )
    await conn.execute(stmt)


async def mark_failed(conn: AsyncConnection, row_id: int) -> None:
    stmt = (
        update(b)
        .where(b.c.id == row_id, b.c.state == "sending")
        .values(state="failed", failed_at=func.now(), settled_at=func.now())
    )
    await conn.execute(stmt)


async def mark_settled(conn: AsyncConnection, row_id: int) -> None:
    stmt = update(b).where(b.c.id == row_id, b.c.settled_at.is_(None)).values(settled_at=func.now())
    await conn.execute(stmt)


# How many roles and groups the console's audience picker lists (a school has tens of each).
CHOICES_LIMIT = 1000


async def role_choices(conn: AsyncConnection, tenant_id: str) -> list[tuple[str, str]]:
    """(code, name) of the tenant's roles, by code: what a role audience can name."""
    r = s.role
    query = (
        select(r.c.code, r.c.name)
        .where(r.c.tenant_id == tenant_id)
        .order_by(r.c.code)
        .limit(CHOICES_LIMIT)
    )
    return [(row.code, row.name) for row in await conn.execute(query)]


async def group_choices(conn: AsyncConnection, tenant_id: str) -> list[tuple[str, str]]:
    """(external id, name) of the tenant's live groups, by name."""
    g = s.person_group
    query = (
        select(g.c.external_id, g.c.name)
        .where(g.c.tenant_id == tenant_id, g.c.deleted_at.is_(None))
        .order_by(g.c.name, g.c.external_id)
        .limit(CHOICES_LIMIT)
    )
    return [(row.external_id, row.name) for row in await conn.execute(query)]
