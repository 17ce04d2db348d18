"""`herald scheduler`: the reminder cycle, broadcast release and the escalation steps
(docs/escalation.md), each under its own lease, ticking until asked to stop, and the follow-up
sweeps on their own timer beside it.

Any number may run against one database: the reminder cycle runs only in the one holding the
database lease (R-OPS-13). On a stop request it interrupts its wait at once (R-OPS-10), starts no
new tick (R-OPS-9), finishes the occurrence in hand (R-OPS-11), hands its lease back and returns;
the caller closes the pool (R-OPS-12). It never sends anything: it writes events (R-OPS-8).

Follow-up sweeps need no lease (each transition is a compare-and-set): every scheduler sweeps,
in a task of its own so a long sweep never delays the lease's renewal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from sqlalchemy.ext.asyncio import AsyncEngine

from herald import outages
from herald.config import Settings
from herald.followups import worker as followups
from herald.kinds import Registry
from herald.scheduling import service as lease
from herald.scheduling import worker as cycle
from herald.scheduling.broadcasts import worker as broadcasts
from herald.scheduling.escalation import worker as escalation

log = logging.getLogger(__name__)


async def run_scheduler(
    settings: Settings,
    engine: AsyncEngine,
    registry: Registry,
    stop: asyncio.Event,
    *,
    holder: str | None = None,
) -> None:
    """Tick every HERALD_SCHEDULER_TICK_SECONDS until `stop` is set."""
    holder = holder or lease.new_holder_id()
    log.info(
        "scheduler started (holder %s; reminders %s; broadcasts %s)",
        holder,
        "on" if settings.feature_reminders else "off",
        "on" if settings.feature_broadcasts else "off",
    )
    leading = False
    backoff = outages.Backoff()
    releasing = False
    escalating = False
    sweeps = asyncio.create_task(followups.run_sweeps(settings, engine, registry, stop))
    try:
        while not stop.is_set():
            wait = settings.scheduler_tick_seconds
            started = time.monotonic()
            try:
                report = await cycle.run_tick(engine, registry, settings, holder, stop=stop)
                backoff.reset()
                outages.state(outages.DATABASE).succeeded(started)
                if report.leader != leading:
                    leading = report.leader
                    log.info("scheduler %s the reminder lease", "holds" if leading else "lost")
            except Exception as exc:
                # R-OPS-5: a failed tick is logged and the next one runs. An outage is said once
                # (herald.outages) and backed off, never a traceback a tick.
                dependency = outages.unavailable(exc)
                if dependency is not None:
                    outages.state(dependency).failed(exc)
                else:
                    log.exception("scheduler tick failed")
                wait = max(wait, backoff.next_delay())
            try:
                # Broadcast release and settling, under a lease of their own.
                step = await broadcasts.run_tick(engine, registry, settings, holder, stop=stop)
                if step.leader != releasing:
                    releasing = step.leader
                    log.info("scheduler %s the broadcast lease", "holds" if releasing else "lost")
            except Exception as exc:
                dependency = outages.unavailable(exc)
                if dependency is not None:
                    outages.state(dependency).failed(exc)
                else:
                    log.exception("scheduler broadcast step failed")
                if wait <= settings.scheduler_tick_seconds:  # one back-off step per tick
                    wait = max(wait, backoff.next_delay())
            try:
                # Escalation steps (docs/escalation.md), under a lease of their own.
                decided = await escalation.run_tick(engine, settings, holder, stop=stop)
                if decided.leader != escalating:
                    escalating = decided.leader
                    log.info("scheduler %s the escalation lease", "holds" if escalating else "lost")
            except Exception as exc:
                dependency = outages.unavailable(exc)
                if dependency is not None:
                    outages.state(dependency).failed(exc)
                else:
                    log.exception("scheduler escalation step failed")
                if wait <= settings.scheduler_tick_seconds:
                    wait = max(wait, backoff.next_delay())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=wait)
    finally:
        if not stop.is_set():
            sweeps.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeps  # stop set: it finishes the follow-up in hand (R-OPS-11)
        if leading:
            try:
                await cycle.release(engine, holder)
            except Exception:
                log.warning("could not hand the lease back; it expires by itself", exc_info=True)
        if releasing:
            try:
                await broadcasts.release(engine, holder)
            except Exception:
                log.warning("could not hand the broadcast lease back", exc_info=True)
        if escalating:
            try:
                await escalation.release(engine, holder)
            except Exception:
                log.warning("could not hand the escalation lease back", exc_info=True)
        log.info("scheduler stopped")
