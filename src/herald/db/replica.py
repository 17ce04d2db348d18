"""Inbox reads from a streaming-replication standby (HERALD_DATABASE_READ_URL), safely.

`ReadRouting.run(tenant, person, work)` runs a read on the standby's engine when that is safe
for this person, else on the primary's:

- **The person's own writes** (mark read, read all, preferences) leave a *fence*: the primary's
  `pg_current_wal_insert_lsn()` read just after the write committed (`fence`) — the insert
  position, not `pg_current_wal_lsn()` (the write position), which under
  `synchronous_commit = off` can still be short of the write's commit record. A read goes to the
  standby only once its `pg_last_wal_replay_lsn()` has reached the person's fence, so the
  person who just marked a notification read never sees it unread again. Fences live in Redis
  (HERALD_REDIS_URL: every API process sees them), else in this process's memory — then several
  API processes with a read URL need Redis, docs/scaling.md says so. A fence lives
  HERALD_READ_MAX_LAG_SECONDS + FENCE_MARGIN_SECONDS: after that the standby has either replayed
  it or is lagging, and lagging sends every read to the primary anyway.
- **Lag**: the standby's replay position is read at most every STATUS_TTL_SECONDS together with
  the primary's current position; the lag is how long ago the last reading was whose primary
  position the standby has replayed (so an idle primary is no lag, and what the standby lacks
  was written after that). Beyond
  HERALD_READ_MAX_LAG_SECONDS reads go to the primary, one log line each way.
- **Down**: a standby that cannot be reached (or has been promoted, or is another cluster) is
  not used; the read in hand runs on the primary, the standby is tried again after
  DOWN_RETRY_SECONDS, one log line each way. A standby never makes a read fail.

`verify` is the start-up check: the read URL must be in recovery and have the primary's
`system_identifier`, else the API refuses to start (DatabaseReadUrlInvalid). Unreachable at
start-up, the API starts on the primary alone and the standby is verified when it answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.ext.asyncio import AsyncEngine

from herald import outages
from herald.db.engine import driver_statement, libpq_url, named
from herald.db.pooler import masked
from herald.errors import DatabaseReadUrlInvalid, HeraldError, Unauthenticated

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long one reading of the standby's replay position (and the primary's) serves reads.
STATUS_TTL_SECONDS = 0.05
# A reading this long after the previous one is a quiet spell's first (_read_positions).
QUIET_SECONDS = 4 * STATUS_TTL_SECONDS
# The longest a read waits for a reading of the positions before it goes to the primary.
STATUS_WAIT_SECONDS = 0.5
# How long a standby that could not be reached is left alone before it is tried again.
DOWN_RETRY_SECONDS = 1.0
# A fence outlives the lag limit by this much (module docstring).
FENCE_MARGIN_SECONDS = 5.0
# Primary positions kept while the standby is behind (the oldest is what the lag is measured by).
MAX_SAMPLES = 1000
REDIS_TIMEOUT_SECONDS = 0.5
REDIS_RETRY_SECONDS = 1.0

_IDENTITY = "SELECT pg_is_in_recovery(), (SELECT system_identifier FROM pg_control_system())::text"
_PRIMARY_LSN = "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn"
_STANDBY_STATUS = "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn() - '0/0'::pg_lsn"
# Raise the stored fence, never lower it (two writes of one person may finish out of order).
_RAISE_FENCE = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > current then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
"""


async def _identity(url: str) -> tuple[bool, str]:
    async with await psycopg.AsyncConnection.connect(
        libpq_url(url), autocommit=True, prepare_threshold=None, **named(url, "herald-probe")
    ) as conn:
        row = await (await conn.execute(_IDENTITY)).fetchone()
    assert row is not None
    return bool(row[0]), str(row[1])


async def system_identifier(url: str) -> str:
    """The cluster's `system_identifier` of the server `url` reaches."""
    return (await _identity(url))[1]


