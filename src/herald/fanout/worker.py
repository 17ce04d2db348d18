"""The fan-out loop body: claim one due event, write it batch by batch, publish after each commit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald import outages
from herald.config import DEFAULT_TIMEZONE
from herald.fanout import service
from herald.fanout.queries import ClaimedEvent
from herald.fanout.service import InAppNotice
from herald.kinds import Registry
from herald.observability import logs, metrics, tracing

log = logging.getLogger(__name__)

Publish = Callable[[Sequence[InAppNotice]], Awaitable[None]]

# Claims of one event before a failing fan-out is given up (each retry waits ten leases).
MAX_FANOUT_ATTEMPTS = 5


async def fan_out_next_event(
    engine: AsyncEngine,
    registry: Registry,
    *,
    batch_size: int,
    publish: Publish | None = None,
    stop: asyncio.Event | None = None,
    tenant_id: str | None = None,
    holder: int | None = None,
    default_timezone: str = DEFAULT_TIMEZONE,
) -> bool:
    """Fan out one due event to completion (or until asked to stop). Returns False when none was due.

    `holder` is this worker's presence key: recorded with the claim, it lets any other worker
    release the claim at once should this one die."""
    token = uuid.uuid4()
    event = await _claim(engine, token, tenant_id, holder)
    if event is None:
        return False
    # Every line and span below belongs to this event (and to the request that recorded it).
    with (
        logs.bound(
            event_id=event.public_id,
            tenant=event.tenant_id,
            request_id=event.origin_request_id,
            delivery_id=None,
        ),
        tracing.span(
            "fanout",
            parent=event.traceparent,
            kind="consumer",
            attributes={"herald.event_id": str(event.public_id), "herald.kind": event.kind},
        ),
    ):
        return await _fan_out(
            engine, event, token, registry, batch_size, publish, stop, default_timezone
        )


async def _fan_out(
    engine: AsyncEngine,
    event: ClaimedEvent,
    token: uuid.UUID,
    registry: Registry,
    batch_size: int,
    publish: Publish | None,
    stop: asyncio.Event | None,
    default_timezone: str = DEFAULT_TIMEZONE,
) -> bool:
    log.info("fanning out event %s (%s)", event.public_id, event.kind)
    held = _HeldConnection(engine)
    try:
        backoff = outages.Backoff()
        while True:
            if stop is not None and stop.is_set():
                async with engine.begin() as conn:
                    await service.release_claim(conn, event, token)
                log.info("drain: released event %s at its cursor", event.public_id)
                return True
            started = time.monotonic()
            try:
                with tracing.span("fanout.batch") as batch_span:
                    conn = await held.get()
                    async with conn.begin():
                        outcome = await service.fan_out_batch(
                            conn,
                            event,
                            token,
                            registry=registry,
                            batch_size=batch_size,
                            default_timezone=default_timezone,
                        )
                    tracing.set_attributes(
                        batch_span,
                        **{
                            "herald.recipients_written": outcome.recipients_written,
                            "herald.deliveries_written": outcome.deliveries_written,
                        },
                    )
            except Exception as exc:
                await held.drop()
                dependency = outages.unavailable(exc)
                if dependency is not None:
                    # An outage is not the event's fault: keep the claim, wait, and redo the batch
                    # (idempotent: the cursor and ON CONFLICT make a committed-but-unanswered batch a
                    # no-op). It counts against no attempt budget.
                    outages.state(dependency).failed(exc)
                    await outages.sleep_or_stop(backoff.next_delay(), stop)
                    continue
                if event.fanout_attempts >= MAX_FANOUT_ATTEMPTS:
                    # The last allowed attempt: stop and say so, instead of retrying forever.
                    async with engine.begin() as conn:
                        await service.give_up(
                            conn, event, token, f"FANOUT_FAILED ({type(exc).__name__})"
                        )
                    log.error(
                        "event %s: fan-out failed %d times; marked failed and dead-lettered",
                        event.public_id,
                        event.fanout_attempts,
                    )
                raise
            backoff.reset()
            outages.state(outages.DATABASE).succeeded(started)
            metrics.FANOUT_ROWS.labels("recipient").inc(outcome.recipients_written)
            metrics.FANOUT_ROWS.labels("delivery").inc(outcome.deliveries_written)
            # After commit, never inside the batch: a rolled-back batch tells nobody (R-REALTIME-5).
            if publish is not None and outcome.in_app:
                try:
                    await publish(outcome.in_app)
                except Exception:  # the publisher must never fail the fan-out (R-REALTIME-6)
                    log.exception("realtime publish failed; the inbox is still correct on refresh")
            if outcome.lost_claim:
                log.warning("event %s: claim lost to another worker; stopping", event.public_id)
                return True
            if outcome.completed:
                log.info(
                    "event %s complete: %s recipients", event.public_id, outcome.recipient_count
                )
                return True
    finally:
        await held.drop()


class _HeldConnection:
    """One connection for a whole event's batches, not a pool checkout per batch: a checkout
    costs a pre-ping round trip, and inside a busy `herald worker` every round trip waits its turn
    on the event loop (docs/scaling-fanout.md). Dropped on any failure; the next batch takes a
    fresh, pinged one."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._conn: AsyncConnection | None = None

    async def get(self) -> AsyncConnection:
        if self._conn is None:
            self._conn = await self._engine.connect()
        return self._conn

    async def drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()


async def _claim(
    engine: AsyncEngine, token: uuid.UUID, tenant_id: str | None, holder: int | None
) -> ClaimedEvent | None:
    """Claim a due event. Finding none, release the claims of workers known to be dead (their
    presence lock is gone) and try once more: a killed worker's event resumes within a poll."""
    async with engine.begin() as conn:
        event = await service.claim_next_event(conn, token, tenant_id=tenant_id, holder=holder)
        if event is not None:
            return event
        released = await service.release_orphaned_claims(conn)
    if not released:
        return None
    log.warning(
        "released %d fan-out claim(s) whose worker is gone; resuming them from their cursor",
        len(released),
    )
    async with engine.begin() as conn:
        return await service.claim_next_event(conn, token, tenant_id=tenant_id, holder=holder)
