"""The maintenance tick: the reaper's four sweeps in a fixed order, then backfill (R-REAPER-5).

1. reclaim deliveries whose lease expired (R-REAPER-1..4);
2. re-queue failed deliveries whose backoff has elapsed (R-STATE-10);
3. release fan-out claims older than ten delivery leases (R-REAPER-7, R-REAPER-8);
4. wake the fan-out if a due event is waiting (Herald has no relay to lose: the poller finds
   every due event itself, R-PLAT-3, so this sweep is the NOTIFY nudge only).
Each sweep is bounded, changes every row it handles so it leaves the candidate set, and keeps no
watermark (R-REAPER-6). Each catches its own failure so the others still run (R-OPS-5).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald.config import Settings
from herald.delivery import service as delivery
from herald.fanout import service as fanout

log = logging.getLogger(__name__)

SWEEP_LIMIT = 1000


@dataclass
class TickReport:
    reclaimed: int = 0
    dead_on_reclaim: int = 0
    requeued: int = 0
    released_fanouts: int = 0
    backfilled: int = 0
    failures: list[str] = field(default_factory=list)


async def run_tick(
    engine: AsyncEngine, settings: Settings, *, backfill_channels: Sequence[str]
) -> TickReport:
    report = TickReport()

    async def sweep(name: str, body: Callable[[AsyncConnection], Awaitable[None]]) -> None:
        try:
            async with engine.begin() as conn:
                await body(conn)
        except Exception:
            report.failures.append(name)
            log.exception("maintenance sweep %s failed; the other sweeps still run", name)

    async def reclaim(conn: AsyncConnection) -> None:
        rows = await delivery.reclaim_expired_leases(
            conn, max_attempts=settings.max_attempts, limit=SWEEP_LIMIT
        )
        report.reclaimed = len(rows)
        report.dead_on_reclaim = sum(1 for r in rows if r["status"] == "dead")

    async def requeue(conn: AsyncConnection) -> None:
        report.requeued = await delivery.requeue_due_failures(conn, limit=SWEEP_LIMIT)

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

    await sweep("reclaim_expired_leases", reclaim)
    await sweep("requeue_due_failures", requeue)
    await sweep("release_stale_fanout_claims", release)
    await sweep("wake_due_events", wake)
    if backfill_channels:
        await sweep("backfill_unconfigured", backfill)
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
