"""Digests (issue 16): a kind may declare a window (Kind.digest) in which its deliveries on the
named channels for one person go out as one message listing them.

The fan-out writes such deliveries `held` instead of `queued` (the in-app row is written as
always, so the inbox shows every item). The sweeper (`sweep`, run by `herald worker`) finds
groups — one tenant, person, channel and kind — whose oldest held row has waited the whole window
and, in one transaction per group:
- a group of one is released as `queued` and sent as itself;
- a larger group becomes one digest: an event of the kind's digest kind (`<kind>.digest`, whose
  English and Nepali wording is in herald.kinds.registry) already fanned out to the person, and
  its one `queued` delivery, which the channel worker leases, retries and dead-letters like any
  other; each item becomes `digested` with digest_delivery_id naming it.
An item's line is rendered from its own kind's template (the in-app wording when the kind has
one), so the digest says what each notification said.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald.db import tenancy
from herald.delivery import queries as delivery_queries
from herald.digests import queries
from herald.kinds import Kind, Registry
from herald.kinds.registry import DIGEST_SUFFIX
from herald.observability import metrics
from herald.rendering.render import render

log = logging.getLogger(__name__)

GROUPS_PER_SWEEP = 200
# Items one digest lists at most; more wait for the next one (due at once).
MAX_ITEMS = 50
MAX_LINE = 300


@dataclass
class SweepReport:
    digests: int = 0
    items: int = 0
    released: int = 0


def windows(registry: Registry) -> dict[str, int]:
    return registry.digest_windows()


def item_line(kind: Kind, channel: str, row: Mapping[str, Any]) -> str:
    values = {**(row["event_variables"] or {}), **(row["recipient_variables"] or {})}
    shown = "in_app" if "in_app" in kind.channels else channel
    rendered = render(kind, shown, row["locale"], values, {})
    if rendered is None:
        return "•"
    text = rendered.title or ""
    if shown == "in_app" and rendered.body:
        text = f"{text} — {rendered.body}" if text else rendered.body
    text = " ".join(text.split())
    return "• " + (text if len(text) <= MAX_LINE else text[: MAX_LINE - 1] + "…")


async def digest_group(
    conn: AsyncConnection, registry: Registry, group: Mapping[str, Any], report: SweepReport
) -> None:
    """One due group, under its tenant, in the caller's transaction."""
    await tenancy.enter_tenant(conn, group["tenant_id"])
    kind = registry.get(group["kind"])
    rows = await queries.lock_held_group(
        conn,
        channel=group["channel"],
        kind=group["kind"],
        person_id=group["person_id"],
        limit=MAX_ITEMS,
    )
    if not rows:
        return
    ids = [row["id"] for row in rows]
    if kind is None or len(rows) == 1 or group["person_id"] is None:
        # Alone, erased or of a kind the registry dropped: each goes out (or is recorded) as itself.
        report.released += await queries.release_held(conn, ids)
        await delivery_queries.wake_channel_workers(conn)
        return
    lines = [item_line(kind, group["channel"], row) for row in rows]
    digest = await queries.insert_digest(
        conn,
        tenant_id=group["tenant_id"],
        kind=kind.name + DIGEST_SUFFIX,
        channel=group["channel"],
        first=rows[0],
        variables={"count": str(len(rows)), "items": "\n".join(lines)},
        person_id=group["person_id"],
    )
    report.items += await queries.mark_digested(conn, ids, digest["id"])
    report.digests += 1
    await delivery_queries.wake_channel_workers(conn)


def _count(channel: str, done: SweepReport) -> None:
    """One committed group's figures into the process's counters."""
    if done.digests:
        metrics.DIGESTS_SENT.labels(channel).inc(done.digests)
    if done.items:
        metrics.DIGEST_ITEMS.labels(channel, "digested").inc(done.items)
    if done.released:
        metrics.DIGEST_ITEMS.labels(channel, "released").inc(done.released)


async def sweep(engine: AsyncEngine, registry: Registry) -> SweepReport:
    """Turn every due group into its digest (or release it); each group its own transaction."""
    report = SweepReport()
    due = windows(registry)
    if not due:
        return report
    async with engine.begin() as conn:
        groups = await queries.due_digest_groups(conn, due, GROUPS_PER_SWEEP)
    for group in groups:
        done = SweepReport()
        async with engine.begin() as conn:
            await digest_group(conn, registry, group, done)
        _count(group["channel"], done)
        report.digests += done.digests
        report.items += done.items
        report.released += done.released
    if report.digests or report.released:
        log.info(
            "digests: %d sent for %d items, %d released on their own",
            report.digests,
            report.items,
            report.released,
        )
    return report
