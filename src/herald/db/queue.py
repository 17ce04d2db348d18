"""The delivery queue (migration 0026, docs/scaling.md "The queue table").

A delivery that is queued has one row in `notification_delivery_queue`, holding only what the
channel workers need: its channel, when it is due, and while a worker holds it the claim and the
lease. The claim, the lease renewal and the reaper write only that row; the delivery record is
written when it is queued and at its outcome.

`processing` is therefore derived: the record stays `queued` while claimed, and a queued
delivery whose queue row has `claimed_at` set is `processing` to every reader — the API, the
history, the trace, the console, `/metrics`, the throttle, receipts and retention's "never
delete in flight". The pieces here are the one way to say so:

- `queue.sql`'s fragments for a stage's queries.sql (`-- include: ../db/queue.sql`):
  `enter_queue` after a write whose CTE `entered` returns the rows it made queued,
  `delivery_claimed` and `published_status` for a delivery aliased `d`;
- `claimed()`, `published_status()` and `enter_queue()`, the same in SQLAlchemy Core.

Every statement that makes a delivery queued enters its queue row in the same statement (the
fan-out's page, the digest's own delivery and its releases, replay, the reaper's re-queue,
backfill); the recorder deletes it with the outcome, the reaper with a dead reclaim, the
broadcast cancel with the cancel.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, case, literal_column, select
from sqlalchemy.dialects.postgresql import Insert, insert
from sqlalchemy.sql.expression import CTE, Subquery

from herald.db import schema as s

q = s.notification_delivery_queue
QUEUED = "queued"
PROCESSING = "processing"
# Written into the statement's text, never bound: a grouped expression must read the same in the
# select list and the GROUP BY, and a constant keeps partial indexes usable under generic plans.
_QUEUED: ColumnElement[str] = literal_column("'queued'")


def claimed(delivery_id: ColumnElement[Any]) -> ColumnElement[bool]:
    """The delivery is held by a worker (its queue row carries a claim). Uncorrelated, so the
    planner hashes the claimed ids once (a few batches' worth, through the lease index) and
    each delivery is a hash probe, however many rows a count reads."""
    return delivery_id.in_(select(q.c.delivery_id).where(q.c.claimed_at.is_not(None)))


def published_status(
    status: ColumnElement[Any], delivery_id: ColumnElement[Any]
) -> ColumnElement[str]:
    """The status a reader publishes: `processing` for a claimed queued delivery."""
    return case(
        (and_(status == _QUEUED, claimed(delivery_id)), literal_column("'processing'")),
        else_=status,
    )


def enter_queue(entered: CTE | Subquery) -> Insert:
    """The queue rows of the queued deliveries among `entered` (a CTE or subquery with id,
    tenant_id, channel, occurred_at, next_attempt_at and status), for the same statement."""
    rows = select(
        entered.c.id,
        entered.c.tenant_id,
        entered.c.channel,
        entered.c.occurred_at,
        entered.c.next_attempt_at,
    ).where(entered.c.status == _QUEUED)
    return (
        insert(q)
        .from_select(
            ["delivery_id", "tenant_id", "channel", "occurred_at", "next_attempt_at"], rows
        )
        .on_conflict_do_nothing(index_elements=["delivery_id"])
    )


def status_is(
    status: ColumnElement[Any], delivery_id: ColumnElement[Any], value: str
) -> ColumnElement[bool]:
    """A filter on the published status: `processing` is a claimed queued delivery, `queued` an
    unclaimed one, any other status the record's own."""
    if value == PROCESSING:
        return and_(status == _QUEUED, claimed(delivery_id))
    if value == QUEUED:
        return and_(status == _QUEUED, ~claimed(delivery_id))
    return status == value
