"""SQL of the admin dead-letter screen.

The channel allowlist is part of every statement here, unconditionally (R-DLQ-8): the queue names
herald.delivery.service may replay (R-DLQ-9) and the job those queues run. A `channel` filter is
ANDed on top of it, so it can only narrow the list, never widen it (R-DLQ-10). `payload_ref` is
read key by key, never whole: it is a reference, and only the delivery id is wanted from it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, or_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import schema as s
from herald.delivery.service import REPLAYABLE_QUEUES

dl = s.dead_letter

# The job every allowlisted queue runs; replay_dead_letter refuses any other.
CHANNEL_JOB = "channel_send"
QUEUE_PREFIX = "notification."
# Webhook messages to the host (herald.webhooks) die and are replayed here too.
WEBHOOK_QUEUE = "webhook"
WEBHOOK_JOB = "webhook_send"


def allowlisted() -> ColumnElement[bool]:
    """Dead letters of Herald's own channel sends and webhook messages, and nothing else."""
    return or_(
        and_(dl.c.queue_name.in_(REPLAYABLE_QUEUES), dl.c.job_name == CHANNEL_JOB),
        and_(dl.c.queue_name == WEBHOOK_QUEUE, dl.c.job_name == WEBHOOK_JOB),
    )


async def find_webhook_letter(
    conn: AsyncConnection, tenant_id: str, public_id: Any
) -> dict[str, Any] | None:
    """The dead letter if it is a webhook message's; None for any other (or none)."""
    stmt = select(dl.c.id, dl.c.payload_ref, dl.c.replayed_at).where(
        dl.c.tenant_id == tenant_id,
        dl.c.public_id == public_id,
        dl.c.queue_name == WEBHOOK_QUEUE,
        dl.c.job_name == WEBHOOK_JOB,
    )
    row = (await conn.execute(stmt)).mappings().first()
    return dict(row) if row else None


async def list_dead_letters(
    conn: AsyncConnection,
    tenant_id: str,
    *,
    channel: str | None,
    after: tuple[datetime, int] | None,
    limit: int,
) -> list[dict[str, Any]]:
    """One page, most recent failure first, the id breaking ties (R-ADMIN-10)."""
    where: list[ColumnElement[bool]] = [dl.c.tenant_id == tenant_id, allowlisted()]
    if channel is not None:
        where.append(dl.c.queue_name == QUEUE_PREFIX + channel)
    if after is not None:
        where.append(tuple_(dl.c.failed_at, dl.c.id) < tuple_(after[0], after[1]))
    stmt = (
        select(
            dl.c.id,
            dl.c.public_id,
            dl.c.queue_name,
            dl.c.job_id,
            dl.c.attempts,
            dl.c.last_error,
            dl.c.failed_at,
            dl.c.replayed_at,
            dl.c.replayed_by,
            dl.c.replay_job_id,
            dl.c.payload_ref["notificationDeliveryPublicId"].astext.label("delivery_id"),
            dl.c.payload_ref["webhookMessagePublicId"].astext.label("webhook_message_id"),
        )
        .where(*where)
        .order_by(dl.c.failed_at.desc(), dl.c.id.desc())
        .limit(limit)
    )
    return [dict(row) for row in (await conn.execute(stmt)).mappings()]
