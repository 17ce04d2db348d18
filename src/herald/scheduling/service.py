"""The scheduler's lease (R-OPS-13): several `herald scheduler` processes may run against one
database; the one holding the lease runs the reminder cycle.

The lease is renewed on every tick; a holder that dies stops renewing, and another takes it over
once it has expired, so a killed leader is replaced within two lease periods. The lease keeps
schedulers from doing the same work side by side; it is not what makes firing exactly-once —
each occurrence is claimed by a compare-and-set on its schedule row and its event deduplicated
on the occurrence — so a paused leader that wakes up late cannot double an occurrence either.
"""

from __future__ import annotations

import os
import socket
import uuid

from sqlalchemy.ext.asyncio import AsyncConnection

from herald.scheduling import queries

# The reminder cycle covers every tenant: its lease's scope is '*'.
ALL_TENANTS = "*"
REMINDERS_LEASE = "reminders"


def new_holder_id() -> str:
    """Who holds a lease: host and pid (for a person reading the table) and a random suffix
    (so a restarted process with a recycled pid is a new holder)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


async def hold_lease(
    conn: AsyncConnection, holder: str, seconds: int, *, name: str = REMINDERS_LEASE
) -> bool:
    return await queries.acquire(conn, ALL_TENANTS, name, holder, seconds)


async def release_lease(conn: AsyncConnection, holder: str, *, name: str = REMINDERS_LEASE) -> bool:
    return await queries.release(conn, ALL_TENANTS, name, holder)
