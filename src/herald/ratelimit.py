"""Rate limits, through the `limits` library: the API's send and end-user limits, and the shared
pace of providers whose rate is an account-wide budget (Telegram's 25 messages a second).

Every limit is a moving window (`limits`' MovingWindowRateLimiter: at most N hits in any window
of the item's length, no burst at a window's edge). The counters live in Redis when
HERALD_REDIS_URL is set (`async+redis://`), so every API process and every worker shares one
budget; without Redis they live in this process's memory (`async+memory://`), so each process
has its own budget and N processes together allow N times the limit (README, Security).

A limiter whose Redis does not answer lets the request through (logged once per outage by the
outage tracker): a rate limit protects Herald from a flood; it must not turn a Redis outage into
an outage of sending, which needs only PostgreSQL.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from dataclasses import dataclass
from typing import Any

import limits
import redis.exceptions
from limits.aio.storage import MemoryStorage, RedisStorage, Storage
from limits.aio.strategies import MovingWindowRateLimiter

from herald.errors import RateLimited
from herald.runtime import outages

# Written as HERALD_RATE_LIMIT_*=off to switch a limit off.
OFF = "off"
# Redis calls of the limiter give up quickly: a frozen Redis must not hold a request for long.
REDIS_TIMEOUT_SECONDS = 2.0
# After a failed Redis call, requests pass without asking Redis for this long, so an outage costs
# one timeout a second, not one per request.
REDIS_RETRY_SECONDS = 1.0


@functools.lru_cache(maxsize=32)
@functools.lru_cache(maxsize=64)
def parse_limit(value: str) -> limits.RateLimitItem | None:
    """`100/second`, `6000 per minute`, `10/5 seconds` (the `limits` notation), or `off`.

    Raises ValueError for anything else, so a typo stops the process at start-up (R-OPS-14)."""
    text = value.strip()
    if text.lower() == OFF:
        return None
    try:
        item = limits.parse(text)
    except ValueError:
        raise ValueError(
            f"{value!r} is not a rate such as '100/second', '6000/minute' or 'off'"
        ) from None
    if item.amount < 1:
        raise ValueError(f"{value!r} allows nothing; use 'off' to switch the limit off")
    return item


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    # When the window next lets one hit through (epoch seconds; 0.0 when allowed).
    opens_at: float = 0.0

    @property
    def retry_after(self) -> int:
        """Whole seconds to wait, at least 1 (the Retry-After header)."""
        return max(1, math.ceil(self.opens_at - time.time()))


class RateLimits:
    """One process's limiter over one storage; cheap to share, safe to use from any task."""

    def __init__(self, storage: Storage, *, shared: bool) -> None:
        self._storage = storage
        self._limiter = MovingWindowRateLimiter(storage)
        # True when the counters live in Redis and every process shares them.
        self.shared = shared
        self._unchecked_until = 0.0

    @classmethod
    def build(cls, redis_url: str | None) -> RateLimits:
        """Redis-backed (shared by every process) when `redis_url` is set, else in memory."""
        if redis_url:
            storage: Storage = RedisStorage(
                "async+" + redis_url,
                implementation="redispy",
                key_prefix="herald:ratelimit",
                socket_timeout=REDIS_TIMEOUT_SECONDS,
                socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
            )
            return cls(storage, shared=True)
        return cls(MemoryStorage(), shared=False)

    async def try_hit(self, item: limits.RateLimitItem, *identifiers: str) -> Verdict:
        """Take one hit if the window has room; otherwise say when it will have."""
        if self.shared and time.monotonic() < self._unchecked_until:
            return Verdict(True)
        try:
            allowed = await self._limiter.hit(item, *identifiers)
            stats = None if allowed else await self._limiter.get_window_stats(item, *identifiers)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            # Fail open (module docstring); the tracker logs the outage once, not per request.
            outages.state(outages.REDIS).failed(exc)
            self._unchecked_until = time.monotonic() + REDIS_RETRY_SECONDS
            return Verdict(True)
        if self.shared:
            outages.state(outages.REDIS).succeeded()
        return Verdict(True) if stats is None else Verdict(False, stats.reset_time)

    async def check(self, item: limits.RateLimitItem | None, *identifiers: str) -> None:
        """Take one hit or raise RateLimited (429 with Retry-After); `None` is no limit."""
        if item is None:
            return
        verdict = await self.try_hit(item, *identifiers)
        if not verdict.allowed:
            raise RateLimited(retry_after=verdict.retry_after)

    async def acquire(self, item: limits.RateLimitItem, *identifiers: str) -> None:
        """Wait until the window has room, then take the hit: a pace, not a refusal."""
        while True:
            verdict = await self.try_hit(item, *identifiers)
            if verdict.allowed:
                return
            # Whole seconds are too coarse for a pace: wait for the instant the oldest hit
            # leaves the window (another process may take that slot first; then wait again).
            await asyncio.sleep(max(0.001, verdict.opens_at - time.time()))

    async def would_allow(self, item: limits.RateLimitItem, *identifiers: str) -> bool:
        """Whether one more hit fits, without taking it."""
        return await self._limiter.test(item, *identifiers)

    async def clear(self, item: limits.RateLimitItem, *identifiers: str) -> None:
        await self._limiter.clear(item, *identifiers)

    async def aclose(self) -> None:
        # `limits` keeps the redis-py client on its bridge and offers no close of its own.
        client: Any = getattr(getattr(self._storage, "bridge", None), "storage", None)
        if client is not None:
            await client.aclose()


async def enforce(
    limiter: RateLimits, item: limits.RateLimitItem | None, *identifiers: str
) -> None:
    """`limiter.check(item, *identifiers)`: one hit, or 429 RATE_LIMITED with Retry-After. A module
    function taking the limiter as a typed parameter, so the routes' error declarations
    (herald.api.raises) see the RateLimited it can raise."""
    await limiter.check(item, *identifiers)
