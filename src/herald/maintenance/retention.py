"""Retention: delete what has aged out, bottom-up, in short bounded statements (R-RETENTION-*).

Write-time tables: deliveries (with their attempt rows), then recipients, then events, each level
its own statement of at most `retention_batch_size` rows whose bound is a subquery
(R-RETENTION-5, R-RETENTION-6), each in its own short transaction, so no statement holds a long
lock on the tables the fan-out writes and the centre reads. Nothing relies on a cascade from the
event: recipients and deliveries reference it with RESTRICT. An event is kept whole while any of
its deliveries is queued, processing or failed (R-RETENTION-3) or is named by an unreplayed dead
letter (R-RETENTION-4), and is deleted only once its children are gone (R-RETENTION-7). Age is
`occurred_at` (R-RETENTION-8).

Independent retentions, run on every tick whether or not an event aged out (R-RETENTION-9):
invalidated push tokens (R-RETENTION-10), operations-feed rows with their read receipts
(R-RETENTION-11; the only code that deletes feed rows, R-RETENTION-2), finished operational
emails, reminder runs and resolved follow-ups. Dead letters are never deleted by age (R-DLQ-18).

A tick runs at most `max_batches` statements per level, so one tick's work is bounded too; what
is left is taken by the next tick.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald import vocabulary
from herald.config import Settings
from herald.db import partitions
from herald.maintenance import queries
from herald.maintenance.queries import UUID_PATTERN

log = logging.getLogger(__name__)

LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout

# Statements per level per tick: 50 × 1,000 rows = 50,000 deliveries a tick at most.
MAX_BATCHES_PER_TICK = 50

# Called after every statement with (level, rows deleted, seconds): the bench times each one.
StatementHook = Callable[[str, int, float], None]


@dataclass
class RetentionReport:
    deliveries: int = 0
    attempts: int = 0
    recipients: int = 0
    events: int = 0
    push_tokens: int = 0
    feed_notifications: int = 0
    operational_emails: int = 0
    reminder_runs: int = 0
    broadcasts: int = 0
    followups: int = 0
    escalation_steps: int = 0
    webhook_messages: int = 0
    undeliverable_addresses: int = 0
    console_sessions: int = 0
    pending_receipts: int = 0
    # The month partitions dropped whole (their suffixes; "legacy" for the legacy partitions).
    months_dropped: list[str] = field(default_factory=list)
    # Events of dropped months whose rows were kept (moved to the default partition).
    kept_events: int = 0
    statements: int = 0
    slowest_statement_seconds: float = 0.0
    durations: dict[str, list[float]] = field(default_factory=dict)

    def record(self, level: str, seconds: float) -> None:
        self.statements += 1
        self.slowest_statement_seconds = max(self.slowest_statement_seconds, seconds)
        self.durations.setdefault(level, []).append(seconds)

    @property
    def deleted(self) -> int:
        return (
            len(self.months_dropped)
            + self.deliveries
            + self.recipients
            + self.events
            + self.push_tokens
            + self.feed_notifications
            + self.operational_emails
            + self.reminder_runs
            + self.broadcasts
            + self.followups
            + self.escalation_steps
            + self.webhook_messages
            + self.undeliverable_addresses
            + self.console_sessions
            + self.pending_receipts
        )


class _Runner:
    def __init__(
        self,
        engine: AsyncEngine,
        settings: Settings,
        report: RetentionReport,
        max_batches: int | None,
        on_statement: StatementHook | None,
    ) -> None:
        self.engine = engine
        self.limit = settings.retention_batch_size
        self.report = report
        self.max_batches = max_batches
        self.on_statement = on_statement

    async def once(self, name: str, statement: Callable[[AsyncConnection], Awaitable[int]]) -> int:
        """One statement in its own transaction; returns the rows it deleted."""
        started = time.perf_counter()
        async with self.engine.begin() as conn:
            deleted = await statement(conn)
        seconds = time.perf_counter() - started
        self.report.record(name, seconds)
        if self.on_statement is not None:
            self.on_statement(name, deleted, seconds)
        return deleted

    async def level(self, name: str, statement: Callable[[AsyncConnection], Awaitable[int]]) -> int:
        """Repeat one level's statement until it finds less than a full batch (or the per-tick
        cap is reached). Returns the rows deleted."""
        total = 0
        batches = 0
        while self.max_batches is None or batches < self.max_batches:
            deleted = await self.once(name, statement)
            batches += 1
            total += deleted
            if deleted < self.limit:
                break
        return total


async def prune_events(
    engine: AsyncEngine,
    settings: Settings,
    *,
    report: RetentionReport | None = None,
    max_batches: int | None = MAX_BATCHES_PER_TICK,
    on_statement: StatementHook | None = None,
) -> RetentionReport:
    """The write-time tables, bottom-up: deliveries, recipients, events, in rounds of one
    bounded statement per level (at most `max_batches` rounds)."""
    report = report if report is not None else RetentionReport()
    runner = _Runner(engine, settings, report, max_batches, on_statement)
    limit = settings.retention_batch_size
    layout = await drop_aged_months(engine, settings, report=report, on_statement=on_statement)
    # One window of occurred_at at a time (a month partition, or what the default or legacy
    # partition holds between months), oldest first, so every statement reads one partition.
    rounds = 0
    for window in layout.windows(layout.aged_before(settings.retention_days)):

        async def deliveries(conn: AsyncConnection, w: partitions.Window = window) -> int:
            deleted = await queries.delete_aged_deliveries(
                conn, after=w.after, before=w.before, limit=limit, parts=w.parts
            )
            report.attempts += deleted.attempts
            return deleted.deliveries

        async def recipients(conn: AsyncConnection, w: partitions.Window = window) -> int:
            return await queries.delete_aged_recipients(
                conn, after=w.after, before=w.before, limit=limit, parts=w.parts
            )

        async def events(conn: AsyncConnection, w: partitions.Window = window) -> int:
            return await queries.delete_aged_events(
                conn, after=w.after, before=w.before, limit=limit, parts=w.parts
            )

        # Rounds of one statement per level, in bottom-up order: what a round's delivery
        # statement emptied, the same round's recipient and event statements take, so the
        # oldest end of the occurred_at index stays clear and no statement walks a growing run
        # of emptied events. The tick's cap counts rounds over all windows.
        while max_batches is None or rounds < max_batches:
            rounds += 1
            gone = await runner.once("deliveries", deliveries)
            report.deliveries += gone
            orphaned = await runner.once("recipients", recipients)
            report.recipients += orphaned
            emptied = await runner.once("events", events)
            report.events += emptied
            if max(gone, orphaned, emptied) < limit:
                break
    return report


async def drop_aged_months(
    engine: AsyncEngine,
    settings: Settings,
    *,
    report: RetentionReport,
    on_statement: StatementHook | None = None,
) -> partitions.Layout:
    """Drop every month partition that has wholly aged (each month in its own short
    transaction; what it must keep is moved to the default partition first, partitions.
    drop_month), then the legacy partitions once the bounded deletes emptied them. Returns where
    the bounded deletes stop (partitions.Layout.aged_before): they take what a drop could not —
    the default and legacy partitions, and a month keeping too much to move. Returns the
    partitions as they are after the drops."""
    async with engine.connect() as conn:
        layout = await partitions.layout(conn)
    cutoff = layout.now - timedelta(days=settings.retention_days)
    for month in layout.months:
        if month.end > cutoff:
            break

        async def drop(conn: AsyncConnection, month: partitions.Month = month) -> int:
            dropped = await partitions.drop_month(
                conn, month, in_flight=vocabulary.IN_FLIGHT_STATUSES, uuid_pattern=UUID_PATTERN
            )
            report.kept_events += dropped.kept_events if dropped.dropped else 0
            return int(dropped.dropped)

        if await _partition_step(engine, report, "months", drop, on_statement):
            report.months_dropped.append(month.suffix)
    if layout.legacy:

        async def legacy(conn: AsyncConnection) -> int:
            return int(await partitions.drop_legacy_if_empty(conn))

        if await _partition_step(engine, report, "legacy", legacy, on_statement):
            report.months_dropped.append(partitions.LEGACY)
    if not report.months_dropped:
        return layout
    async with engine.connect() as conn:
        return await partitions.layout(conn)


async def _partition_step(
    engine: AsyncEngine,
    report: RetentionReport,
    level: str,
    statement: Callable[[AsyncConnection], Awaitable[int]],
    on_statement: StatementHook | None,
) -> int:
    """One partition drop in its own transaction. A lock not granted in time leaves the month
    for the next tick (the bounded deletes never touch it meanwhile, so nothing is lost)."""
    started = time.perf_counter()
    try:
        async with engine.begin() as conn:
            done = await statement(conn)
    except DBAPIError as error:
        if getattr(error.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE:
            raise
        log.info("retention: a partition drop waited too long for its locks; next tick")
        done = 0
    seconds = time.perf_counter() - started
    report.record(level, seconds)
    if on_statement is not None:
        on_statement(level, done, seconds)
    return done


DeleteAged = Callable[..., Awaitable[int]]


async def _prune_table(
    engine: AsyncEngine,
    settings: Settings,
    level: str,
    delete: DeleteAged,
    days: int,
    *,
    report: RetentionReport | None,
    max_batches: int | None,
    on_statement: StatementHook | None,
) -> RetentionReport:
    """One single-table retention: bounded deletes of rows older than `days`, counted on the
    report field named `level`."""
    report = report if report is not None else RetentionReport()
    runner = _Runner(engine, settings, report, max_batches, on_statement)
    limit = settings.retention_batch_size

    async def statement(conn: AsyncConnection) -> int:
        return await delete(conn, days=days, limit=limit)

    setattr(report, level, getattr(report, level) + await runner.level(level, statement))
    return report


@dataclass(frozen=True)
class TablePrune:
    """One single-table retention: `delete` removes up to `limit` rows older than `days(settings)`
    (with whatever else keeps a row, e.g. a dead webhook message staying); the count goes on the
    report field `level`; `step` names it among the maintenance tick's steps."""

    step: str
    level: str
    delete: DeleteAged
    days: Callable[[Settings], int]

    async def __call__(
        self,
        engine: AsyncEngine,
        settings: Settings,
        *,
        report: RetentionReport | None = None,
        max_batches: int | None = MAX_BATCHES_PER_TICK,
        on_statement: StatementHook | None = None,
    ) -> RetentionReport:
        return await _prune_table(
            engine,
            settings,
            self.level,
            self.delete,
            self.days(settings),
            report=report,
            max_batches=max_batches,
            on_statement=on_statement,
        )


