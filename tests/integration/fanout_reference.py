"""The row-by-row fan-out batch: the reference the set-based batch (herald.fanout.pagewrite) is
compared with (test_fanout.py::test_set_based_batch_writes_what_the_row_by_row_path_writes).

It was Herald's first fan-out write, and is kept here, out of src, because it states each row's
decision as plain Python — one (recipient, channel) at a time, in the order the rules give —
where the set-based statement states them as SQL. `write_page` has the signature of
`herald.fanout.service._write_page_set`, so a test can monkeypatch it in and run the real worker
loop over it. It writes through the src queries the set-based path does not use
(`insert_recipients`, `insert_deliveries`, `active_push_tokens`, `wake_delivery_workers`) and
reads preferences with `preferences.load_preferences` (two queries, R-PREF-5).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from sqlalchemy.ext.asyncio import AsyncConnection

from herald.audience import service as audience
from herald.fanout import queries
from herald.fanout.pagewrite import queries as pagewrite
from herald.fanout.queries import ClaimedEvent, DeliveryRows
from herald.fanout.service import BatchOutcome, InAppNotice
from herald.kinds import Kind
from herald.preferences import service as preferences
from herald.rendering.render import Override, OverrideKey, render

GONE_STATUSES = frozenset(pagewrite.GONE_STATUSES)


async def write_page(
    conn: AsyncConnection,
    event: ClaimedEvent,
    kind: Kind | None,
    cursor: int,
    batch_size: int,
    outcome: BatchOutcome,
    default_timezone: str | None = None,
) -> tuple[int, int | None]:
    """One page of the audience written row by row; returns the page's length and its last
    person id (None for an empty page), as the set-based write does. (No deliverAt: the
    reference writes every delivery due now; `default_timezone` is the set-based write's.)"""
    members = await audience.resolve_audience_page(
        conn,
        event.tenant_id,
        event.audience,
        cursor,
        batch_size,
        created_until=event.audience_frozen_at,
    )
    if not members:
        return 0, None
    # People who joined after a broadcast's freeze move the cursor but get nothing (R-BCAST-8).
    admitted = [m for m in members if m.admitted]
    if admitted:
        await _write_members(conn, event, kind, admitted, outcome)
    return len(members), members[-1].person_id


async def _write_members(
    conn: AsyncConnection,
    event: ClaimedEvent,
    kind: Kind | None,
    members: list[audience.AudienceMember],
    outcome: BatchOutcome,
) -> None:
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
        recipient = inserted[member.person_id]
        for channel in event.channels:
            _plan_delivery(
                rows, event, kind, member, recipient, channel, snapshot, tokens, overrides, outcome
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
