"""SQL of the admin history screen: events, their delivery counts, and one event's deliveries.

Every statement names its columns one by one. None selects `notification_event.variables`
(R-ADMIN-11), `rendered_title` or `rendered_body` (R-ADMIN-12), `destination_hint` (a masked
address), the audience specification or the action URL, and none joins a person table
(R-ADMIN-13): history is readable without superadmin (R-SEC-4), so nothing carrying a name, an
address or a secret is read into memory in the first place, not merely left out of the response.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, exists, func, or_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import queue
from herald.db import schema as s

e = s.notification_event
d = s.notification_delivery
a = s.notification_delivery_attempt

# The event columns history may read: identity, classification, timing and fan-out progress.
_EVENT_COLUMNS = (
    e.c.id,
    e.c.public_id,
    e.c.kind,
    e.c.category,
    e.c.priority,
    e.c.scheduled_for,
    e.c.occurred_at,
    e.c.cancelled_at,
    e.c.fanout_claimed_at,
    e.c.fanout_failed_at,
    e.c.fanout_completed_at,
    e.c.recipient_count,
    func.now().label("now"),
)


@dataclass(frozen=True)
class EventFilters:
    kind: str | None = None
    category: str | None = None
    state: str | None = None
    # occurred_at >= occurred_from and occurred_at < occurred_to.
    occurred_from: datetime | None = None
    occurred_to: datetime | None = None


def state_predicate(state: str) -> ColumnElement[bool]:
    """The rows herald.sending.service.event_state() calls `state`, as SQL (same precedence:
    cancelled, completed, fanning out, then scheduled or pending by the clock)."""
    live = e.c.cancelled_at.is_(None)
    unclaimed = and_(live, e.c.fanout_completed_at.is_(None), e.c.fanout_claimed_at.is_(None))
    if state == "cancelled":
        return e.c.cancelled_at.is_not(None)
    if state == "completed":
        return and_(live, e.c.fanout_completed_at.is_not(None))
    if state == "failed":
        return and_(live, e.c.fanout_failed_at.is_not(None))
    if state == "fanning_out":
        return and_(
            live,
            e.c.fanout_completed_at.is_(None),
            e.c.fanout_claimed_at.is_not(None),
            e.c.fanout_failed_at.is_(None),
        )
    if state == "scheduled":
        return and_(unclaimed, e.c.scheduled_for > func.now())
    if state == "pending":
        return and_(unclaimed, or_(e.c.scheduled_for.is_(None), e.c.scheduled_for <= func.now()))
    raise ValueError(f"unknown event state {state!r}")


def _filtered(tenant_id: str, filters: EventFilters) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = [e.c.tenant_id == tenant_id]
    if filters.kind is not None:
        where.append(e.c.kind == filters.kind)
    if filters.category is not None:
        where.append(e.c.category == filters.category)
    if filters.state is not None:
        where.append(state_predicate(filters.state))
    if filters.occurred_from is not None:
        where.append(e.c.occurred_at >= filters.occurred_from)
    if filters.occurred_to is not None:
        where.append(e.c.occurred_at < filters.occurred_to)
    return where


async def list_events(
    conn: AsyncConnection,
    tenant_id: str,
    filters: EventFilters,
    *,
    after: tuple[datetime, int] | None,
    limit: int,
) -> list[dict[str, Any]]:
    """One page, newest first, the id breaking ties so a page boundary never drops or repeats a
    row (R-ADMIN-10)."""
    where = _filtered(tenant_id, filters)
    if after is not None:
        where.append(tuple_(e.c.occurred_at, e.c.id) < tuple_(after[0], after[1]))
    stmt = (
        select(*_EVENT_COLUMNS)
        .where(*where)
        .order_by(e.c.occurred_at.desc(), e.c.id.desc())
        .limit(limit)
    )
    return [dict(row) for row in (await conn.execute(stmt)).mappings()]


async def find_event(
    conn: AsyncConnection, tenant_id: str, public_id: uuid.UUID
) -> dict[str, Any] | None:
    stmt = select(*_EVENT_COLUMNS).where(e.c.tenant_id == tenant_id, e.c.public_id == public_id)
    row = (await conn.execute(stmt)).mappings().first()
    return dict(row) if row is not None else None


async def delivery_counts(
    conn: AsyncConnection, tenant_id: str, event_ids: Sequence[int]
) -> dict[int, dict[str, int]]:
    """Delivery counts by status for a whole page of events in one grouped query (not one per
    event)."""
    if not event_ids:
        return {}
    status = queue.published_status(d.c.status, d.c.id).label("status")
    stmt = (
        select(d.c.event_id, status, func.count().label("n"))
        .where(d.c.tenant_id == tenant_id, d.c.event_id.in_(list(event_ids)))
        .group_by(d.c.event_id, status)
    )
    counts: dict[int, dict[str, int]] = {event_id: {} for event_id in event_ids}
    for row in await conn.execute(stmt):
        counts[row.event_id][row.status] = int(row.n)
    return counts


async def list_deliveries(
    conn: AsyncConnection,
    tenant_id: str,
    event_id: int,
    *,
    channel: str | None,
    status: str | None,
    after: tuple[datetime, int] | None,
    limit: int,
) -> list[dict[str, Any]]:
    """One page of an event's deliveries in the order they were queued, the id breaking ties.
    The original of a replay is a self-join on the delivery table, for its public id only."""
    original = d.alias("original")
    where: list[ColumnElement[bool]] = [d.c.tenant_id == tenant_id, d.c.event_id == event_id]
    if channel is not None:
        where.append(d.c.channel == channel)
    if status is not None:
        where.append(queue.status_is(d.c.status, d.c.id, status))
    if after is not None:
        where.append(tuple_(d.c.queued_at, d.c.id) > tuple_(after[0], after[1]))
    stmt = (
        select(
            d.c.id,
            d.c.public_id,
            d.c.channel,
            queue.published_status(d.c.status, d.c.id).label("status"),
            d.c.attempts,
            d.c.failure_count,
            d.c.lease_expiry_count,
            d.c.queued_at,
            d.c.sent_at,
            d.c.delivered_at,
            d.c.failed_at,
            d.c.skipped_at,
            d.c.dead_at,
            d.c.last_error,
            d.c.provider_message_id,
            d.c.template_version,
            d.c.rendered_hash,
            original.c.public_id.label("replay_of_delivery_id"),
            # The attempt evidence that tells a mock provider's "send" (a skipped attempt)
            # from a channel with no provider at all (no attempt): the reason history gives.
            exists()
            .where(
                s.notification_delivery_attempt.c.delivery_id == d.c.id,
                s.notification_delivery_attempt.c.outcome == "skipped",
            )
            .label("provider_was_mock"),
            # The provider of the latest attempt (failover: which of the channel's providers
            # answered last), from the attempt's delivery index within the delivery's month.
            select(a.c.provider)
            .where(a.c.delivery_id == d.c.id, a.c.occurred_at == d.c.occurred_at)
            .order_by(a.c.attempt_number.desc(), a.c.id.desc())
            .limit(1)
            .scalar_subquery()
            .label("provider"),
        )
        .select_from(d.outerjoin(original, original.c.id == d.c.replay_of_delivery_id))
        .where(*where)
        .order_by(d.c.queued_at, d.c.id)
        .limit(limit)
    )
    return [dict(row) for row in (await conn.execute(stmt)).mappings()]
