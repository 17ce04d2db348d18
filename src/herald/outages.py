"""Outages of the services Herald depends on: telling them apart, and living through them quietly.

A connection refused by a stopped PostgreSQL, a Redis that stopped answering, a primary that is
being switched: these are expected, and Herald's answer to each is the same — the API says 503
with a `Retry-After`, the loops back off (capped, jittered) and try again. What they must not do is
log a traceback per attempt: a six-second database outage once wrote 66,463 log lines from one
worker. Each dependency therefore has one process-wide state that logs one line when it goes
away and one line, with how long it was gone, when it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import redis.exceptions
import sqlalchemy.exc

log = logging.getLogger("herald.outages")

DATABASE = "database"
REDIS = "redis"

# SQLSTATEs that mean "this server cannot take writes or sessions right now", not "your query is
# wrong": the server is starting or stopping, was switched to a standby, or dropped us.
_UNAVAILABLE_SQLSTATES = frozenset(
    {
        "25006",  # read_only_sql_transaction: connected to a node that is no longer the primary
        "57P01",  # admin_shutdown
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now
        "08000",
        "08001",
        "08003",
        "08004",
        "08006",
        "08007",
        "53300",  # too_many_connections
    }
)


def unavailable(exc: BaseException) -> str | None:
    """The dependency whose outage `exc` is (DATABASE or REDIS), or None for any other error.

    Follows the exception's cause and context, since the database error usually arrives wrapped
    (SQLAlchemy's DBAPIError around psycopg's OperationalError)."""
    for current in _chain(exc):
        found = _classify(current)
        if found is not None:
            return found
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then what it was raised from or during, each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


# SQLSTATE class 40, "transaction rollback": PostgreSQL rolled the transaction back to break a
# deadlock (40P01) or a serialization failure (40001). The server is up; the work can be run again.
_CONFLICT_SQLSTATES = frozenset({"40001", "40P01"})


def is_conflict(exc: BaseException) -> bool:
    """`exc` (or what it wraps) is a transaction PostgreSQL rolled back to break a lock conflict
    with other work: not an outage, though psycopg raises it as an OperationalError."""
    return any(
        isinstance(current, psycopg.Error) and current.sqlstate in _CONFLICT_SQLSTATES
        for current in _chain(exc)
    )


def _classify(exc: BaseException) -> str | None:
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return REDIS
    if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.connection_invalidated:
        return DATABASE
    if isinstance(
        exc,
        sqlalchemy.exc.OperationalError
        | sqlalchemy.exc.InterfaceError
        | sqlalchemy.exc.DisconnectionError
        | sqlalchemy.exc.TimeoutError,  # the pool waited in vain for a connection
    ):
        return DATABASE
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return DATABASE
    if isinstance(exc, psycopg.Error) and exc.sqlstate in _UNAVAILABLE_SQLSTATES:
        return DATABASE
    return None


@dataclass
class Dependency:
    """One dependency's state in this process: up, or down since a moment."""

    name: str
    down_since: float | None = None
    failures: int = 0
    last_reason: str = ""

    @property
    def is_down(self) -> bool:
        return self.down_since is not None

    def failed(self, exc: BaseException) -> None:
        """Note a failure; only the first of an outage is logged. A transaction rolled back to
        break a lock conflict is no outage (the caller backs off and runs it again as it would
        for one): a WARNING line of its own each time (a failed tick is never silent, R-OPS-5),
        and the dependency stays up."""
        if is_conflict(exc):
            log.warning("%s: %s; running it again", self.name, describe(exc))
            return
        self.failures += 1
        self.last_reason = describe(exc)
        if self.down_since is not None:
            log.debug("%s still unavailable (%s)", self.name, self.last_reason)
        else:
            self.down_since = time.monotonic()
            log.warning(
                "%s unavailable (%s); backing off and retrying until it is back",
                self.name,
                self.last_reason,
            )

    def succeeded(self, started: float | None = None) -> None:
        """Note a success; the first after an outage logs how long it lasted. `started` (a
        time.monotonic() taken when the operation began) lets a success that was already under
        way when the outage was noticed count for nothing, so the state does not flap."""
        if self.down_since is None:
            return
        if started is not None and started < self.down_since:
            return
        gone = time.monotonic() - self.down_since
        log.warning(
            "%s is back after %.1f s (%d failed attempt(s) while it was away)",
            self.name,
            gone,
            self.failures,
        )
        self.down_since = None
        self.failures = 0


STATES = {DATABASE: Dependency(DATABASE), REDIS: Dependency(REDIS)}


def state(name: str) -> Dependency:
    return STATES[name]


def describe(exc: BaseException) -> str:
    """A short, secret-free description: the exception's class and its first line, bounded."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    # A DBAPIError's text carries the SQL and its parameters below the first line; never those.
    return f"{type(exc).__name__}: {first[:160]}" if first else type(exc).__name__


class Backoff:
    """Capped, jittered exponential delays for one loop: 0.25 s, 0.5 s, 1 s, … up to `cap`."""

    def __init__(self, *, base: float = 0.25, cap: float = 5.0) -> None:
        self.base = base
        self.cap = cap
        self.attempt = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.base * float(2**self.attempt))
        self.attempt = min(self.attempt + 1, 30)
        # "Equal jitter": never less than half the step, so loops spread out but still wait.
        return float(ceiling / 2 + random.uniform(0, ceiling / 2))

    def reset(self) -> None:
        self.attempt = 0


async def sleep_or_stop(seconds: float, stop: asyncio.Event | None) -> None:
    """Sleep `seconds`, returning early when `stop` is set."""
    if stop is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
