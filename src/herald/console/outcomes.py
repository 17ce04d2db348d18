"""The outcomes chart's aggregate and the queue depth per channel (NotificationHistory_READ).

Counts only: no person, no content. Deliveries are bucketed by the hour they were queued, their
status folded into four outcome classes an operator reads at a glance.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.admin.history import service as history
from herald.auth.service import Operator
from herald.console import queries
from herald.errors import ValidationFailed

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


async def outcome_series(conn: AsyncConnection, operator: Operator, *, hours: int) -> OutcomeSeries:
    if not 1 <= hours <= MAX_HOURS:
        raise ValidationFailed(f"hours must be 1 to {MAX_HOURS}")
    if not operator.may(history.READ):
        return OutcomeSeries(hours=[], channels=[])
    now = await queries.current_hour(conn)
    start = now - timedelta(hours=hours - 1)
    axis = [start + timedelta(hours=i) for i in range(hours)]
    index = {moment: i for i, moment in enumerate(axis)}
    series = {
        channel: {outcome: [0] * hours for outcome in OUTCOME_CLASSES}
        for channel in vocabulary.CHANNELS
    }
    for row in await queries.outcome_counts(conn, operator.tenant_id, start):
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
    counts: dict[str, dict[str, int]] = {c: {} for c in vocabulary.CHANNELS}
    for row in await queries.in_flight_counts(conn, operator.tenant_id):
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
