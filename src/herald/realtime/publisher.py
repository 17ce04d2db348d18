"""Publishers: what the fan-out worker calls after each batch commits (R-REALTIME-5).

A publisher writes no durable record of its own (R-REALTIME-4) and never raises: a failure is
logged and swallowed, so the batch that was already committed is never re-run on its account
(R-REALTIME-6, R-REALTIME-9). Unread state stays authoritative in PostgreSQL (R-REALTIME-2), so a
lost publish costs one badge update until the next refetch.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import redis.asyncio as redis
from sqlalchemy.ext.asyncio import AsyncEngine

from herald import outages
from herald.realtime import queries, service

if TYPE_CHECKING:
    from herald.config import Settings
    from herald.fanout.service import InAppNotice

log = logging.getLogger(__name__)

# A publish waits at most this long for Redis, so a dead Redis never stalls a fan-out.
REDIS_TIMEOUT_SECONDS = 2.0


class Publisher(Protocol):
    """A `herald.fanout.worker.Publish` callable that can also be closed."""

    async def __call__(self, notices: Sequence[InAppNotice]) -> None: ...

    async def aclose(self) -> None: ...


class NotifyPublisher:
    """PostgreSQL LISTEN/NOTIFY (no HERALD_REDIS_URL): one autocommitted statement per publish,
    on its own pooled connection, carrying every payload of the batch."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def __call__(self, notices: Sequence[InAppNotice]) -> None:
        payloads = service.encode(notices)
        if not payloads:
            return
        try:
            # Autocommit: the one statement is its own transaction, so no BEGIN and COMMIT
            # round trips (each costs a turn of a busy worker's event loop).
            async with self._engine.connect() as conn:
                conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                await queries.notify(conn, service.NOTIFY_CHANNEL, payloads)
        except Exception as exc:  # never fail the batch (R-REALTIME-6)
            if outages.unavailable(exc) == outages.DATABASE:
                outages.state(outages.DATABASE).failed(exc)  # said once per outage
                return
            log.warning(
                "realtime publish of %d notice(s) failed (%s); the inbox is correct on refresh",
                len(notices),
                type(exc).__name__,
            )

    async def aclose(self) -> None:
        """The engine belongs to the caller; nothing of its own to close."""


class RedisPublisher:
    """Redis pub/sub (HERALD_REDIS_URL set): PUBLISH each payload, in one pipeline."""

    def __init__(self, url: str) -> None:
        self._redis: redis.Redis = redis.from_url(
            url,
            socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
            socket_timeout=REDIS_TIMEOUT_SECONDS,
        )

    async def __call__(self, notices: Sequence[InAppNotice]) -> None:
        payloads = service.encode(notices)
        if not payloads:
            return
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for payload in payloads:
                    pipe.publish(service.REDIS_CHANNEL, payload)
                await pipe.execute()
        except Exception as exc:  # never fail the batch (R-REALTIME-6)
            if outages.unavailable(exc) == outages.REDIS:
                outages.state(outages.REDIS).failed(exc)  # said once per outage
                return
            log.warning(
                "realtime publish of %d notice(s) to Redis failed (%s); "
                "the inbox is correct on refresh",
                len(notices),
                type(exc).__name__,
            )
            return
        outages.state(outages.REDIS).succeeded()

    async def aclose(self) -> None:
        try:
            await self._redis.aclose()
        except Exception:
            log.debug("closing the realtime Redis client failed", exc_info=True)


def build_publisher(settings: Settings, engine: AsyncEngine) -> Publisher:
    """Redis when HERALD_REDIS_URL is set, else NOTIFY on the worker's own engine."""
    if settings.redis_url:
        return RedisPublisher(settings.redis_url)
    return NotifyPublisher(engine)
