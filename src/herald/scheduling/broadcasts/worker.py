"""The scheduler's broadcast step: one tick under its own lease (DESIGN.md §5.2), one
transaction per broadcast.

A tick renews (or takes) the `broadcasts` lease and reads which approved broadcasts are due, in
one short transaction; only the holder goes on. Each due broadcast is released in its own
transaction as its tenant (freeze, one event, `sending`); then each released or cancelled
broadcast not yet settled is looked at once: completed when its fan-out is done and nothing is
in flight, or — cancelled — its unclaimed deliveries cancelled in bounded statements. A failure
costs that broadcast this tick only. The scheduler writes events and rows; it never sends
(R-BCAST-9). Nothing at all while HERALD_FEATURE_BROADCASTS is off.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from herald.config import Settings
from herald.kinds import Registry
from herald.scheduling import service as lease
from herald.scheduling.broadcasts import releasing

log = logging.getLogger(__name__)

BROADCASTS_LEASE = "broadcasts"
# Broadcasts read per scan statement; a tick keeps reading while pages come back full.
DUE_BATCH = 100


@dataclass
class BroadcastTickReport:
    leader: bool = False
    released: int = 0
    completed: int = 0
    failed: int = 0
    settled: int = 0
    errors: int = 0


async def run_tick(
    engine: AsyncEngine,
    registry: Registry,
    settings: Settings,
    holder: str,
    *,
    stop: asyncio.Event | None = None,
) -> BroadcastTickReport:
    report = BroadcastTickReport()
    if not settings.feature_broadcasts:
        return report
    while True:
        async with engine.begin() as conn:
            report.leader = await lease.hold_lease(
                conn, holder, settings.scheduler_lease_seconds, name=BROADCASTS_LEASE
            )
            if not report.leader:
                return report
            due = await releasing.due_broadcasts(conn, limit=DUE_BATCH)
        for item in due:
            if stop is not None and stop.is_set():
                return report
            try:
                async with engine.begin() as conn:
                    event_id = await releasing.release_broadcast(conn, registry, item)
            except Exception:
                report.errors += 1
                log.exception("broadcast %s (tenant %s): not released; it stays due", *_ids(item))
                continue
            if event_id is not None:
                report.released += 1
                log.info("broadcast %s (tenant %s) released as event %s", *_ids(item), event_id)
        if len(due) < DUE_BATCH:
            break
    after = 0
    while True:
        async with engine.begin() as conn:
            unsettled = await releasing.unsettled_broadcasts(conn, after_id=after, limit=DUE_BATCH)
        for item in unsettled:
            if stop is not None and stop.is_set():
                return report
            try:
                async with engine.begin() as conn:
                    outcome = await releasing.settle_broadcast(conn, item)
            except Exception:
                report.errors += 1
                log.exception("broadcast %s (tenant %s): not settled this tick", *_ids(item))
                continue
            if outcome == "completed":
                report.completed += 1
                log.info("broadcast %s (tenant %s) completed", *_ids(item))
            elif outcome == "failed":
                report.failed += 1
                log.error("broadcast %s (tenant %s): its fan-out gave up; failed", *_ids(item))
            elif outcome == "settled":
                report.settled += 1
                log.info("broadcast %s (tenant %s): cancellation settled", *_ids(item))
        if len(unsettled) < DUE_BATCH:
            return report
        after = unsettled[-1].id


def _ids(item: releasing.Due) -> tuple[int, str]:
    return item.id, item.tenant_id


async def release(engine: AsyncEngine, holder: str) -> None:
    """Hand the lease back on a clean stop."""
    async with engine.begin() as conn:
        await lease.release_lease(conn, holder, name=BROADCASTS_LEASE)
