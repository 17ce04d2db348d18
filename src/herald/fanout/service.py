"""The fan-out: one event → one recipient row per person → one delivery row per channel.

A batch is one transaction over one keyset page of the audience (R-FANOUT-3): it re-checks the
claim under the event's row lock, then writes the page's recipients and deliveries in ONE
set-based statement (fanout.pagewrite: the audience page, the preferences joined in SQL, the
in-app wording rendered once per locale — overrides read once per batch and only when in_app is
requested, R-FANOUT-13), and advances the cursor — or completes the event — in the same
transaction (R-FANOUT-7). A kind whose in-app template is a builder function keeps the
row-by-row path (`_write_page`: preferences in two queries, R-PREF-5). Realtime publishes happen
after commit, outside this module (R-REALTIME-5).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Select
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.audience import service as audience
from herald.db import compiled, presence, tenancy
from herald.fanout import queries
from herald.fanout.pagewrite import queries as pagewrite
from herald.fanout.queries import ClaimedEvent, DeliveryRows
from herald.kinds import Kind, Registry
from herald.preferences import service as preferences
from herald.rendering.render import Override, OverrideKey, render
from herald.webhooks import service as webhooks

log = logging.getLogger(__name__)

GONE_STATUSES = frozenset(pagewrite.GONE_STATUSES)


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
) -> BatchOutcome:
    """Write one page of the event's fan-out, as the event's tenant. Never commits; the caller
    owns the transaction."""
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
    if pagewrite.eligible(kind, event.channels):
        page_size, last = await _write_page_set(conn, event, kind, cursor, batch_size, outcome)
        cursor = last if last is not None else cursor
    else:
        members = await audience.resolve_audience_page(
            conn,
            event.tenant_id,
            event.audience,
            cursor,
            batch_size,
            created_until=event.audience_frozen_at,
        )
        page_size = len(members)
        if members:
            # People who joined after a broadcast's freeze move the cursor but get nothing
            # (R-BCAST-8).
            admitted = [m for m in members if m.admitted]
            if admitted:
                await _write_page(conn, event, admitted, registry, outcome)
            cursor = members[-1].person_id

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
) -> tuple[int, int | None]:
    """The page, its recipients and their deliveries in one statement (fanout.pagewrite);
    returns the page's length and its last person id (None for an empty page)."""
    wording = None
    if "in_app" in event.channels and kind is not None and "in_app" in kind.channels:
        # Overrides only when in_app is requested (R-FANOUT-13); read once per batch.
        wording = pagewrite.in_app_wording(kind, event.variables, await _overrides(conn, event))
    statement = _batch_statement(event, kind, batch_size, renders_in_app=wording is not None)
    async with compiled.unprepared(conn):
        row = (
            await conn.execute(
                statement, {"fanout_after": cursor, **pagewrite.wording_params(wording)}
            )
        ).one()
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


def _batch_statement(
    event: ClaimedEvent, kind: Kind | None, batch_size: int, *, renders_in_app: bool
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
            channels=event.channels,
            kind=kind,
            renders_in_app=renders_in_app,
        )
        while len(_STATEMENTS) >= _STATEMENTS_KEPT:
            del _STATEMENTS[next(iter(_STATEMENTS))]
        _STATEMENTS[key] = found
    return found


