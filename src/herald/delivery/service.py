"""Delivery-stage operations other stages call: sweeps, backfill and dead-letter replay."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from herald.delivery import queries
from herald.errors import Conflict, NotFound

# Dead letters from these work types may be replayed here; anything else is refused (R-DLQ-9).
REPLAYABLE_QUEUES = (
    "notification.email",
    "notification.sms",
    "notification.push",
    "notification.telegram",
    "notification.slack",
    "notification.teams",
    "notification.whatsapp",
)


class DeadLetterNotFound(NotFound):
    """No such dead letter."""

    code = "DEAD_LETTER_NOT_FOUND"


class DeadLetterNotReplayable(Conflict):
    """This dead letter is not a channel delivery; it cannot be replayed here."""

    code = "DEAD_LETTER_NOT_REPLAYABLE"


class DeadLetterAlreadyReplayed(Conflict):
    """This dead letter has already been replayed."""

    code = "DEAD_LETTER_ALREADY_REPLAYED"


async def reclaim_expired_leases(
    conn: AsyncConnection, *, max_attempts: int, limit: int
) -> list[dict[str, Any]]:
    return await queries.reclaim_expired_leases(conn, max_attempts, limit)


async def requeue_due_failures(conn: AsyncConnection, *, limit: int) -> int:
    return len(await queries.requeue_due_failures(conn, limit))


async def release_due_inbox(conn: AsyncConnection, *, limit: int) -> list[dict[str, Any]]:
    """deliverAt's in-app rows whose person's moment has come: into the inbox (delivered).
    Each row released, with what its realtime notice may say."""
    return await queries.release_due_inbox(conn, limit)


async def backfill_unconfigured(
    conn: AsyncConnection, channels: Sequence[str], *, max_age_hours: int, limit: int
) -> int:
    return len(await queries.backfill_unconfigured(conn, channels, max_age_hours, limit))


async def backfill_unconfigured_of_tenants(
    conn: AsyncConnection, pairs: Sequence[tuple[str, str]], *, max_age_hours: int, limit: int
) -> int:
    """Backfill for channels configured only by a tenant's own provider account."""
    return len(await queries.backfill_unconfigured_of_tenants(conn, pairs, max_age_hours, limit))


async def replay_dead_letter(
    conn: AsyncConnection, tenant_id: str, dead_letter_public_id: uuid.UUID, *, actor: str
) -> uuid.UUID:
    """Insert a new queued delivery for a dead one and mark the dead letter replayed, in one
    transaction, the compare-and-set last (R-DLQ-4, R-DLQ-15, decision 7). Returns the new
    delivery's public id. Never commits; a refused replay raises, and the caller's rollback takes
    the insert with it."""
    letter = await queries.find_dead_letter(conn, tenant_id, dead_letter_public_id)
    if letter is None:
        raise DeadLetterNotFound()
    if letter["queue_name"] not in REPLAYABLE_QUEUES or letter["job_name"] != "channel_send":
        raise DeadLetterNotReplayable()  # R-DLQ-11: the row exists; refusing beats pretending it does not
    if letter["replayed_at"] is not None:
        raise DeadLetterAlreadyReplayed()
    try:
        delivery_public_id = uuid.UUID(letter["payload_ref"]["notificationDeliveryPublicId"])
    except (KeyError, TypeError, ValueError):
        raise DeadLetterNotReplayable("the dead letter's reference names no delivery") from None
    replay = await queries.insert_replay(conn, tenant_id, delivery_public_id)
    if replay is None:
        raise DeadLetterNotReplayable("the delivery it names no longer exists")
    if not await queries.mark_dead_letter_replayed(
        conn, letter["id"], actor, str(replay["public_id"])
    ):
        raise DeadLetterAlreadyReplayed()
    await queries.wake_channel_workers(conn)
    return uuid.UUID(str(replay["public_id"]))


async def cancel_unclaimed(conn: AsyncConnection, event_id: int, *, limit: int) -> int:
    """One bounded statement: up to `limit` of the event's deliveries that no worker holds become
    `cancelled` (a cancelled broadcast). Calls already in flight are left to finish."""
    return await queries.cancel_unclaimed_deliveries(conn, event_id, limit)


async def in_flight(conn: AsyncConnection, event_id: int) -> bool:
    """Whether any delivery of the event is queued, processing or waiting to retry."""
    return await queries.deliveries_in_flight(conn, event_id)
