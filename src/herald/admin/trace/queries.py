"""SQL of the trace: one person's place in one event, and one person's recent deliveries.

The person table is read for identity and lifecycle only (id, public id, status, created and
deleted times): never a name, an address or a chat id. Deliveries are read without
`destination_hint`, `rendered_title` or `rendered_body`, and events without their variables or
audience specification, so nothing carrying content or an address is read into memory.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, exists, func, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import queue, tenancy
from herald.db import schema as s

p = s.person
e = s.notification_event
r = s.notification_recipient
d = s.notification_delivery
a = s.notification_delivery_attempt

# A skipped attempt row exists only when a provider was called and answered "skipped": the mock
# provider (herald.delivery.recorder). An unconfigured channel never calls anything.
_MOCK_EVIDENCE = (
    exists().where(a.c.delivery_id == d.c.id, a.c.outcome == "skipped").label("provider_was_mock")
)

_DELIVERY_COLUMNS = (
    d.c.id,
    d.c.public_id,
    d.c.channel,
    queue.published_status(d.c.status, d.c.id).label("status"),
    d.c.attempts,
    d.c.queued_at,
    d.c.sent_at,
    d.c.delivered_at,
    d.c.failed_at,
    d.c.skipped_at,
    d.c.dead_at,
    d.c.last_error,
    d.c.next_attempt_at,
    _MOCK_EVIDENCE,
)


async def find_person(
    conn: AsyncConnection, tenant_id: str, external_id: str
) -> dict[str, Any] | None:
    stmt = select(p.c.id, p.c.public_id, p.c.status, p.c.created_at, p.c.deleted_at).where(
        p.c.tenant_id == tenant_id, p.c.external_id == external_id
    )
    row = (await conn.execute(stmt)).mappings().first()
    return dict(row) if row is not None else None


async def find_event(
    conn: AsyncConnection, tenant_id: str, public_id: uuid.UUID
) -> dict[str, Any] | None:
    stmt = select(
        e.c.id,
        e.c.public_id,
        e.c.kind,
        e.c.category,
        e.c.channels,
        e.c.occurred_at,
        e.c.scheduled_for,
        e.c.cancelled_at,
        e.c.fanout_claimed_at,
        e.c.fanout_completed_at,
        e.c.fanout_failed_at,
        e.c.audience_frozen_at,
    ).where(e.c.tenant_id == tenant_id, e.c.public_id == public_id)
    row = (await conn.execute(stmt)).mappings().first()
    return dict(row) if row is not None else None


async def find_recipient(
    conn: AsyncConnection, tenant_id: str, event_id: int, person_public_id: uuid.UUID
) -> dict[str, Any] | None:
    stmt = select(r.c.id, r.c.read_at, r.c.created_at).where(
        r.c.tenant_id == tenant_id,
        r.c.event_id == event_id,
        r.c.user_public_id_snapshot == person_public_id,
    )
    row = (await conn.execute(stmt)).mappings().first()
    return dict(row) if row is not None else None


async def recipient_deliveries(
    conn: AsyncConnection, tenant_id: str, recipient_id: int
) -> list[dict[str, Any]]:
    original = d.alias("original")
    stmt = (
        select(*_DELIVERY_COLUMNS, original.c.public_id.label("replay_of_delivery_id"))
        .select_from(d.outerjoin(original, original.c.id == d.c.replay_of_delivery_id))
        .where(d.c.tenant_id == tenant_id, d.c.recipient_id == recipient_id)
        .order_by(d.c.channel, d.c.queued_at, d.c.id)
    )
    return [dict(row) for row in (await conn.execute(stmt)).mappings()]


async def attempts(
    conn: AsyncConnection, tenant_id: str, delivery_ids: Sequence[int]
) -> dict[int, list[dict[str, Any]]]:
    found: dict[int, list[dict[str, Any]]] = {delivery_id: [] for delivery_id in delivery_ids}
    if not delivery_ids:
        return found
    stmt = (
        select(
            a.c.delivery_id,
            a.c.attempt_number,
            a.c.outcome,
            a.c.provider_status,
            a.c.error_code,
            a.c.retry_delay_seconds,
            a.c.created_at,
            a.c.provider,
            a.c.passed_over,
        )
        .where(a.c.tenant_id == tenant_id, a.c.delivery_id.in_(list(delivery_ids)))
        .order_by(a.c.delivery_id, a.c.created_at, a.c.id)
    )
    for row in (await conn.execute(stmt)).mappings():
        found[row["delivery_id"]].append(dict(row))
    return found


@dataclass(frozen=True)
class PersonDeliveryFilters:
    kind: str | None = None
    channel: str | None = None
    status: str | None = None


def person_deliveries_statement(
    tenant_id: str,
    person_id: int,
    filters: PersonDeliveryFilters,
    *,
    after: tuple[datetime, int] | None,
    limit: int,
) -> Select[Any]:
    """One page of the person's deliveries, newest first (queued_at, id descending).

    Keyed by the delivery's own copy of the person (`d.user_id`), not the recipient's: the
    order and the key are then one index, notification_delivery_person_idx, which each month
    walks from the cursor and a Merge Append combines, stopping at the page. Through the
    recipient's user_id the plan had to gather and sort every delivery the person ever had
    (tests/integration/test_plans_history.py)."""
    where: list[ColumnElement[bool]] = [d.c.tenant_id == tenant_id, d.c.user_id == person_id]
    if filters.kind is not None:
        where.append(e.c.kind == filters.kind)
    if filters.channel is not None:
        where.append(d.c.channel == filters.channel)
    if filters.status is not None:
        where.append(queue.status_is(d.c.status, d.c.id, filters.status))
    if after is not None:
        where.append(tuple_(d.c.queued_at, d.c.id) < tuple_(after[0], after[1]))
    stmt = (
        select(
            *_DELIVERY_COLUMNS,
            e.c.public_id.label("event_public_id"),
            e.c.kind,
            e.c.category,
            e.c.occurred_at,
            r.c.read_at,
        )
        # The recipient's join names its month too, so each probe reads one partition's key.
        .select_from(
            d.join(r, and_(r.c.id == d.c.recipient_id, r.c.occurred_at == d.c.occurred_at)).join(
                e, e.c.id == d.c.event_id
            )
        )
        .where(*where)
        .order_by(d.c.queued_at.desc(), d.c.id.desc())
        .limit(limit)
    )
    return stmt


async def person_deliveries(
    conn: AsyncConnection,
    tenant_id: str,
    person_id: int,
    filters: PersonDeliveryFilters,
    *,
    after: tuple[datetime, int] | None,
    limit: int,
) -> list[dict[str, Any]]:
    """One page of the person's deliveries (person_deliveries_statement), planned as an index
    walk whatever the estimate of the person's rows (tenancy.in_index_order)."""
    stmt = person_deliveries_statement(tenant_id, person_id, filters, after=after, limit=limit)
    async with tenancy.in_index_order(conn):
        return [dict(row) for row in (await conn.execute(stmt)).mappings()]


