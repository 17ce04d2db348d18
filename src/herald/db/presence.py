"""A worker's presence in the database: an advisory lock that lives exactly as long as its session.

A fan-out claim records the claiming worker's presence key. When the worker dies — SIGKILL, a
crashed host, a dropped connection — PostgreSQL ends its session and the lock goes with it, so
any other worker can see at once that the claim's holder is gone and release it, instead of
waiting ten leases (which remain the rule for a worker that is alive but silent, R-REAPER-7).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any

import psycopg

from herald import outages
from herald.db.engine import named

log = logging.getLogger(__name__)

# The first half of the two-int advisory lock key: Herald's presence locks, apart from any lock
# a host application takes with one bigint key (objsubid 1) or another namespace.
NAMESPACE = 0x48524C44 & 0x7FFFFFFF  # "HRLD"
CHECK_SECONDS = 5.0


def new_key() -> int:
    return secrets.randbelow(2**31 - 2) + 1


async def _try_lock(conn: psycopg.AsyncConnection[Any], namespace: int, key: int) -> bool:
    """Take the session-level advisory lock (namespace, key) if nobody holds it."""
    cursor = await conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (namespace, key))
    row = await cursor.fetchone()
    return bool(row and row[0])


class Presence:
    """Hold `pg_try_advisory_lock(NAMESPACE, key)` on a connection of its own, reconnecting (and
    re-taking the same key) after an outage. `key` is what claims record; `held` says whether the
    lock is currently held, so claims made before it is are recorded without a holder."""

    def __init__(self, url: str) -> None:
        self._url = url
        self.key = new_key()
        self.held = asyncio.Event()

    @property
    def holder(self) -> int | None:
        return self.key if self.held.is_set() else None

    async def run(self, stop: asyncio.Event) -> None:
        backoff = outages.Backoff()
        while not stop.is_set():
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._url, autocommit=True, **named(self._url, "herald-worker")
                ) as conn:
                    while not await _try_lock(conn, NAMESPACE, self.key):
                        self.key = new_key()  # another live worker holds this key: take another
                    self.held.set()
                    backoff.reset()
                    while not stop.is_set():
                        await outages.sleep_or_stop(CHECK_SECONDS, stop)
                        await conn.execute("SELECT 1")  # notice a lost session promptly
            except Exception as exc:
                self.held.clear()
                if stop.is_set():
                    break
                if outages.unavailable(exc) is not None:
                    outages.state(outages.DATABASE).failed(exc)
                else:
                    log.warning("presence lock lost (%s); retrying", outages.describe(exc))
                await outages.sleep_or_stop(backoff.next_delay(), stop)
        self.held.clear()
