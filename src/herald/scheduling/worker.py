"""The scheduler's cycle: one tick under the lease (R-OPS-13), one transaction per occurrence.

A tick renews (or tries to take) the lease and, in the same short transaction, reads which
reminder schedules are due. Only the holder goes on to fire them, each occurrence in its own
transaction (reminders.fire_occurrence): a failure costs that occurrence this tick only — it
stays due and the next tick retries it — and never the tick (R-OPS-5). The scheduler only ever
writes events; the fan-out and channel workers deliver them (R-OPS-8, R-REMIND-7).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from herald.config import Settings
from herald.kinds import Registry
from herald.scheduling import service as lease
from herald.scheduling.reminders import service as reminders

log = logging.getLogger(__name__)

# Due schedules read per statement; a tick keeps reading while pages come back full.
DUE_BATCH = 100


@dataclass
class TickReport:
    leader: bool = False
    fired: int = 0
    missed: int = 0
    failed: int = 0
    # Occurrences another scheduler had already taken (or was taking) when this one got there.
    contended: int = 0
    errors: int = 0
    outcomes: list[reminders.OccurrenceOutcome] = field(default_factory=list)


async def run_tick(
    engine: AsyncEngine,
    registry: Registry,
    settings: Settings,
    holder: str,
    *,
    stop: asyncio.Event | None = None,
) -> TickReport:
    """One pass of the reminder cycle; nothing at all while reminders are switched off."""
    report = TickReport()
    if not settings.feature_reminders:
        return report
    max_lateness = timedelta(minutes=settings.reminder_max_lateness_minutes)
    while True:
        async with engine.begin() as conn:
            report.leader = await lease.hold_lease(conn, holder, settings.scheduler_lease_seconds)
            if not report.leader:
                return report
            due = await reminders.due_schedules(conn, limit=DUE_BATCH)
        for item in due:
            if stop is not None and stop.is_set():
                return report  # R-OPS-9: no new work once asked to stop
            try:
                async with engine.begin() as conn:
                    outcome = await reminders.fire_occurrence(
                        conn, registry, item, max_lateness=max_lateness
                    )
            except Exception:
                report.errors += 1
                log.exception(
                    "reminder schedule %s (tenant %s): occurrence %s not recorded; it stays due",
                    item.id,
                    item.tenant_id,
                    item.next_run_at.isoformat(),
                )
                continue
            if outcome is None:
                report.contended += 1
                continue
            _count(report, outcome)
        if len(due) < DUE_BATCH:
            return report


def _count(report: TickReport, outcome: reminders.OccurrenceOutcome) -> None:
    report.outcomes.append(outcome)
    report.missed += len(outcome.missed)
    if outcome.state == "fired":
        report.fired += 1
    elif outcome.state == "missed":
        report.missed += 1
    else:
        report.failed += 1
    # Ids and instants only: never the variables or the audience (R-OPS-20).
    log.info(
        "reminder %s (tenant %s): occurrence %s %s%s%s; next %s",
        outcome.schedule_id,
        outcome.tenant_id,
        outcome.occurrence.isoformat(),
        outcome.state,
        f" as event {outcome.event_id}" if outcome.event_id else "",
        f" ({len(outcome.missed)} earlier missed)" if outcome.missed else "",
        outcome.next_run_at.isoformat() if outcome.next_run_at else "none",
    )
    if outcome.error_code:
        log.error(
            "reminder %s (tenant %s) could not fire: %s",
            outcome.schedule_id,
            outcome.tenant_id,
            outcome.error_code,
        )


async def release(engine: AsyncEngine, holder: str) -> None:
    """Hand the lease back on a clean stop, so another scheduler need not wait for it to expire."""
    async with engine.begin() as conn:
        await lease.release_lease(conn, holder)
