"""The fan-out: one event → one recipient row per person → one delivery row per channel.

A batch is one transaction over one keyset page of the audience (R-FANOUT-3): it re-checks the
claim under the event's row lock, then writes the page's recipients and deliveries in ONE
set-based statement (fanout.pagewrite: the audience page, the preferences joined in SQL, the
in-app wording rendered once per locale — overrides read once per batch and only when in_app is
requested, R-FANOUT-13, herald.fanout.wording), and advances the cursor — or completes the
event — in the same transaction (R-FANOUT-7). Every kind takes this one path, an in-app builder
function included. Realtime publishes happen after commit, outside this module (R-REALTIME-5).
"""

from __future__ import annotations

import functools
import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from typing import Any

from sqlalchemy import Select
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.audience import service as audience
from herald.config import DEFAULT_TIMEZONE
from herald.db import compiled, presence, tenancy
from herald.fanout import queries
from herald.fanout.pagewrite import queries as pagewrite
from herald.fanout.queries import ClaimedEvent
from herald.fanout.wording import in_app_wording
from herald.kinds import Kind, Registry
from herald.rendering.render import Override, OverrideKey
from herald.scheduling import clock
from herald.webhooks import service as webhooks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InAppNotice:
    """What the realtime publisher may say about a new in-app row: no title, no body (R-REALTIME-7)."""

    tenant_id: str
    person_id: int
    recipient_public_id: uuid.UUID
    kind: str
    category: str
    priority: str
    occurred_at: datetime
    # The recipient's role scope, so a live stream applies the centre's role predicate.
    audience_role_id: int | None = None


@dataclass
class BatchOutcome:
    recipients_written: int = 0
    deliveries_written: int = 0
    completed: bool = False
    lost_claim: bool = False
    recipient_count: int | None = None
    in_app: list[InAppNotice] = field(default_factory=list)


async def claim_next_event(
    conn: AsyncConnection,
    token: uuid.UUID,
    *,
    tenant_id: str | None = None,
    holder: int | None = None,
) -> ClaimedEvent | None:
    """Claim one due event; the caller commits, so the claim is visible before any work starts.
    `holder` is the claiming worker's presence key (None: only the ten-lease rule can free it).
    The claim sees every tenant; the event itself is read under its own tenant, and the rest of
    this transaction runs as that tenant."""
    claimed = await queries.claim_event(conn, token, tenant_id, holder)
    if claimed is None:
        return None
    event_id, tenant = claimed
    await tenancy.enter_tenant(conn, tenant)
    return await queries.load_claimed_event(conn, event_id)


async def fan_out_batch(
    conn: AsyncConnection,
    event: ClaimedEvent,
    token: uuid.UUID,
    *,
    registry: Registry,
    batch_size: int,
    default_timezone: str = DEFAULT_TIMEZONE,
) -> BatchOutcome:
    """Write one page of the event's fan-out, as the event's tenant. Never commits; the caller
    owns the transaction. `default_timezone`: the zone of a person the directory gives none
    (deliverAt)."""
    # The page's plan depends on the tenant and the cursor (herald.audience.queries): the batch
    # statement is planned custom every batch, sent unprepared (_write_page_set).
    await tenancy.enter_tenant(conn, event.tenant_id)
    cursor = await queries.lock_claimed_event(conn, event.id, token)
    if cursor is None:
        return BatchOutcome(lost_claim=True)

    outcome = BatchOutcome()
    kind = registry.get(event.kind)
    if kind is None:
        log.error(
            "event %s names kind %s, which the registry no longer has", event.public_id, event.kind
        )
    page_size, last = await _write_page_set(
        conn, event, kind, cursor, batch_size, outcome, default_timezone
    )
    cursor = last if last is not None else cursor

    if page_size < batch_size:
        # A short page is the last one: complete in the same transaction as its rows.
        outcome.recipient_count = await queries.complete_fanout(conn, event.id, token, cursor)
        outcome.completed = True
        # The host's event.completed, in the same transaction as the completion (outbox).
        await webhooks.emit(
            conn,
            event.tenant_id,
            "event.completed",
            {
                "eventId": event.public_id,
                "kind": event.kind,
                "recipientCount": outcome.recipient_count,
            },
        )
        if outcome.recipient_count == 0:
            # Legal (a class with no enrolments) but worth seeing (R-FANOUT-14).
            log.warning("event %s (%s) fanned out to zero recipients", event.public_id, event.kind)
    else:
        await queries.advance_cursor(conn, event.id, token, cursor)
    return outcome