async def now(conn: AsyncConnection) -> datetime:
    moment: datetime = (await conn.execute(select(func.now()))).scalar_one()
    return moment


async def locate_delivery(
    conn: AsyncConnection, tenant_id: str, public_id: uuid.UUID
) -> dict[str, Any] | None:
    """A delivery's event and the external id of the person it was for (None once erased)."""
    stmt = (
        select(
            d.c.id,
            d.c.public_id,
            d.c.channel,
            queue.published_status(d.c.status, d.c.id).label("status"),
            d.c.last_error,
            d.c.attempts,
            e.c.public_id.label("event_public_id"),
            p.c.external_id,
        )
        .select_from(
            d.join(r, r.c.id == d.c.recipient_id)
            .join(e, e.c.id == d.c.event_id)
            .outerjoin(p, p.c.id == r.c.user_id)
        )
        .where(d.c.tenant_id == tenant_id, d.c.public_id == public_id)
    )
    row = (await conn.execute(stmt)).mappings().first()
    return dict(row) if row is not None else None


async def escalation_steps(
    conn: AsyncConnection, tenant_id: str, recipient_id: int
) -> list[dict[str, Any]]:
    """The recipient's escalation steps in order, with the public id of the delivery each sent
    (by the step's unique key, and the delivery's primary key in the recipient's month)."""
    st = s.notification_escalation_step
    sent = d.alias("sent")
    stmt = (
        select(
            st.c.step_index,
            st.c.channel,
            st.c.state,
            st.c.reason,
            st.c.due_at,
            st.c.decided_at,
            sent.c.public_id.label("delivery_public_id"),
        )
        .select_from(
            st.outerjoin(
                sent, and_(sent.c.id == st.c.delivery_id, sent.c.occurred_at == st.c.occurred_at)
            )
        )
        .where(st.c.tenant_id == tenant_id, st.c.recipient_id == recipient_id)
        .order_by(st.c.step_index)
    )
    return [dict(row) for row in (await conn.execute(stmt)).mappings()]