def _retention_days(settings: Settings) -> int:
    return settings.retention_days


# Push tokens invalidated more than push_token_retention_days ago (R-RETENTION-10).
prune_push_tokens = TablePrune(
    "retention_push_tokens",
    "push_tokens",
    queries.delete_invalidated_push_tokens,
    lambda settings: settings.push_token_retention_days,
)
# Operations-feed rows older than feed_retention_days, receipts by cascade (R-RETENTION-11).
prune_feed = TablePrune(
    "retention_feed",
    "feed_notifications",
    queries.delete_aged_feed_notifications,
    lambda settings: settings.feed_retention_days,
)
# Sent or skipped operational emails older than retention_days; dead ones stay.
prune_operational_emails = TablePrune(
    "retention_operational_email",
    "operational_emails",
    queries.delete_finished_operational_emails,
    _retention_days,
)
# Reminder runs older than retention_days (the events they point at age out by then too).
prune_reminder_runs = TablePrune(
    "retention_reminder_runs", "reminder_runs", queries.delete_aged_reminder_runs, _retention_days
)
# Broadcasts settled more than retention_days ago (their events age out by then too).
prune_broadcasts = TablePrune(
    "retention_broadcasts", "broadcasts", queries.delete_settled_broadcasts, _retention_days
)
# Follow-ups resolved (acknowledged, not required or reminded) and untouched for retention_days;
# armed and notified ones are never aged out.
prune_followups = TablePrune(
    "retention_followups", "followups", queries.delete_resolved_followups, _retention_days
)
# Escalation steps decided more than retention_days ago; pending ones stay (docs/escalation.md).
prune_escalation_steps = TablePrune(
    "retention_escalation_steps",
    "escalation_steps",
    queries.delete_decided_escalation_steps,
    _retention_days,
)
# Webhook messages sent more than retention_days ago. Queued, processing and dead ones stay (a
# dead one's dead letter names it, and dead letters are never trimmed by age).
prune_webhook_messages = TablePrune(
    "retention_webhook_messages",
    "webhook_messages",
    queries.delete_sent_webhook_messages,
    _retention_days,
)
# Addresses marked undeliverable more than retention_days ago are tried again.
prune_undeliverable_addresses = TablePrune(
    "retention_undeliverable_addresses",
    "undeliverable_addresses",
    queries.delete_aged_undeliverable_addresses,
    _retention_days,
)
# Console sessions past their expiry (an expired session signs nobody in; sign-out deletes its own
# row at once).
prune_console_sessions = TablePrune(
    "retention_console_sessions",
    "console_sessions",
    queries.delete_expired_console_sessions,
    _retention_days,
)

