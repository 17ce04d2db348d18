"""Rate limits, through the `limits` library: the API's send and end-user limits, and the shared
pace of providers whose rate is an account-wide budget (Telegram's 25 messages a second).

Every limit is a moving window (`limits`' MovingWindowRateLimiter: at most N hits in any window
of the item's length, no burst at a window's edge). The counters live in Redis when
HERALD_REDIS_URL is set (`async+redis://`), so every API process and every worker shares one
budget; without Redis they live in this process's memory (`MemoryWindows`), so each process has
its own budget and N processes together allow N times the limit (docs/tenancy-and-security.md, "Security").

The memory windows are Herald's own, not `limits`' `async+memory://` storage: that storage
prepends each hit to a Python list (a copy of the list per hit) and, after every hit, starts a
sweep over every key it holds with one `asyncio.to_thread` hop per key. Measured on the inbox
list in-process (bench/api.py's small mode), it made a request under the default per-person limit
cost ~50 % more CPU than with the limit off, and ~100 % more under a high limit; the cost grows with
the number of people recently seen. `MemoryWindows` does O(1) work a hit (amortised): a deque of
the hit times still inside each key's window, and a bounded prune of keys gone idle.

A limiter whose Redis does not answer lets the request through (logged once per outage by the
outage tracker): a rate limit protects Herald from a flood; it must not turn a Redis outage into
an outage of sending, which needs only PostgreSQL.
"""

from __future__ import annotations

import asyncio
import functools
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import limits
import redis.exceptions
from limits.aio.storage import RedisStorage
from limits.aio.strategies import MovingWindowRateLimiter

from herald import outages
from herald.errors import RateLimited

# Written as HERALD_RATE_LIMIT_*=off to switch a limit off.
OFF = "off"
# Redis calls of the limiter give up quickly: a frozen Redis must not hold a request for long.
REDIS_TIMEOUT_SECONDS = 2.0
# After a failed Redis call, requests pass without asking Redis for this long, so an outage costs
# one timeout a second, not one per request.
REDIS_RETRY_SECONDS = 1.0


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


class MemoryWindows:
    """Moving windows in this process's memory, with `limits`' moving-window semantics: a hit is
    allowed while fewer than `amount` earlier hits fall inside the last `window` seconds, and a
    refused hit is told when the oldest of them leaves the window.

    Each key holds the times of its hits still inside its window, oldest first (at most `amount`
    of them). The keys are kept in the order they were last hit, so the least recently hit one is
    first: every hit looks at up to PRUNE_PER_HIT of those and drops each whose newest hit has
    left its window. Memory is therefore bounded by the keys hit within the longest window (plus
    what the prune has not reached yet), and no hit ever walks all of them. Thread-safe: one lock
    around each operation, never held across an await (nothing here awaits)."""

    PRUNE_PER_HIT = 2

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        # key -> (window seconds, hit times inside it, oldest first); least recently hit first.
        self._keys: dict[str, tuple[float, deque[float]]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._keys)

    def hit(self, key: str, amount: int, window: float) -> float:
        """Take one hit if the window has room and answer 0.0; else the time the window opens."""
        now = self._clock()
        with self._lock:
            entry = self._keys.pop(key, None)
            self._prune(now)
            hits = entry[1] if entry is not None else deque()
            self._keys[key] = (window, hits)
            self._expire(hits, now - window)
            if len(hits) >= amount:
                return hits[0] + window
            hits.append(now)
            return 0.0

    def room(self, key: str, amount: int, window: float) -> bool:
        """Whether one more hit would be allowed, without taking it."""
        with self._lock:
            entry = self._keys.get(key)
            if entry is None:
                return amount >= 1
            hits = entry[1]
            self._expire(hits, self._clock() - window)
            return len(hits) < amount

    def clear(self, key: str) -> None:
        with self._lock:
            self._keys.pop(key, None)

    @staticmethod
    def _expire(hits: deque[float], cutoff: float) -> None:
        # `limits` counts a hit at exactly the cutoff as inside the window; so does this.
        while hits and hits[0] < cutoff:
            hits.popleft()

    def _prune(self, now: float) -> None:
        for _ in range(self.PRUNE_PER_HIT):
            oldest = next(iter(self._keys), None)
            if oldest is None:
                return
            window, hits = self._keys[oldest]
            if hits and hits[-1] >= now - window:
                return
            del self._keys[oldest]


class RateLimits:
    """One process's limiter: Redis-backed `limits` (shared) or MemoryWindows (this process's);
    cheap to share, safe to use from any task."""

    def __init__(self, storage: RedisStorage | None) -> None:
        self._storage = storage
        # Exactly one of the two: the shared limiter over Redis, or this process's windows.
        self._limiter = MovingWindowRateLimiter(storage) if storage is not None else None
        self._memory = MemoryWindows() if storage is None else None
        self._unchecked_until = 0.0

    @property
    def shared(self) -> bool:
        """True when the counters live in Redis and every process shares them."""
        return self._limiter is not None

    @classmethod
    def build(cls, redis_url: str | None) -> RateLimits:
        """Redis-backed (shared by every process) when `redis_url` is set, else in memory."""
        if redis_url:
            storage = RedisStorage(
                "async+" + redis_url,
                implementation="redispy",
                key_prefix="herald:ratelimit",
                socket_timeout=REDIS_TIMEOUT_SECONDS,
                socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
            )
            return cls(storage)
        return cls(None)

    async def try_hit(self, item: limits.RateLimitItem, *identifiers: str) -> Verdict:
        """Take one hit if the window has room; otherwise say when it will have."""
        if self._memory is not None:
            opens_at = self._memory.hit(item.key_for(*identifiers), item.amount, item.get_expiry())
            return Verdict(True) if not opens_at else Verdict(False, opens_at)
        assert self._limiter is not None
        if time.monotonic() < self._unchecked_until:
            return Verdict(True)
        try:
            allowed = await self._limiter.hit(item, *identifiers)
            stats = None if allowed else await self._limiter.get_window_stats(item, *identifiers)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            # Fail open (module docstring); the tracker logs the outage once, not per request.
            outages.state(outages.REDIS).failed(exc)
            self._unchecked_until = time.monotonic() + REDIS_RETRY_SECONDS
            return Verdict(True)
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
        if self._memory is not None:
            return self._memory.room(item.key_for(*identifiers), item.amount, item.get_expiry())
        assert self._limiter is not None
        return await self._limiter.test(item, *identifiers)

    async def clear(self, item: limits.RateLimitItem, *identifiers: str) -> None:
        if self._memory is not None:
            self._memory.clear(item.key_for(*identifiers))
            return
        assert self._limiter is not None
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