async def _write_page_set(
    conn: AsyncConnection,
    event: ClaimedEvent,
    kind: Kind | None,
    cursor: int,
    batch_size: int,
    outcome: BatchOutcome,
    default_timezone: str = DEFAULT_TIMEZONE,
) -> tuple[int, int | None]:
    """The page, its recipients and their deliveries in one statement (fanout.pagewrite);
    returns the page's length and its last person id (None for an empty page)."""
    plan: list[tuple[str, int]] = []
    if kind is not None and kind.escalation is not None and "in_app" in event.channels:
        # The tenant's delays, read once per batch like the template overrides.
        stored = await queries.escalation_delays(conn, event.tenant_id, kind.name)
        plan = escalation_plan(kind, event.channels, kind.escalation.delays_with(stored))
    wording = None
    if "in_app" in event.channels and kind is not None and "in_app" in kind.channels:
        # Overrides only when in_app is requested (R-FANOUT-13); read once per batch.
        wording = in_app_wording(kind, event.variables, await _overrides(conn, event))
    statement = _batch_statement(
        event, kind, batch_size, renders_in_app=wording is not None, escalates=bool(plan)
    )
    params = {
        "fanout_after": cursor,
        **pagewrite.wording_params(wording),
        **(pagewrite.escalation_params(plan) if plan else {}),
    }
    if event.deliver_local_time is not None:
        moments = local_moments(
            event.deliver_local_time, event.deliver_local_date, await queries.now(conn)
        )
        params |= pagewrite.deliver_params(moments, moments.get(default_timezone, moments["UTC"]))
    async with compiled.unprepared(conn):
        row = (await conn.execute(statement, params)).one()
    outcome.recipients_written = int(row.recipients)
    outcome.deliveries_written = int(row.deliveries)
    for person_id, recipient_public_id, role_id in pagewrite.notices_of(row):
        outcome.in_app.append(
            InAppNotice(
                tenant_id=event.tenant_id,
                person_id=person_id,
                recipient_public_id=recipient_public_id,
                kind=event.kind,
                category=event.category,
                priority=event.priority,
                occurred_at=event.occurred_at,
                audience_role_id=role_id,
            )
        )
    # row.woke: the statement itself woke the delivery workers if it queued anything.
    return int(row.page_size), (None if row.last_person is None else int(row.last_person))


# Built statements by event: building one costs more than a batch's planning, and only the
# cursor and the in-app wording change from batch to batch. Bounded; the oldest go first.
_STATEMENTS: dict[tuple[Any, ...], Select[Any]] = {}
_STATEMENTS_KEPT = 64


def escalation_plan(
    kind: Kind | None, channels: list[str], delays: Sequence[int] | None = None
) -> list[tuple[str, int]]:
    """The later steps the fan-out writes for this event: (channel, cumulative offset in seconds)
    of each step of the kind's plan whose channel the event requests, when the event requests
    the in-app copy the plan escalates from; [] otherwise (every channel goes out at once).
    `delays`: the tenant's, else the code's."""
    if kind is None or kind.escalation is None or "in_app" not in channels:
        return []
    plan: list[tuple[str, int]] = []
    offset = 0
    after = delays if delays is not None else kind.escalation.delays
    for step, delay in zip(kind.escalation.steps, after, strict=True):
        # A step whose channel is not requested is left out; its delay still counts, so the
        # later steps keep their due times relative to it.
        offset += delay
        if step.channel in channels:
            plan.append((step.channel, offset))
    return plan


