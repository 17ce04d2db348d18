"""The admin dead-letter screen: list Herald's channel dead letters and replay one.

Gates: the list needs NotificationFailure_READ and answers an empty page without it (R-DLQ-8);
replay needs NotificationFailure_UPDATE and answers 404 without it (R-SEC-7). UPDATE rather than
RESTORE: a replay changes the dead letter (replayed_at, replayed_by) and queues new work; RESTORE
is the catalogue's verb for bringing back a deleted row, which nothing here does.

The list shows only the channel allowlist (herald.admin.dead_letters.queries); an id-addressed
replay of a row outside it is answered 409 by the delivery stage, not 404, because the row exists
(R-DLQ-11). Replay itself is herald.delivery.service.replay_dead_letter, the one implementation of
the compare-and-set and the new delivery row (R-DLQ-4, R-DLQ-5, R-DLQ-12..16).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from herald.admin.dead_letters import queries
from herald.admin.dead_letters.schemas import DeadLetterItem, DeadLetterPage, ReplayResult
from herald.admin.history import service as history
from herald.admin.history.service import PageParams
from herald.audit.service import record_audit
from herald.auth.service import Operator
from herald.delivery import queries as delivery_queries
from herald.delivery import service as delivery
from herald.webhooks import service as webhooks

READ = "NotificationFailure_READ"
REPLAY = "NotificationFailure_UPDATE"


def _uuid_or_none(raw: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(raw)) if raw is not None else None
    except ValueError:
        return None


def _item(row: Mapping[str, Any]) -> DeadLetterItem:
    return DeadLetterItem(
        id=row["public_id"],
        queue_name=row["queue_name"],
        channel=str(row["queue_name"]).removeprefix(queries.QUEUE_PREFIX),
        job_id=row["job_id"],
        attempts=row["attempts"],
        last_error=row["last_error"],
        failed_at=row["failed_at"],
        replayed_at=row["replayed_at"],
        replayed_by=row["replayed_by"],
        delivery_id=_uuid_or_none(row["delivery_id"] or row["webhook_message_id"]),
        replay_delivery_id=_uuid_or_none(row["replay_job_id"]),
    )


async def list_dead_letters(
    conn: AsyncConnection, operator: Operator, page: PageParams, *, channel: str | None = None
) -> DeadLetterPage:
    """One page of dead letters, most recent first. Never trimmed by age or count (R-DLQ-18)."""
    if not operator.may(READ):
        return DeadLetterPage(items=[], next_cursor=None)
    rows = await queries.list_dead_letters(
        conn, operator.tenant_id, channel=channel, after=page.after, limit=page.limit + 1
    )
    shown, more = rows[: page.limit], len(rows) > page.limit
    return DeadLetterPage(
        items=[_item(row) for row in shown],
        next_cursor=history.encode_cursor(shown[-1]["failed_at"], shown[-1]["id"])
        if more
        else None,
    )


async def replay_dead_letter(
    conn: AsyncConnection, operator: Operator, dead_letter_id: str
) -> ReplayResult:
    """Replay one dead letter as the operator, who is recorded as `replayed_by` (R-DLQ-16) and in
    the audit trail. Refusals: 404 absent or not permitted; 409 outside the allowlist or already
    replayed."""
    try:
        public_id = uuid.UUID(dead_letter_id)
    except ValueError:
        raise delivery.DeadLetterNotFound() from None
    if not operator.may(REPLAY):
        raise delivery.DeadLetterNotFound()
    webhook_letter = await queries.find_webhook_letter(conn, operator.tenant_id, public_id)
    if webhook_letter is not None:
        new_delivery = await _replay_webhook(conn, operator, webhook_letter)
    else:
        new_delivery = await delivery.replay_dead_letter(
            conn, operator.tenant_id, public_id, actor=operator.actor_id
        )
    await record_audit(
        conn,
        operator,
        "replay",
        "dead_letter",
        str(public_id),
        {
            "replayed_by": {"before": None, "after": operator.actor_id},
            "replay_delivery_id": {"before": None, "after": new_delivery},
        },
    )
    return ReplayResult(delivery_id=new_delivery)


async def _replay_webhook(
    conn: AsyncConnection, operator: Operator, letter: Mapping[str, Any]
) -> uuid.UUID:
    """A dead webhook message goes back to its queue under the same `webhook-id` (the host
    deduplicates on it); the dead letter's compare-and-set is the last statement, as for a
    delivery."""
    if letter["replayed_at"] is not None:
        raise delivery.DeadLetterAlreadyReplayed()
    message_id = await webhooks.replay_message(conn, operator.tenant_id, letter["payload_ref"])
    if not await delivery_queries.mark_dead_letter_replayed(
        conn, letter["id"], operator.actor_id, str(message_id)
    ):
        raise delivery.DeadLetterAlreadyReplayed()
    return message_id