async def verify(primary_url: str, read_url: str, primary_id: str | None = None) -> bool:
    """True when `read_url` is a standby of `primary_url`'s cluster; False when it cannot be
    reached (logged); raises DatabaseReadUrlInvalid when it is a primary or another cluster."""
    primary_id = primary_id or await system_identifier(primary_url)
    try:
        in_recovery, read_id = await _identity(read_url)
    except psycopg.OperationalError as exc:
        log.warning(
            "HERALD_DATABASE_READ_URL (%s) cannot be reached (%s): inbox reads use the primary "
            "until it answers",
            masked(read_url),
            type(exc).__name__,
        )
        return False
    check_identity(read_url, in_recovery, read_id, primary_id)
    return True


def check_identity(read_url: str, in_recovery: bool, read_id: str, primary_id: str) -> None:
    if read_id != primary_id:
        raise DatabaseReadUrlInvalid(
            f"HERALD_DATABASE_READ_URL ({masked(read_url)}) reaches another PostgreSQL cluster "
            f"(system identifier {read_id}, HERALD_DATABASE_URL's is {primary_id}): point it at "
            "a streaming standby of HERALD_DATABASE_URL's primary, or unset it"
        )
    if not in_recovery:
        raise DatabaseReadUrlInvalid(
            f"HERALD_DATABASE_READ_URL ({masked(read_url)}) reaches a primary, not a standby in "
            "recovery: point it at a streaming standby of HERALD_DATABASE_URL's primary, or "
            "unset it"
        )


