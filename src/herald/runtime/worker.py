"""`herald worker`: the fan-out loop and the maintenance tick, woken by LISTEN/NOTIFY and polling.

A lost notification only delays work until the next poll; it never loses it. On a stop request the
worker interrupts its wait at once, finishes (or hands back) the event in hand, closes its
listener connection, and returns (R-OPS-9..12).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import psycopg
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.config import Settings
from herald.db.engine import libpq_url
from herald.fanout import service as fanout_service
from herald.fanout.worker import Publish, fan_out_next_event
from herald.kinds import Registry
from herald.sending.queries import FANOUT_CHANNEL

log = logging.getLogger(__name__)


async def run_worker(
    settings: Settings,
    engine: AsyncEngine,
    registry: Registry,
    stop: asyncio.Event,
    *,
    publish: Publish | None = None,
    tenant_id: str | None = None,
) -> None:
    """Run until `stop` is set. `tenant_id` restricts the worker to one tenant (tests, sharding)."""
    wake = asyncio.Event()
    url = libpq_url(engine.url.render_as_string(hide_password=False))
    tasks = [
        asyncio.create_task(_listen(url, FANOUT_CHANNEL, wake, stop), name="herald-listen"),
        asyncio.create_task(
            _fanout_loop(settings, engine, registry, wake, stop, publish, tenant_id),
            name="herald-fanout",
        ),
        asyncio.create_task(_maintenance_loop(settings, engine, stop), name="herald-maintenance"),
    ]
    log.info("worker started (poll every %ss)", settings.poll_interval_seconds)
    try:
        await stop.wait()
    finally:
        stop.set()
        wake.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        log.info("worker stopped")


async def _fanout_loop(
    settings: Settings,
    engine: AsyncEngine,
    registry: Registry,
    wake: asyncio.Event,
    stop: asyncio.Event,
    publish: Publish | None,
    tenant_id: str | None,
) -> None:
    while not stop.is_set():
        try:
            did_work = await fan_out_next_event(
                engine,
                registry,
                batch_size=settings.fanout_batch_size,
                publish=publish,
                stop=stop,
                tenant_id=tenant_id,
            )
        except Exception:
            # The claim stays; the reaper releases it and the cursor resumes the work.
            log.exception("fan-out failed; will retry after the claim is released")
            did_work = False
        if not did_work:
            await _sleep_until(wake, stop, settings.poll_interval_seconds)


async def _maintenance_loop(settings: Settings, engine: AsyncEngine, stop: asyncio.Event) -> None:
    """Periodic sweeps; each catches its own failure so later ticks still run (R-OPS-5)."""
    interval = max(1.0, settings.lease_seconds / 2)
    while not stop.is_set():
        try:
            async with engine.begin() as conn:
                released = await fanout_service.release_stale_claims(
                    conn, older_than_seconds=settings.fanout_lease_seconds
                )
            if released:
                log.warning("reaper released %d stale fan-out claim(s)", len(released))
        except Exception:
            log.exception("maintenance tick failed")
        await _sleep_until(None, stop, interval)


async def _sleep_until(wake: asyncio.Event | None, stop: asyncio.Event, seconds: float) -> None:
    waiters = [asyncio.ensure_future(stop.wait())]
    if wake is not None:
        waiters.append(asyncio.ensure_future(wake.wait()))
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        if wake is not None:
            wake.clear()


async def _listen(url: str, channel: str, wake: asyncio.Event, stop: asyncio.Event) -> None:
    """Hold one LISTEN connection; reconnect after failures. Polling covers any gap."""
    while not stop.is_set():
        try:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                await conn.execute(f"LISTEN {channel}")
                while not stop.is_set():
                    async for _ in conn.notifies(timeout=0.5):
                        wake.set()
        except Exception:
            if stop.is_set():
                return
            log.warning("LISTEN connection lost; polling until it is back", exc_info=True)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=2.0)
