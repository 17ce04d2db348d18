"""SQL of the sending stage. Statements are built once and executed by both send() and asend()."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Executable, func, literal_column, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import schema as s

FANOUT_CHANNEL = "herald_fanout"


def insert_event(values: Mapping[str, Any]) -> Executable:
    """The event upsert (R-DEDUPE-2): ON CONFLICT (tenant, dedupe key) DO UPDATE with a no-op SET,
    so RETURNING yields the row on both paths. The SET rewrites dedupe_key with its own value and
    touches no other column, in particular not the fan-out claim or completion (R-DEDUPE-4).

    `inserted` is `xmax = 0`: true only for a row this statement inserted.
    """
    e = s.notification_event
    row = dict(values)
    if row.get("scheduled_for") is not None:
        # A scheduled event occurs when it fires: the centre sorts and retention ages it from then.
        row["occurred_at"] = func.greatest(func.now(), row["scheduled_for"])
    stmt = insert(e).values(**row)
    return stmt.on_conflict_do_update(
        index_elements=[e.c.tenant_id, e.c.dedupe_key],
        set_={"dedupe_key": e.c.dedupe_key},
    ).returning(e.c.public_id, literal_column("(xmax = 0)").label("inserted"))


def wake_fanout() -> Executable:
    """A transactional wake-up: delivered to listeners on commit, discarded on rollback."""
    return select(func.pg_notify(FANOUT_CHANNEL, ""))


async def event_status(
    conn: AsyncConnection, tenant_id: str, public_id: uuid.UUID
) -> dict[str, Any] | None:
    e, d = s.notification_event, s.notification_delivery
    row = (
        await conn.execute(
            select(
                e.c.id,
                e.c.public_id,
                e.c.kind,
                e.c.scheduled_for,
                e.c.cancelled_at,
                e.c.fanout_claimed_at,
                e.c.fanout_completed_at,
                e.c.fanout_failed_at,
                e.c.recipient_count,
                func.now().label("now"),
            ).where(e.c.tenant_id == tenant_id, e.c.public_id == public_id)
        )
    ).first()
    if row is None:
        return None
    counts = (
        await conn.execute(
            select(d.c.status, func.count()).where(d.c.event_id == row.id).group_by(d.c.status)
        )
    ).all()
    return {**row._asdict(), "deliveries": {status: n for status, n in counts}}


async def cancel_event(
    conn: AsyncConnection, tenant_id: str, public_id: uuid.UUID, actor: str
) -> dict[str, Any] | None:
    """Cancel as one compare-and-set (R-ADMIN-15): it matches only an event nobody has cancelled
    and the fan-out has not touched. `fanout_cursor = 0` keeps out an event whose claim was
    released mid-way (reaper or drain): its first pages are written, so its fan-out has started.
    The fan-out claim skips cancelled rows, so once this commits nothing is ever sent; if the
    claim locked the row first, this UPDATE waits, re-checks the WHERE and matches nothing."""
    e = s.notification_event
    row = (
        await conn.execute(
            update(e)
            .where(
                e.c.tenant_id == tenant_id,
                e.c.public_id == public_id,
                e.c.cancelled_at.is_(None),
                e.c.fanout_claimed_at.is_(None),
                e.c.fanout_completed_at.is_(None),
                e.c.fanout_cursor == 0,
            )
            .values(cancelled_at=func.now(), cancelled_by=actor)
            .returning(e.c.public_id, e.c.kind, e.c.cancelled_at, e.c.cancelled_by)
        )
    ).first()
    return dict(row._mapping) if row else None


async def cancel_refusal_state(
    conn: AsyncConnection, tenant_id: str, public_id: uuid.UUID
) -> dict[str, Any] | None:
    """Re-read after a cancel matched nothing, to say why (R-ADMIN-16)."""
    e = s.notification_event
    row = (
        await conn.execute(
            select(
                e.c.cancelled_at,
                e.c.fanout_claimed_at,
                e.c.fanout_completed_at,
                e.c.fanout_cursor,
            ).where(e.c.tenant_id == tenant_id, e.c.public_id == public_id)
        )
    ).first()
    return dict(row._mapping) if row else None
