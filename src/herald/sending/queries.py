"""SQL of the sending stage. Statements are built once and executed by both send() and asend()."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import (
    TIMESTAMP,
    Date,
    Text,
    TextClause,
    Time,
    bindparam,
    func,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import queue
from herald.db import schema as s

FANOUT_CHANNEL = "herald_fanout"


# The event upsert and the fan-out's wake-up as one fixed statement: send() costs the host one
# round trip, and no statement is built or compiled per call (building the SQLAlchemy Core
# insert and its cache key was a third of send()'s time in bench/send.py).
# - ON CONFLICT (tenant, dedupe key) DO UPDATE with a no-op SET (R-DEDUPE-2), so RETURNING yields
#   the row on both paths; the SET rewrites dedupe_key with its own value and touches no other
#   column, in particular not the fan-out claim or completion (R-DEDUPE-4).
# - `inserted` is `xmax = 0`: true only for a row this statement inserted.
# - A scheduled event occurs when it fires: the centre sorts and retention ages it from then
#   (greatest() ignores a NULL scheduled_for, leaving now()).
# - The upsert always returns its row, so pg_notify runs exactly once: a transactional wake-up,
#   delivered to listeners on commit, discarded on rollback.
RECORD_AND_WAKE = text(
    """
    WITH ins AS (
        INSERT INTO notification_event
               (tenant_id, kind, category, priority, audience, channels, variables, action_url,
                dedupe_key, request_id, scheduled_for, occurred_at, origin_request_id, traceparent,
                audience_frozen_at, deliver_local_time, deliver_local_date)
        VALUES (:tenant_id, :kind, :category, :priority, :audience, :channels, :variables,
                :action_url, :dedupe_key, :request_id, :scheduled_for,
                greatest(now(), :scheduled_for), :origin_request_id, :traceparent,
                :audience_frozen_at, :deliver_local_time, :deliver_local_date)
        ON CONFLICT (tenant_id, dedupe_key) DO UPDATE SET dedupe_key = notification_event.dedupe_key
        RETURNING public_id, (xmax = 0) AS inserted
    )
    SELECT public_id, inserted, pg_notify(:wake_channel, '') AS woken FROM ins
    """
).bindparams(
    bindparam("audience", type_=JSONB),
    bindparam("variables", type_=JSONB),
    bindparam("channels", type_=ARRAY(Text)),
    bindparam("scheduled_for", type_=TIMESTAMP(timezone=True)),
    bindparam("audience_frozen_at", type_=TIMESTAMP(timezone=True)),
    bindparam("deliver_local_time", type_=Time),
    bindparam("deliver_local_date", type_=Date),
)
_COLUMNS = (
    "tenant_id",
    "kind",
    "category",
    "priority",
    "audience",
    "channels",
    "variables",
    "action_url",
    "dedupe_key",
    "request_id",
    "scheduled_for",
    "origin_request_id",
    "traceparent",
    "audience_frozen_at",
    "deliver_local_time",
    "deliver_local_date",
)


def record_and_wake(values: Mapping[str, Any]) -> tuple[TextClause, dict[str, Any]]:
    """RECORD_AND_WAKE and its parameters; a column absent from `values` is NULL."""
    unknown = set(values) - set(_COLUMNS)
    if unknown:
        raise ValueError(f"record_and_wake: unknown columns {sorted(unknown)}")
    params = {name: values.get(name) for name in _COLUMNS}
    params["wake_channel"] = FANOUT_CHANNEL
    return RECORD_AND_WAKE, params


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
    status = queue.published_status(d.c.status, d.c.id)  # processing: claimed (db.queue)
    counts = (
        await conn.execute(
            select(status, func.count()).where(d.c.event_id == row.id).group_by(status)
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
