"""The outcomes chart's aggregate and the queue depth per channel (NotificationHistory_READ).

Counts only: no person, no content. Deliveries are bucketed by the hour they were queued, their
status folded into four outcome classes an operator reads at a glance.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from sqlalchemy import case, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.admin.history import service as history
from herald.auth.service import Operator
from herald.db import schema as s
from herald.errors import ValidationFailed

d = s.notification_delivery

OUTCOME_CLASSES = ("delivered", "failed", "skipped", "in_flight")
MAX_HOURS = 24 * 14


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ChannelSeries(_Model):
    channel: str
    # One list per outcome class, aligned with `hours`.
    counts: dict[str, list[int]]


class OutcomeSeries(_Model):
    # Hour starts, as Unix seconds (what uPlot's x axis takes).
    hours: list[int]
    channels: list[ChannelSeries]


class QueueDepth(_Model):
    channel: str
    queued: int
    processing: int
    failed: int


_CLASS = case(
    (d.c.status.in_(("sent", "delivered")), "delivered"),
    (d.c.status.in_(("failed", "dead")), "failed"),
    (d.c.status.in_(vocabulary.SKIPPED_STATUSES), "skipped"),
    else_="in_flight",
)


async def outcome_series(conn: AsyncConnection, operator: Operator, *, hours: int) -> OutcomeSeries:
    if not 1 <= hours <= MAX_HOURS:
        raise ValidationFailed(f"hours must be 1 to {MAX_HOURS}")
    if not operator.may(history.READ):
        return OutcomeSeries(hours=[], channels=[])
    now: datetime = (await conn.execute(select(func.date_trunc("hour", func.now())))).scalar_one()
    start = now - timedelta(hours=hours - 1)
    bucket = func.date_trunc("hour", d.c.queued_at).label("bucket")
    stmt = (
        select(bucket, d.c.channel, _CLASS.label("outcome"), func.count().label("n"))
        .where(d.c.tenant_id == operator.tenant_id, d.c.queued_at >= start)
        .group_by(bucket, d.c.channel, _CLASS)
    )
    axis = [start + timedelta(hours=i) for i in range(hours)]
    index = {moment: i for i, moment in enumerate(axis)}
    series = {
        channel: {outcome: [0] * hours for outcome in OUTCOME_CLASSES}
        for channel in vocabulary.CHANNELS
    }
    for row in await conn.execute(stmt):
        position = index.get(row.bucket)
        if position is not None:
            series[row.channel][row.outcome][position] = int(row.n)
    return OutcomeSeries(
        hours=[int(moment.timestamp()) for moment in axis],
        channels=[ChannelSeries(channel=c, counts=series[c]) for c in vocabulary.CHANNELS],
    )


async def queue_depth(conn: AsyncConnection, operator: Operator) -> list[QueueDepth]:
    """Deliveries with work ahead of them, per channel (the partial indexes the workers claim
    through keep this cheap)."""
    if not operator.may(history.READ):
        return []
    stmt = (
        select(d.c.channel, d.c.status, func.count().label("n"))
        .where(d.c.tenant_id == operator.tenant_id, d.c.status.in_(vocabulary.IN_FLIGHT_STATUSES))
        .group_by(d.c.channel, d.c.status)
    )
    counts: dict[str, dict[str, int]] = {c: {} for c in vocabulary.CHANNELS}
    for row in await conn.execute(stmt):
        counts[row.channel][row.status] = int(row.n)
    return [
        QueueDepth(
            channel=c,
            queued=counts[c].get("queued", 0),
            processing=counts[c].get("processing", 0),
            failed=counts[c].get("failed", 0),
        )
        for c in vocabulary.CHANNELS
    ]