# Receipts kept for a send that was never recorded with their message id, a day after they came.
# The recorder writes an outcome within one lease of the call (or not at all: the reaper re-queues
# the delivery, and its next send has a new id), so a day is far past any match.
PENDING_RECEIPT_DAYS = 1
prune_pending_receipts = TablePrune(
    "retention_pending_receipts",
    "pending_receipts",
    queries.delete_aged_pending_receipts,
    lambda settings: PENDING_RECEIPT_DAYS,
)

# The independent single-table retentions, in the order a tick runs them (R-RETENTION-9).
TABLE_PRUNES = (
    prune_push_tokens,
    prune_feed,
    prune_operational_emails,
    prune_reminder_runs,
    prune_broadcasts,
    prune_followups,
    prune_escalation_steps,
    prune_webhook_messages,
    prune_undeliverable_addresses,
    prune_console_sessions,
    prune_pending_receipts,
)


async def run_retention(
    engine: AsyncEngine,
    settings: Settings,
    *,
    max_batches: int | None = MAX_BATCHES_PER_TICK,
    on_statement: StatementHook | None = None,
) -> RetentionReport:
    """Every retention in turn (`max_batches=None`: until nothing aged is left). The independent
    retentions run whatever the event levels found (R-RETENTION-9); a caller that needs each one
    to survive another's failure (the tick) calls them separately."""
    report = RetentionReport()
    await prune_events(
        engine, settings, report=report, max_batches=max_batches, on_statement=on_statement
    )
    for prune in TABLE_PRUNES:
        await prune(
            engine, settings, report=report, max_batches=max_batches, on_statement=on_statement
        )
    return report


def log_report(report: RetentionReport) -> None:
    if report.deleted:
        log.info(
            "retention deleted %d deliveries (%d attempts), %d recipients, %d events, "
            "%d push tokens, %d feed rows, %d operational emails, %d reminder runs, "
            "%d broadcasts, %d follow-ups, %d escalation steps, %d webhook messages, %d undeliverable addresses, "
            "%d console sessions, %d pending receipts, %d month partitions dropped whole (%s; %d kept events moved to "
            "the default partition) in %d statements (slowest %.3f s)",
            report.deliveries,
            report.attempts,
            report.recipients,
            report.events,
            report.push_tokens,
            report.feed_notifications,
            report.operational_emails,
            report.reminder_runs,
            report.broadcasts,
            report.followups,
            report.escalation_steps,
            report.webhook_messages,
            report.undeliverable_addresses,
            report.console_sessions,
            report.pending_receipts,
            len(report.months_dropped),
            ", ".join(report.months_dropped) or "none",
            report.kept_events,
            report.statements,
            report.slowest_statement_seconds,
        )