class Fences:
    """Each person's fence (a WAL position as an integer): in Redis, or in this process."""

    def __init__(self, redis_url: str | None, ttl_seconds: float) -> None:
        self.ttl = ttl_seconds
        self._redis: aioredis.Redis | None = (
            aioredis.from_url(
                redis_url,
                socket_timeout=REDIS_TIMEOUT_SECONDS,
                socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
            )
            if redis_url
            else None
        )
        self._memory: dict[tuple[str, str], tuple[int, float]] = {}
        # After a Redis failure it is left alone this long: reads go to the primary meanwhile,
        # fences are kept in memory, and no read waits out a Redis timeout.
        self._redis_skipped_until = 0.0

    @property
    def shared(self) -> bool:
        return self._redis is not None

    @staticmethod
    def _key(tenant_id: str, person: str) -> str:
        return f"herald:read-fence:{len(tenant_id)}:{tenant_id}:{person}"

    async def raise_to(self, tenant_id: str, person: str, lsn: int) -> None:
        self._remember(tenant_id, person, lsn)
        if self._redis is None or time.monotonic() < self._redis_skipped_until:
            return
        try:
            await self._redis.eval(
                _RAISE_FENCE, 1, self._key(tenant_id, person), str(lsn), str(int(self.ttl * 1000))
            )
        except (RedisConnectionError, RedisTimeoutError) as exc:
            # Kept in memory above: this process still reads the person from the primary.
            self._redis_skipped_until = time.monotonic() + REDIS_RETRY_SECONDS
            outages.state(outages.REDIS).failed(exc)

    async def get(self, tenant_id: str, person: str) -> int | None:
        """The person's fence; raises RedisError when Redis cannot say (then: the primary)."""
        now = time.monotonic()
        held = self._memory.get((tenant_id, person))
        mine = held[0] if held is not None and held[1] > now else None
        if self._redis is None:
            return mine
        if now < self._redis_skipped_until:
            raise RedisError("Redis failed a moment ago")
        try:
            value = await self._redis.get(self._key(tenant_id, person))
        except (RedisConnectionError, RedisTimeoutError):
            self._redis_skipped_until = time.monotonic() + REDIS_RETRY_SECONDS
            raise
        shared = int(value) if value is not None else None
        if mine is None or shared is None:
            return mine if shared is None else shared
        return max(mine, shared)

    def _remember(self, tenant_id: str, person: str, lsn: int) -> None:
        now = time.monotonic()
        if len(self._memory) > 10_000:
            self._memory = {k: v for k, v in self._memory.items() if v[1] > now}
        held = self._memory.get((tenant_id, person))
        if held is not None and held[1] > now:
            lsn = max(lsn, held[0])
        self._memory[(tenant_id, person)] = (lsn, now + self.ttl)

    async def aclose(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()


class ReadRouting:
    """Where an inbox read runs (module docstring). Without a standby every read (and no fence)
    goes to the primary at no cost."""

    def __init__(
        self,
        primary: AsyncEngine,
        standby: AsyncEngine | None = None,
        *,
        max_lag_seconds: float = 5.0,
        redis_url: str | None = None,
        primary_id: str | None = None,
        verified: bool = True,
    ) -> None:
        self.primary = primary
        self.standby = standby
        self.max_lag = max_lag_seconds
        self.fences = Fences(redis_url, max_lag_seconds + FENCE_MARGIN_SECONDS)
        self._primary_id = primary_id
        self._verified = verified
        self._replayed = -1  # the standby's replay position at the last reading
        self._read_at = -1e9  # monotonic time of that reading
        # (time, primary position) of each reading the standby has not replayed yet, oldest first;
        # the lag is counted from the last reading it had caught up with (never earlier than a
        # fence it lacks was taken, so a fence that expires finds the standby lagging).
        self._samples: deque[tuple[float, int]] = deque()
        self._caught_up_at = time.monotonic()
        self._lag = 0.0
        self._unsure = False
        self._down_until = 0.0
        self._refreshing: asyncio.Task[None] | None = None
        # The standby's state as last logged: "usable", "lagging", "down" (or "unverified":
        # unreachable at start-up, not yet checked).
        self.state = "usable" if verified else "unverified"

    @property
    def lag_seconds(self) -> float:
        return self._lag

    async def fence(self, tenant_id: str, person: str) -> None:
        """Call after the person's own write committed: their reads wait for the standby to
        replay it. Nothing to do without a standby."""
        if self.standby is None:
            return
        async with driver_statement(self.primary) as conn:
            row = await (await conn.execute(_PRIMARY_LSN)).fetchone()
        assert row is not None
        await self.fences.raise_to(tenant_id, person, int(row[0]))

    async def engine_for(self, tenant_id: str, person: str) -> AsyncEngine:
        """The standby's engine when it may answer this person now, else the primary's."""
        standby = self.standby
        if standby is None:
            return self.primary
        now = time.monotonic()
        if self.state in ("down", "unverified"):
            # Tried again off the request's path: a standby that is blackholed costs a
            # connect timeout to the background task, never to a read.
            if now >= self._down_until and (self._refreshing is None or self._refreshing.done()):
                self._refreshing = asyncio.ensure_future(self._read_positions())
            return self.primary
        try:
            fence = await self.fences.get(tenant_id, person)
        except RedisError as exc:
            outages.state(outages.REDIS).failed(exc)
            return self.primary  # who knows whether the person just wrote
        if now - self._read_at > STATUS_TTL_SECONDS:
            try:
                await asyncio.wait_for(self._refresh(), STATUS_WAIT_SECONDS)
            except TimeoutError:
                return self.primary  # the reading goes on; it marks the standby down if it fails
            if self.state in ("down", "unverified"):
                return self.primary
        if self._lag > self.max_lag:
            if not self._unsure:
                self._become("lagging")
            return self.primary
        self._become("usable")
        if fence is not None and self._replayed < fence:
            return self.primary
        return standby

    async def run(
        self, tenant_id: str, person: str, work: Callable[[AsyncEngine], Awaitable[T]]
    ) -> T:
        """`work` on the engine engine_for chooses; if the standby fails it (cannot be reached,
        lacks what the primary has, cancels the statement for replay), on the primary."""
        engine = await self.engine_for(tenant_id, person)
        if engine is self.primary:
            return await work(engine)
        try:
            return await work(engine)
        except Unauthenticated:
            # A person created on the primary a moment ago, not yet replayed.
            return await work(self.primary)
        except HeraldError:
            raise
        except Exception as exc:
            if _unreachable(exc):
                self._went_down(exc)
            elif not _is_database_error(exc):
                raise
            return await work(self.primary)

    async def _refresh(self) -> None:
        """One reading of both positions; concurrent reads share it."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._read_positions())
        await asyncio.shield(self._refreshing)

    async def _read_positions(self) -> None:
        assert self.standby is not None
        try:
            if not self._verified:
                await self._verify()
            standby_status, primary_lsn = await asyncio.gather(
                self._standby_status(), self._primary_lsn()
            )
        except Exception as exc:
            if not _unreachable(exc) and not _is_database_error(exc):
                raise
            self._went_down(exc)
            return
        in_recovery, replayed = standby_status
        if not in_recovery:
            self._verified = False
            self._went_down(RuntimeError("the standby is no longer in recovery (promoted?)"))
            return
        now = time.monotonic()
        # After a quiet spell (no reading for a while) the first reading cannot tell a lag from
        # the spell itself: a lag it finds sends reads to the primary, but only the next reading,
        # close behind it, may call the standby lagging.
        quiet = now - self._read_at > QUIET_SECONDS
        self._replayed, self._read_at = replayed, now
        # Every primary position up to `replayed` is on the standby; what it lacks was written
        # after the last reading whose primary position it has replayed (`_caught_up_at`).
        while self._samples and self._samples[0][1] <= replayed:
            self._caught_up_at = self._samples.popleft()[0]
        if primary_lsn <= replayed:
            self._samples.clear()
            self._caught_up_at = now
        elif len(self._samples) < MAX_SAMPLES and (
            not self._samples or self._samples[-1][1] < primary_lsn
        ):
            self._samples.append((now, primary_lsn))
        self._lag = 0.0 if primary_lsn <= replayed else now - self._caught_up_at
        self._unsure = quiet and self._lag > self.max_lag
        if self.state in ("down", "unverified"):
            self._become("usable")

    async def _verify(self) -> None:
        assert self.standby is not None
        read_url = self.standby.url.render_as_string(hide_password=False)
        if self._primary_id is None:
            async with driver_statement(self.primary) as conn:
                row = await (await conn.execute(_IDENTITY)).fetchone()
            assert row is not None
            self._primary_id = str(row[1])
        async with driver_statement(self.standby) as conn:
            row = await (await conn.execute(_IDENTITY)).fetchone()
        assert row is not None
        try:
            check_identity(read_url, bool(row[0]), str(row[1]), self._primary_id)
        except DatabaseReadUrlInvalid as exc:
            raise _NotAStandby(exc.message) from exc
        self._verified = True

    async def _standby_status(self) -> tuple[bool, int]:
        assert self.standby is not None
        async with driver_statement(self.standby) as conn:
            row = await (await conn.execute(_STANDBY_STATUS)).fetchone()
        assert row is not None
        return bool(row[0]), int(row[1]) if row[1] is not None else -1

    async def _primary_lsn(self) -> int:
        async with driver_statement(self.primary) as conn:
            row = await (await conn.execute(_PRIMARY_LSN)).fetchone()
        assert row is not None
        return int(row[0])

    def _went_down(self, exc: BaseException) -> None:
        self._down_until = time.monotonic() + DOWN_RETRY_SECONDS
        self._read_at = -1e9
        if self.state != "down":
            self.state = "down"
            log.warning(
                "the inbox's read standby (HERALD_DATABASE_READ_URL) is not usable (%s): inbox "
                "reads go to the primary",
                str(exc) if isinstance(exc, _NotAStandby) else type(exc).__name__,
            )

    def _become(self, state: str) -> None:
        if state == self.state:
            return
        previous, self.state = self.state, state
        if state == "lagging":
            log.warning(
                "the inbox's read standby is %.1f s behind the primary (more than "
                "HERALD_READ_MAX_LAG_SECONDS=%s): inbox reads go to the primary",
                self._lag,
                self.max_lag,
            )
        else:
            log.info(
                "the inbox's read standby is usable again (was %s): inbox reads use it", previous
            )

    async def aclose(self) -> None:
        if self._refreshing is not None and not self._refreshing.done():
            self._refreshing.cancel()
        await self.fences.aclose()


class _NotAStandby(psycopg.Error):
    """The read URL answered but is no standby of the primary's cluster (logged where raised)."""


def _is_database_error(exc: BaseException) -> bool:
    """A psycopg or SQLAlchemy database error (a statement cancelled by replay, a function not
    yet replayed): the read is answered by the primary instead."""
    from sqlalchemy.exc import DBAPIError

    return isinstance(exc, (psycopg.Error, DBAPIError))


def _unreachable(exc: BaseException) -> bool:
    """The standby cannot be reached (or its connection broke) — not a statement it refused,
    such as a write on a server in recovery (25006), which outages counts as an outage."""
    if outages.unavailable(exc) != outages.DATABASE:
        return False
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, psycopg.Error) and seen.sqlstate == "25006":
            return False
        seen = seen.__cause__ or seen.__context__
    return True