def _batch_statement(
    event: ClaimedEvent,
    kind: Kind | None,
    batch_size: int,
    *,
    renders_in_app: bool,
    escalates: bool = False,
) -> Select[Any]:
    key = (
        event.id,
        event.tenant_id,
        json.dumps(event.audience, sort_keys=True),
        event.audience_frozen_at,
        event.occurred_at,
        event.category,
        tuple(event.channels),
        None
        if kind is None
        else (kind.name, tuple(kind.channels), kind.unsuppressible, kind.persist_rendered),
        batch_size,
        renders_in_app,
        event.deliver_local_time is not None,
        escalates,
    )
    found = _STATEMENTS.get(key)
    if found is None:
        page = audience.page_statement(
            event.tenant_id,
            event.audience,
            pagewrite.CURSOR,
            batch_size,
            created_until=event.audience_frozen_at,
        )
        found = pagewrite.statement(
            page,
            tenant_id=event.tenant_id,
            event_id=event.id,
            occurred_at=event.occurred_at,
            category=event.category,
            # The plan's channels go out later, as steps (herald.scheduling.escalation).
            channels=_immediate(event, kind) if escalates else event.channels,
            kind=kind,
            renders_in_app=renders_in_app,
            deliver_at=event.deliver_local_time is not None,
            escalates=escalates,
        )
        while len(_STATEMENTS) >= _STATEMENTS_KEPT:
            del _STATEMENTS[next(iter(_STATEMENTS))]
        _STATEMENTS[key] = found
    return found


def local_moments(at: time, day: date | None, after: datetime) -> dict[str, datetime]:
    """deliverAt's moment in every IANA zone (herald.scheduling.clock, the reminders' rules):
    `at` on local `day`, or without a day the first `at` at or after `after`. Every zone, so the
    batch statement looks each person's zone up in one array; cached by the minute."""
    return _local_moments(at, day, after.astimezone(UTC).replace(second=0, microsecond=0))


@functools.lru_cache(maxsize=16)
def _local_moments(at: time, day: date | None, after: datetime) -> dict[str, datetime]:
    moments = {}
    for name in sorted(clock.iana_zones()):
        tz = clock.zone(name)
        if day is not None:
            moments[name] = clock.local_moment(day, at, tz)
        else:
            moments[name] = clock.next_local_moment(after, at, tz)
    return moments


def _immediate(event: ClaimedEvent, kind: Kind | None) -> list[str]:
    later = set(kind.escalation.channels) if kind is not None and kind.escalation else set()
    return [channel for channel in event.channels if channel not in later]


async def _overrides(conn: AsyncConnection, event: ClaimedEvent) -> dict[OverrideKey, Override]:
    found = await queries.published_overrides(conn, event.tenant_id, event.kind)
    return {
        (event.kind, o["channel"], o["locale"]): Override(
            title=o["title"], body=o["body"], version=o["version"]
        )
        for o in found
    }


async def release_stale_claims(
    conn: AsyncConnection, *, older_than_seconds: int, limit: int = 100
) -> list[int]:
    """Reaper sweep 3 (R-REAPER-7, R-REAPER-8); returns the ids of the events it released."""
    return await queries.release_stale_fanout_claims(conn, older_than_seconds, limit)


async def release_orphaned_claims(conn: AsyncConnection, *, limit: int = 100) -> list[int]:
    """Release claims whose holding worker is gone (its presence lock ended with its session)."""
    return await queries.release_orphaned_fanout_claims(conn, presence.NAMESPACE, limit)


async def release_claim(conn: AsyncConnection, event: ClaimedEvent, token: uuid.UUID) -> None:
    """Give an unfinished event back (graceful drain); it resumes from its cursor."""
    await queries.release_own_claim(conn, event.id, token)


async def wake_if_due(conn: AsyncConnection) -> None:
    """Reaper sweep 4: a NOTIFY when a due, unclaimed event is waiting."""
    await queries.wake_if_due(conn)


async def give_up(conn: AsyncConnection, event: ClaimedEvent, token: uuid.UUID, error: str) -> None:
    """Mark the event's fan-out failed and dead-letter it (its attempt budget is spent)."""
    await queries.fail_fanout(conn, event.id, token, error)


async def halt(conn: AsyncConnection, event_id: int, *, actor: str) -> bool:
    """Stop the event's fan-out writing recipients (a broadcast cancelled while sending): waits
    for the batch in progress to commit, then cancels the event, completing a claimed fan-out
    with the recipients written so far. False when the fan-out had already completed."""
    if not await queries.lock_event_for_halt(conn, event_id):
        return False
    return await queries.halt_fanout(conn, event_id, actor)
