"""The maintenance tick: the reaper's four sweeps in a fixed order, then backfill (R-REAPER-5).

1. reclaim deliveries whose lease expired (R-REAPER-1..4);
2. re-queue failed deliveries whose backoff has elapsed (R-STATE-10);
3. release fan-out claims older than ten delivery leases (R-REAPER-7, R-REAPER-8);
4. wake the fan-out if a due event is waiting (Herald has no relay to lose: the poller finds
   every due event itself, R-PLAT-3, so this sweep is the NOTIFY nudge only).
Each sweep is bounded, changes every row it handles so it leaves the candidate set, and keeps no
watermark (R-REAPER-6). Each catches its own failure so the others still run (R-OPS-5).

Then the housekeeping, each step guarded the same way:
5. the SMS credit check, once a day across all workers (herald.maintenance.credit);
6. operational email to the support mailbox through the email channel's provider
   (herald.maintenance.opmail);
7. retention: the write-time tables bottom-up, then, independently and on every tick, invalidated
   push tokens, the operations feed, finished operational emails and reminder runs
   (herald.maintenance.retention, R-RETENTION-9).
Steps 5 and 6 need the worker's providers (`providers=`, its "sms" and "email" entries); a caller
without them skips the step.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald import outages
from herald.channels.base import Provider
from herald.config import Settings
from herald.db import partitions
from herald.delivery import service as delivery
from herald.fanout import service as fanout
from herald.maintenance import credit, opmail, retention
from herald.maintenance.credit import CreditReading
from herald.maintenance.opmail import (
    OPERATIONAL_EVENT_TYPES,
    SendReport,
    enqueue_operational_email,
)
from herald.maintenance.retention import RetentionReport
from herald.observability import metrics

__all__ = [
    "OPERATIONAL_EVENT_TYPES",
    "TickReport",
    "enqueue_operational_email",
    "run_tick",
]

log = logging.getLogger(__name__)

SWEEP_LIMIT = 1000


@dataclass
class TickReport:
    reclaimed: int = 0
    reclaimed_channels: list[str] = field(default_factory=list)
    dead_on_reclaim: int = 0
    requeued: int = 0
    # deliverAt's in-app rows released into the inbox at their person's moment.
    inbox_released: int = 0
    released_fanouts: int = 0
    backfilled: int = 0
    credit: CreditReading | None = None
    operational_email: SendReport | None = None
    retention: RetentionReport = field(default_factory=RetentionReport)
    # Monthly partitions created ahead (their names), and months the default partition blocks.
    partitions_created: list[str] = field(default_factory=list)
    partitions_blocked: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def _sweep_failed(report: TickReport, name: str, exc: Exception) -> None:
    report.failures.append(name)
    dependency = outages.unavailable(exc)
    if dependency is not None:
        # An outage: said once by the dependency's state, not once per sweep per tick.
        outages.state(dependency).failed(exc)
    else:
        log.exception("maintenance sweep %s failed; the other sweeps still run", name)


async def run_tick(
    engine: AsyncEngine,
    settings: Settings,
    *,
    backfill_channels: Sequence[str],
    backfill_tenants: Sequence[tuple[str, str]] = (),
    providers: Mapping[str, Provider] | None = None,
    publish: Callable[[Sequence[fanout.InAppNotice]], Awaitable[None]] | None = None,
) -> TickReport:
    """One maintenance tick. `publish`: the realtime publisher, told of the inbox rows a
    deliverAt moment released (after their commit), as the fan-out tells of its own."""
    report = TickReport()
    released: list[fanout.InAppNotice] = []

    async def sweep(name: str, body: Callable[[AsyncConnection], Awaitable[None]]) -> None:
        try:
            async with engine.begin() as conn:
                await body(conn)
        except Exception as exc:
            _sweep_failed(report, name, exc)

    async def step(name: str, body: Callable[[], Awaitable[object]]) -> None:
        """A sweep that manages its own transactions (one per statement or per send)."""
        try:
            await body()
        except Exception as exc:
            _sweep_failed(report, name, exc)

    async def reclaim(conn: AsyncConnection) -> None:
        rows = await delivery.reclaim_expired_leases(
            conn, max_attempts=settings.max_attempts, limit=SWEEP_LIMIT
        )
        report.reclaimed = len(rows)
        report.dead_on_reclaim = sum(1 for r in rows if r["status"] == "dead")
        report.reclaimed_channels = [str(r["channel"]) for r in rows]

    async def requeue(conn: AsyncConnection) -> None:
        report.requeued = await delivery.requeue_due_failures(conn, limit=SWEEP_LIMIT)

    async def inbox(conn: AsyncConnection) -> None:
        rows = await delivery.release_due_inbox(conn, limit=SWEEP_LIMIT)
        report.inbox_released = len(rows)
        released.extend(
            fanout.InAppNotice(
                tenant_id=row["tenant_id"],
                person_id=row["person_id"],
                recipient_public_id=row["recipient_public_id"],
                kind=row["kind"],
                category=row["category"],
                priority=row["priority"],
                occurred_at=row["occurred_at"],
                audience_role_id=row["audience_role_id"],
            )
            for row in rows
            if row["person_id"] is not None  # erased meanwhile: nobody to tell
        )

    async def release(conn: AsyncConnection) -> None:
        released = await fanout.release_stale_claims(
            conn, older_than_seconds=settings.fanout_lease_seconds
        )
        report.released_fanouts = len(released)

    async def wake(conn: AsyncConnection) -> None:
        await fanout.wake_if_due(conn)

    async def backfill(conn: AsyncConnection) -> None:
        report.backfilled = await delivery.backfill_unconfigured(
            conn,
            backfill_channels,
            max_age_hours=settings.backfill_max_age_hours,
            limit=SWEEP_LIMIT,
        )

    async def backfill_of_tenants(conn: AsyncConnection) -> None:
        report.backfilled += await delivery.backfill_unconfigured_of_tenants(
            conn,
            backfill_tenants,
            max_age_hours=settings.backfill_max_age_hours,
            limit=SWEEP_LIMIT,
        )

    async def credit_check() -> None:
        assert providers is not None
        report.credit = await credit.check_sms_credit(engine, settings, providers.get("sms"))

    async def operational_email() -> None:
        assert providers is not None
        # R-OPMAIL-4: the email channel's own provider instance, not a second one.
        report.operational_email = await opmail.send_due_operational_emails(
            engine, settings, providers.get("email")
        )

    async def prune_events() -> None:
        await retention.prune_events(engine, settings, report=report.retention)

    async def create_partitions() -> None:
        # This month and the next two, so no row of the coming weeks waits on a tick.
        try:
            async with engine.begin() as conn:
                ensured = await partitions.ensure_async(conn, datetime.now(UTC))
        except DBAPIError as error:
            if getattr(error.orig, "sqlstate", None) != retention.LOCK_NOT_AVAILABLE:
                raise
            log.info("partitions: the parent tables stayed busy past the lock timeout; next tick")
            return
        report.partitions_created = [
            s.split('"')[1] for s in ensured.statements if s.startswith("CREATE TABLE")
        ]
        report.partitions_blocked = [m.suffix for m in ensured.blocked]
        if ensured.blocked:
            log.warning(
                "partitions: the default partition holds rows of %s, so those months stay in it "
                "(kept and aged by the bounded deletes)",
                ", ".join(report.partitions_blocked),
            )

    await sweep("reclaim_expired_leases", reclaim)
    if "reclaim_expired_leases" not in report.failures:  # counted once committed
        for channel in report.reclaimed_channels:
            metrics.LEASE_EXPIRIES.labels(channel).inc()
    await sweep("requeue_due_failures", requeue)
    await sweep("release_due_inbox", inbox)
    if publish is not None and released and "release_due_inbox" not in report.failures:
        try:
            await publish(released)
        except Exception:  # never fails the tick (R-REALTIME-6): the inbox is right on refresh
            log.exception("realtime publish failed; the inbox is still correct on refresh")
    await sweep("release_stale_fanout_claims", release)
    await sweep("wake_due_events", wake)
    if backfill_channels:
        await sweep("backfill_unconfigured", backfill)
    if backfill_tenants:
        # Channels configured only by a tenant's own provider account (herald.delivery.accounts).
        await sweep("backfill_unconfigured_of_tenants", backfill_of_tenants)
    if providers is not None and "sms" in providers:
        await step("sms_credit_check", credit_check)
    if providers is not None and "email" in providers:
        await step("operational_email", operational_email)
    await step("create_partitions", create_partitions)
    # Independent retentions, each run whatever the others found or raised (R-RETENTION-9).
    await step("retention_events", prune_events)
    for prune in retention.TABLE_PRUNES:
        await step(prune.step, functools.partial(prune, engine, settings, report=report.retention))
    retention.log_report(report.retention)
    if report.reclaimed:
        log.warning(
            "reaper reclaimed %d delivery lease(s), %d now dead",
            report.reclaimed,
            report.dead_on_reclaim,
        )
    if report.released_fanouts:
        log.warning("reaper released %d stale fan-out claim(s)", report.released_fanouts)
    if report.backfilled:
        log.info("backfill re-queued %d skipped_unconfigured deliveries", report.backfilled)
    return report