async def _write_page(
    conn: AsyncConnection,
    event: ClaimedEvent,
    members: list[audience.AudienceMember],
    registry: Registry,
    outcome: BatchOutcome,
) -> None:
    kind = registry.get(event.kind)
    inserted = await queries.insert_recipients(
        conn,
        tenant_id=event.tenant_id,
        event_id=event.id,
        occurred_at=event.occurred_at,
        person_ids=[m.person_id for m in members],
        public_ids=[m.public_id for m in members],
        role_ids=[m.role_id for m in members],
        # R-AUD-15: a missing name renders "there", never the literal placeholder.
        names=[m.full_name or "there" for m in members],
        locales=[m.locale for m in members],
    )
    outcome.recipients_written = len(inserted)
    if not inserted:
        return  # every person on this page was written by an earlier attempt, deliveries included

    fresh = [m for m in members if m.person_id in inserted]
    person_ids = [m.person_id for m in fresh]
    snapshot = await preferences.load_preferences(conn, person_ids)
    tokens = await queries.active_push_tokens(conn, person_ids) if "push" in event.channels else {}
    overrides = await _overrides(conn, event) if "in_app" in event.channels else {}

    rows = DeliveryRows.empty()
    for member in fresh:
        recipient_id, recipient_public_id = inserted[member.person_id]
        for channel in event.channels:
            _plan_delivery(
                rows,
                event,
                kind,
                member,
                (recipient_id, recipient_public_id),
                channel,
                snapshot,
                tokens,
                overrides,
                outcome,
            )
    await queries.insert_deliveries(
        conn, tenant_id=event.tenant_id, event_id=event.id, occurred_at=event.occurred_at, rows=rows
    )
    outcome.deliveries_written = len(rows)
    if "queued" in rows.statuses:
        await queries.wake_delivery_workers(conn)


def _plan_delivery(
    rows: DeliveryRows,
    event: ClaimedEvent,
    kind: Kind | None,
    member: audience.AudienceMember,
    recipient: tuple[int, uuid.UUID],
    channel: str,
    snapshot: preferences.PreferenceSnapshot,
    tokens: Mapping[int, list[int]],
    overrides: Mapping[OverrideKey, Override],
    outcome: BatchOutcome,
) -> None:
    """Decide one (recipient, channel) row. Every requested channel gets a row, suppressed ones
    included, so the record answers "why did this parent not get it" (R-FANOUT-11)."""
    recipient_id, recipient_public_id = recipient
    if kind is None or channel not in kind.channels:
        rows.add(recipient_id, channel, "skipped_no_template", skipped=True)  # R-STATE-3
        return
    if member.status in GONE_STATUSES:
        rows.add(recipient_id, channel, "skipped_recipient_gone", skipped=True)  # decision 5
        return
    if not snapshot.allows(member.person_id, kind, channel):
        rows.add(recipient_id, channel, "skipped_preference", skipped=True)
        return
    if channel == "in_app":
        values = {**event.variables, "name": member.full_name or "there"}
        rendered = render(kind, channel, member.locale, values, overrides)
        if rendered is None:
            rows.add(recipient_id, channel, "skipped_no_template", skipped=True)  # R-RENDER-13
            return
        # Complete the moment it is written, content and all (R-FANOUT-2, R-FANOUT-12).
        rows.add(
            recipient_id,
            channel,
            "delivered",
            title=rendered.title if kind.persist_rendered else None,
            body=rendered.body if kind.persist_rendered else None,
            template_version=rendered.template_version,
            rendered_hash=rendered.content_hash,
        )
        outcome.in_app.append(
            InAppNotice(
                tenant_id=event.tenant_id,
                person_id=member.person_id,
                recipient_public_id=recipient_public_id,
                kind=event.kind,
                category=event.category,
                priority=event.priority,
                occurred_at=event.occurred_at,
                audience_role_id=member.role_id,
            )
        )
        return
    if channel == "push":
        # One delivery per active token, each with its own status (R-FANOUT-6).
        targets = tokens.get(member.person_id)
        if not targets:
            rows.add(recipient_id, channel, "skipped_no_destination", skipped=True)
            return
        for token_id in targets:
            rows.add(recipient_id, channel, "queued", target_id=token_id)
        return
    # Remote channels are rendered at send time, after the secret is resolved (R-SECRET-4).
    # A kind with a digest on this channel waits for its window (herald.digests).
    held = kind.digest is not None and channel in kind.digest.channels
    rows.add(recipient_id, channel, "held" if held else "queued")


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
