"""The scheduler's escalation step: due steps decided under the `escalation` lease.

A tick renews (or takes) the lease and, in the same transaction, decides up to ESCALATION_BATCH
due steps in one statement (queries.DECIDE: read → stopped, preference off → skipped, else the
delivery and its queue row written and the step sent). The transaction is the guarantee: a
scheduler killed between the check and the write leaves the step pending and no delivery, and
the delivery's uniqueness makes a repeat impossible. The lease keeps two schedulers from
working side by side; SKIP LOCKED and the row locks keep them apart if a paused leader wakes
late. The tick keeps going while batches come back full.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from herald.config import Settings
from herald.scheduling import service as lease
from herald.scheduling.escalation import queries

log = logging.getLogger(__name__)

ESCALATION_LEASE = "escalation"
ESCALATION_BATCH = 200


@dataclass
class EscalationTickReport:
    leader: bool = False
    sent: int = 0
    skipped: int = 0
    stopped: int = 0


async def run_tick(
    engine: AsyncEngine,
    settings: Settings,
    holder: str,
    *,
    stop: asyncio.Event | None = None,
    batch: int = ESCALATION_BATCH,
) -> EscalationTickReport:
    report = EscalationTickReport()
    while True:
        async with engine.begin() as conn:
            report.leader = await lease.hold_lease(
                conn, holder, settings.scheduler_lease_seconds, name=ESCALATION_LEASE
            )
            if not report.leader:
                return report
            decided = await queries.decide_due(conn, batch)
        report.sent += decided.sent
        report.skipped += decided.skipped
        report.stopped += decided.stopped
        if decided.claimed:
            # Counts only: never a person, an address or the wording.
            log.info(
                "escalation: %s steps sent, %s skipped, %s stopped",
                decided.sent,
                decided.skipped,
                decided.stopped,
            )
        if decided.claimed < batch or (stop is not None and stop.is_set()):
            return report


async def release(engine: AsyncEngine, holder: str) -> None:
    async with engine.begin() as conn:
        await lease.release_lease(conn, holder, name=ESCALATION_LEASE)
