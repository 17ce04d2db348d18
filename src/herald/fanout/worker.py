"""The fan-out loop body: claim one due event, write it batch by batch, publish after each commit."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from herald.fanout import service
from herald.fanout.service import InAppNotice
from herald.kinds import Registry

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
) -> bool:
    """Fan out one due event to completion (or until asked to stop). Returns False when none was due."""
    token = uuid.uuid4()
    async with engine.begin() as conn:
        event = await service.claim_next_event(conn, token, tenant_id=tenant_id)
    if event is None:
        return False
    log.info("fanning out event %s (%s)", event.public_id, event.kind)
    while True:
        if stop is not None and stop.is_set():
            async with engine.begin() as conn:
                await service.release_claim(conn, event, token)
            log.info("drain: released event %s at its cursor", event.public_id)
            return True
        try:
            async with engine.begin() as conn:
                outcome = await service.fan_out_batch(
                    conn, event, token, registry=registry, batch_size=batch_size
                )
        except Exception as exc:
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
            log.info("event %s complete: %s recipients", event.public_id, outcome.recipient_count)
            return True
