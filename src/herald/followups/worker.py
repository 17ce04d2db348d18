"""The follow-up sweep: per tenant, a notify pass and a reminder pass (R-FOLLOW-15).

No lease and no lock service: each transition is a compare-and-set on its row, so any number of
sweepers — in one process or several, under the scheduler's lease or not — produce exactly one
event per transition (R-FOLLOW-43, R-FOLLOW-44). The only cross-tenant read lists tenant ids
(R-FOLLOW-16); each tenant's scans and claims run on one connection, every transaction as that
tenant (role herald_app, row-level security applied).

Each claim is its own transaction with its event (R-FOLLOW-36, with the event in it): a failure
costs that follow-up this sweep only — it is logged, rolled back whole, stays due and is taken by
a later sweep — and never the sweep (R-FOLLOW-39, R-FOLLOW-41). `sweep()` raises nothing
(R-FOLLOW-40). A timer tick that finds the previous sweep of this process still running is
skipped (R-FOLLOW-45).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald import outages
from herald.config import Settings
from herald.db import tenancy
from herald.followups import service
from herald.kinds import Registry

log = logging.getLogger(__name__)

# Candidates read per scan; a pass keeps scanning while pages come back full.
DUE_BATCH = 200


@dataclass
class SweepReport:
    tenants: int = 0
    notified: int = 0
    reminded: int = 0
    # Candidates whose claim matched nothing: another sweeper took them, or an acknowledgement
    # or a reopen got there first.
    contended: int = 0
    errors: int = 0
    transitions: list[service.Transition] = field(default_factory=list)

    @property
    def busy(self) -> bool:
        return bool(self.notified or self.reminded or self.errors)


class Sweeper:
    """One process's sweeper: `sweep()` skips (returns None) while its previous sweep runs."""

    def __init__(self, engine: AsyncEngine, registry: Registry, *, batch: int = DUE_BATCH):
        self.engine, self.registry, self.batch = engine, registry, batch
        self._running = False

    async def sweep(self, *, stop: asyncio.Event | None = None) -> SweepReport | None:
        if self._running:
            log.info("follow-up sweep still running; this tick is skipped")
            return None
        self._running = True
        try:
            return await sweep(self.engine, self.registry, stop=stop, batch=self.batch)
        finally:
            self._running = False


async def sweep(
    engine: AsyncEngine,
    registry: Registry,
    *,
    stop: asyncio.Event | None = None,
    batch: int = DUE_BATCH,
) -> SweepReport:
    """Every tenant's two passes; raises nothing (R-FOLLOW-40)."""
    report = SweepReport()
    try:
        async with engine.begin() as conn:
            tenants = await service.tenants_with_followups(conn)
    except Exception as exc:
        report.errors += 1
        _log_failure(exc, "follow-up sweep could not list tenants; the next sweep retries")
        return report
    for tenant_id in tenants:
        if stop is not None and stop.is_set():
            break
        report.tenants += 1
        try:
            async with engine.connect() as conn:
                # Both passes' first scans share one transaction: a tenant with nothing due
                # costs one short read-only transaction.
                async with conn.begin():
                    await tenancy.enter_tenant(conn, tenant_id)
                    first = {
                        leg: await service.candidates(conn, tenant_id, leg, after=None, limit=batch)
                        for leg in (service.NOTIFY, service.REMIND)
                    }
                for leg, due in first.items():
                    if due:
                        await _pass(conn, registry, tenant_id, leg, due, report, stop, batch)
        except Exception as exc:
            report.errors += 1
            _log_failure(
                exc, "follow-up sweep of tenant %s failed; the next sweep retries", tenant_id
            )
    return report


async def _pass(
    conn: AsyncConnection,
    registry: Registry,
    tenant_id: str,
    leg: service.Leg,
    due: list[service.Candidate],
    report: SweepReport,
    stop: asyncio.Event | None,
    batch: int,
) -> None:
    """Claim each candidate of `due` (the pass's first page), then the following pages."""
    while True:
        for candidate in due:
            if stop is not None and stop.is_set():
                return  # no new claim once asked to stop; the one in hand has committed
            try:
                async with conn.begin():
                    await tenancy.enter_tenant(conn, tenant_id)
                    transition = await service.claim(conn, registry, tenant_id, candidate.id, leg)
            except Exception as exc:
                report.errors += 1
                _log_failure(
                    exc,
                    "follow-up %s (tenant %s): %s not recorded; it stays due",
                    candidate.id,
                    tenant_id,
                    leg,
                )
                continue
            if transition is None:
                report.contended += 1
                continue
            report.transitions.append(transition)
            if leg == service.NOTIFY:
                report.notified += 1
            else:
                report.reminded += 1
        if len(due) < batch:
            return
        after = (due[-1].due_at, due[-1].id)
        async with conn.begin():
            await tenancy.enter_tenant(conn, tenant_id)
            due = await service.candidates(conn, tenant_id, leg, after=after, limit=batch)


def _log_failure(exc: Exception, message: str, *args: object) -> None:
    """An outage is said once (herald.outages), never a traceback per follow-up; any
    other failure is logged with its traceback (R-FOLLOW-39)."""
    dependency = outages.unavailable(exc)
    if dependency is not None:
        outages.state(dependency).failed(exc)
    else:
        log.exception(message, *args)


async def run_sweeps(
    settings: Settings, engine: AsyncEngine, registry: Registry, stop: asyncio.Event
) -> None:
    """The scheduler's follow-up timer: a sweep every HERALD_FOLLOWUP_SWEEP_SECONDS, the first
    at start (follow-ups that fell due while nothing swept are taken at once, R-FOLLOW-42),
    until `stop`. Interval 0: returns at once, registering nothing (R-FOLLOW-49, R-FOLLOW-50)."""
    interval = settings.followup_sweep_interval
    if interval <= 0:
        return
    sweeper = Sweeper(engine, registry)
    loop = asyncio.get_running_loop()
    log.info("follow-up sweeps every %d s", interval)
    while not stop.is_set():
        started = loop.time()
        report = await sweeper.sweep(stop=stop)
        if report is not None and report.busy:
            log.info(
                "follow-up sweep: %d notified, %d reminded, %d taken elsewhere, %d failed "
                "(%d tenants)",
                report.notified,
                report.reminded,
                report.contended,
                report.errors,
                report.tenants,
            )
        wait = max(0.0, interval - (loop.time() - started))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=wait)
