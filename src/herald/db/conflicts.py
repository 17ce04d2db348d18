"""A transaction PostgreSQL aborted to break a deadlock (or a serialization failure) is retried.

Such an abort is not an outage: the server chose this transaction as the victim of a lock cycle
with another one (an erasure scrubbing a person's deliveries while a worker records outcomes of
the same rows, each holding a row the other wants), rolled it back, and let the other finish.
PostgreSQL's own advice is to run the transaction again; answering 503 DATABASE_UNAVAILABLE
instead (what an escaped OperationalError becomes) told the caller the database was down.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from herald import outages

log = logging.getLogger(__name__)

T = TypeVar("T")

# Tries in all, the first included; a third deadlock in a row is answered as before.
ATTEMPTS = 3


async def retrying(run: Callable[[], Awaitable[T]], *, what: str) -> T:
    """`run()` (one whole transaction), run again after a short random pause when PostgreSQL
    rolled it back to break a deadlock, up to ATTEMPTS tries."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return await run()
        except Exception as exc:
            if attempt == ATTEMPTS or not outages.is_conflict(exc):
                raise
            log.info("%s: rolled back to break a lock conflict; trying again", what)
            await asyncio.sleep(random.uniform(0.02, 0.1) * attempt)
    raise AssertionError("unreachable")
