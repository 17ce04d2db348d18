"""`herald worker`: fan-out, the channel senders and the maintenance tick, in one process.

Every loop is woken by LISTEN/NOTIFY and also polls, so a lost notification only delays work
until the next poll; it never loses it. On a stop request the worker interrupts its waits at once
(R-OPS-10), starts no new iteration (R-OPS-9), finishes or hands back the work in hand (R-OPS-11),
closes its listener connection and providers (R-OPS-12), and returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping

import psycopg
from sqlalchemy.ext.asyncio import AsyncEngine

from herald import outages
from herald.channels.accounts import NOTIFY_CHANNEL as ACCOUNTS_CHANNEL
from herald.channels.base import Provider
from herald.channels.providers import (
    build_providers,
    check_providers,
    close_providers,
    configured_channels,
)
from herald.config import Settings
from herald.db import pooler
from herald.db.engine import named
from herald.db.presence import Presence
from herald.delivery.accounts import TenantProviders
from herald.delivery.queries import DELIVERY_CHANNEL
from herald.delivery.worker import CONCURRENCY, Pace, deliver_batch, loops_of
from herald.digests import service as digests
from herald.fanout.worker import Publish, fan_out_next_event
from herald.kinds import Registry
from herald.maintenance.service import run_tick
from herald.realtime.publisher import Publisher, build_publisher
from herald.secrets.vault import Vault, build_vault
from herald.sending.queries import FANOUT_CHANNEL
from herald.webhooks import worker as webhooks

log = logging.getLogger(__name__)

# How long a fan-out waits for the worker's presence lock before claiming without it.
PRESENCE_WAIT_SECONDS = 5.0


async def run_worker(
    settings: Settings,
    engine: AsyncEngine,
    registry: Registry,
    stop: asyncio.Event,
    *,
    publish: Publish | None = None,
    tenant_id: str | None = None,
    providers: Mapping[str, Provider] | None = None,
    vault: Vault | None = None,
    channels: bool = True,
    maintenance: bool = True,
    fanout: bool = True,
) -> None:
    """Run until `stop` is set. `tenant_id` restricts fan-out and sends to one tenant (tests,
    sharding); `channels=False` / `maintenance=False` / `fanout=False` run a narrower worker.
    Fan-out and the senders in one process share one event loop and one core's worth of
    Python: a big broadcast's sends then slow its own fan-out (docs/scaling-fanout.md), and
    `herald worker --no-channels` beside `herald worker --no-fanout` separates them."""
    own_providers = providers is None
    providers = dict(providers) if providers is not None else build_providers(settings)
    check_providers(settings, providers)
    # Tenants' own provider accounts, rebuilt when one changes (herald.delivery.accounts).
    tenant_providers = TenantProviders(settings, providers)
    vault = vault if vault is not None else build_vault(settings, engine)
    # Without a caller's publisher, publish realtime notices over Redis or NOTIFY (R-REALTIME-1).
    own_publisher: Publisher | None = None
    if publish is None:
        publish = own_publisher = build_publisher(settings, engine)
    fanout_wake = asyncio.Event()
    sender_wakes = ChannelWakes(providers if channels else ())
    wakes: dict[str, Wake] = {
        FANOUT_CHANNEL: lambda _payload: fanout_wake.set(),
        DELIVERY_CHANNEL: sender_wakes.notified,
        ACCOUNTS_CHANNEL: tenant_providers.notified,
    }
    # LISTEN and the presence lock need a session: HERALD_DATABASE_SESSION_URL when set.
    url = pooler.session_url(settings.database_session_url, engine)
    # This process's presence lock: fan-out claims name it, so they are freed at once if we die.
    here = Presence(url)

    async def fanout_once() -> bool:
        if not here.held.is_set():
            # Claim under our presence key when we can: a claim without one can only be freed
            # by the ten-lease rule. The database being away is the only reason to wait long.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(here.held.wait(), timeout=PRESENCE_WAIT_SECONDS)
        return await fan_out_next_event(
            engine,
            registry,
            batch_size=settings.fanout_batch_size,
            publish=publish,
            stop=stop,
            tenant_id=tenant_id,
            holder=here.holder,
            default_timezone=settings.default_timezone,
        )

    tasks = [asyncio.create_task(_listen(url, wakes, stop), name="herald-listen")]
    if fanout:
        tasks += [
            asyncio.create_task(here.run(stop), name="herald-presence"),
            asyncio.create_task(
                _loop("fan-out", fanout_once, fanout_wake, stop, settings),
                name="herald-fanout",
            ),
        ]
    if channels:
        for channel, provider in sorted(providers.items()):
            gate = asyncio.Semaphore(CONCURRENCY.get(channel, 4))
            pace = Pace(channel)  # the channel's claim size, shared by its loops like the gate

            async def send_once(
                channel: str = channel,
                provider: Provider = provider,
                gate: asyncio.Semaphore = gate,
                pace: Pace = pace,
            ) -> bool:
                claimed = await deliver_batch(
                    engine,
                    channel,
                    provider,
                    registry=registry,
                    vault=vault,
                    settings=settings,
                    tenant_id=tenant_id,
                    gate=gate,
                    pace=pace,
                    accounts=tenant_providers,
                )
                return claimed > 0

            tasks.extend(
                asyncio.create_task(
                    _loop(
                        f"{channel} sender", send_once, sender_wakes.events[channel], stop, settings
                    ),
                    name=f"herald-{channel}-{n}",
                )
                for n in range(loops_of(channel))
            )
    webhook_client = webhooks.build_client(settings) if channels else None
    if webhook_client is not None:
        # Signed webhooks to the host (issue 16): polled, no NOTIFY of their own.
        client = webhook_client

        async def webhooks_once() -> bool:
            return await webhooks.send_batch(engine, settings, client, tenant_id=tenant_id) > 0

        tasks.append(
            asyncio.create_task(
                _loop("webhook sender", webhooks_once, asyncio.Event(), stop, settings),
                name="herald-webhooks",
            )
        )
    if channels and digests.windows(registry):
        tasks.append(asyncio.create_task(_digests(engine, registry, stop), name="herald-digests"))
    if maintenance:
        tasks.append(
            asyncio.create_task(
                _maintenance(settings, engine, providers, tenant_providers, stop, publish),
                name="herald-maintenance",
            )
        )
    log.info(
        "worker started: %s",
        ", ".join(
            name
            for name, on in (
                ("fan-out", fanout),
                ("channels", channels),
                ("maintenance", maintenance),
            )
            if on
        )
        or "nothing",
    )
    try:
        await stop.wait()
    finally:
        stop.set()
        for wake in wakes.values():
            wake("")
        await asyncio.gather(*tasks, return_exceptions=True)
        if webhook_client is not None:
            await webhook_client.aclose()
        await tenant_providers.aclose()
        if own_providers:
            await close_providers(providers)
        await vault.aclose()
        if own_publisher is not None:
            await own_publisher.aclose()
        log.info("worker stopped")


async def _loop(
    name: str,
    once: Callable[[], Awaitable[bool]],
    wake: asyncio.Event,
    stop: asyncio.Event,
    settings: Settings,
) -> None:
    """Run `once` back to back while it finds work; otherwise wait for a wake-up or the poll.

    A failure backs off (capped, jittered) before the next try. An outage of the database or
    Redis is said once for the whole process (herald.outages), without a traceback;
    anything else is logged with its traceback, at most once per back-off step."""
    backoff = outages.Backoff()
    while not stop.is_set():
        started = time.monotonic()
        try:
            did_work = await once()
        except Exception as exc:
            dependency = outages.unavailable(exc)
            if dependency is not None:
                outages.state(dependency).failed(exc)
            else:
                log.exception("%s iteration failed; its work stays claimable and is retried", name)
            await outages.sleep_or_stop(backoff.next_delay(), stop)
            continue
        backoff.reset()
        outages.state(outages.DATABASE).succeeded(started)
        if not did_work:
            await _sleep_until(wake, stop, settings.poll_interval_seconds)


async def _maintenance(
    settings: Settings,
    engine: AsyncEngine,
    providers: Mapping[str, Provider],
    tenant_providers: TenantProviders,
    stop: asyncio.Event,
    publish: Publish | None = None,
) -> None:
    """The periodic tick; every sweep catches its own failure (R-OPS-5)."""
    interval = max(1.0, min(settings.lease_seconds / 2, 30.0))
    backfill = configured_channels(providers)
    while not stop.is_set():
        try:
            # A channel the deployment leaves unconfigured is re-driven for each tenant whose
            # own account configures it.
            await tenant_providers.refresh(engine)
            await run_tick(
                engine,
                settings,
                backfill_channels=backfill,
                backfill_tenants=tenant_providers.configured_pairs(),
                providers=providers,
                publish=publish,
            )
        except Exception as exc:
            dependency = outages.unavailable(exc)
            if dependency is not None:
                outages.state(dependency).failed(exc)
            else:
                log.exception("maintenance tick failed")
        await _sleep_until(None, stop, interval)


# How often the digest sweeper looks for groups whose window has passed: a digest goes out at
# most this long after its window, and the grouping query runs this rarely.
DIGEST_SWEEP_SECONDS = 10.0


async def _digests(engine: AsyncEngine, registry: Registry, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await digests.sweep(engine, registry)
        except Exception as exc:
            dependency = outages.unavailable(exc)
            if dependency is not None:
                outages.state(dependency).failed(exc)
            else:
                log.exception("digest sweep failed; its groups stay held and are retried")
        await _sleep_until(None, stop, DIGEST_SWEEP_SECONDS)


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


# What a NOTIFY on one LISTEN channel does, given its payload.
Wake = Callable[[str], None]


class ChannelWakes:
    """The senders' wake-ups, one per delivery channel (each channel's loops share its event).

    A NOTIFY on herald_delivery whose payload names channels — the fan-out's names the channels
    of the rows its batch queued, comma-separated — wakes those channels' loops only; an empty
    payload (every other writer's) wakes every channel. An email-only broadcast used to wake the
    SMS, push and Telegram loops on each of its batches, each to run a claim that found nothing:
    1,220 empty claims beside 501 full ones at 100,000 people (docs/scaling.md, the worker)."""

    def __init__(self, channels: Iterable[str]) -> None:
        self.events = {channel: asyncio.Event() for channel in channels}

    def notified(self, payload: str) -> None:
        named = payload.split(",") if payload else list(self.events)
        for channel in named:
            if channel in self.events:
                self.events[channel].set()


async def _listen(url: str, wakes: Mapping[str, Wake], stop: asyncio.Event) -> None:
    """Hold one LISTEN connection for every channel; reconnect after failures, backing off.
    Polling covers the gaps, so a lost connection delays work and never loses it."""
    backoff = outages.Backoff()
    while not stop.is_set():
        try:
            async with await psycopg.AsyncConnection.connect(
                url, autocommit=True, **named(url, "herald-worker")
            ) as conn:
                for channel in wakes:
                    await conn.execute(f"LISTEN {channel}")
                backoff.reset()
                # Woken by nothing while we were away: look for work now.
                for missed in wakes.values():
                    missed("")
                while not stop.is_set():
                    async for notify in conn.notifies(timeout=0.5):
                        wake = wakes.get(notify.channel)
                        if wake is not None:
                            wake(notify.payload)
        except Exception as exc:
            if stop.is_set():
                return
            if outages.unavailable(exc) is not None:
                outages.state(outages.DATABASE).failed(exc)
            else:
                log.warning("LISTEN connection lost (%s); polling", outages.describe(exc))
            await outages.sleep_or_stop(backoff.next_delay(), stop)
