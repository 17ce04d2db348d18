"""Where Herald's own processes find their database.

Every command resolves its URL here, so `herald migrate`, `herald api`, `herald worker` and
`herald dev` agree: HERALD_DATABASE_URL when it is set, otherwise database `herald` on the
embedded PostgreSQL under HERALD_DATA_DIR (started, or attached to, on the way).

`herald api`, `herald worker` and `herald scheduler` go through plan_connections, which also
tells whether HERALD_DATABASE_URL is a transaction pooler (herald.db.pooler) and where what
needs a session connects (HERALD_DATABASE_SESSION_URL).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from herald import outages
from herald.config import Settings
from herald.db import embedded, pooler, replica
from herald.db.engine import API_PING_AFTER_IDLE_SECONDS, make_async_engine
from herald.db.replica import ReadRouting
from herald.errors import DatabaseSessionRequired, DatabaseSessionUrlInvalid

log = logging.getLogger(__name__)

EMBEDDED_DATABASE = "herald"
# The longest wait between two start-up probes of a database that cannot be reached yet.
PROBE_RETRY_CAP_SECONDS = 5.0


def resolve_database_url(settings: Settings) -> str:
    """The database URL this process uses; starts the embedded server when none is configured."""
    if settings.database_url:
        return settings.database_url
    # The server stops when the last process attached to it exits.
    admin_url = embedded.start(settings.data_dir)
    return embedded.ensure_database(admin_url, EMBEDDED_DATABASE)


def is_embedded(settings: Settings) -> bool:
    return not settings.database_url


@dataclass(frozen=True)
class Connections:
    """Where a process's connections go: `url` for its engine (pooled or direct), `session_url`
    for what needs a session (LISTEN, presence locks), and whether `url` is pooled (its engine
    then prepares no statement)."""

    url: str
    session_url: str
    pooled: bool


# What needs a session, per process (herald.db.pooler names them all).
API_REALTIME = "the realtime hub's LISTEN (without HERALD_REDIS_URL)"
WORKER_SESSIONS = ("the worker's LISTEN wake-up", "the worker's presence locks")


def session_needs(settings: Settings, process: str) -> tuple[str, ...]:
    """What `process` (api, worker, scheduler) would do on a session of its own."""
    if process == "api":
        return () if settings.redis_url else (API_REALTIME,)
    if process == "worker":
        return WORKER_SESSIONS
    return ()  # the scheduler's lease is a row with an expiry


async def plan_connections(settings: Settings, process: str) -> Connections:
    """Resolve the URLs of `process` and check them, once at start-up: behind a transaction
    pooler it needs HERALD_DATABASE_SESSION_URL for what needs a session, and that URL must reach
    the same database without one. Raises DatabaseSessionRequired / DatabaseSessionUrlInvalid."""
    url = resolve_database_url(settings)
    if is_embedded(settings):
        return Connections(url, url, pooled=False)  # a PostgreSQL of its own, on a socket
    main = await _probe(url)
    session = settings.database_session_url
    if session:
        direct = await _probe(session)
        if direct.shares_sessions:
            raise DatabaseSessionUrlInvalid(
                f"HERALD_DATABASE_SESSION_URL ({pooler.masked(session)}) shares server "
                "connections between clients (a transaction pooler such as PgBouncer in "
                "transaction mode): point it at PostgreSQL itself"
            )
        if direct.server != main.server:
            raise DatabaseSessionUrlInvalid(
                f"HERALD_DATABASE_SESSION_URL ({pooler.masked(session)}) reaches database "
                f"{direct.server[1]!r} of server {direct.server[0]}, HERALD_DATABASE_URL "
                f"({pooler.masked(url)}) database {main.server[1]!r} of server {main.server[0]}: "
                "point both at the same database"
            )
        return Connections(url, session, pooled=main.shares_sessions)
    needs = session_needs(settings, process)
    if main.shares_sessions and needs:
        raise DatabaseSessionRequired(
            f"HERALD_DATABASE_URL ({pooler.masked(url)}) shares server connections between "
            f"clients (a transaction pooler such as PgBouncer in transaction mode), and "
            f"herald {process} needs a session for {' and '.join(needs)}: set "
            "HERALD_DATABASE_SESSION_URL to a direct PostgreSQL URL of the same database"
        )
    return Connections(url, url, pooled=main.shares_sessions)


async def _probe(url: str) -> pooler.Probe:
    """pooler.probe, retried with backoff while the database cannot be reached: a process started
    before its database waits for it (as its loops would) instead of exiting, and starts only
    once it knows what the URL is."""
    backoff = outages.Backoff(cap=PROBE_RETRY_CAP_SECONDS)
    while True:
        try:
            return await pooler.probe(url)
        except Exception as exc:
            if outages.unavailable(exc) is None:
                raise
            outages.state(outages.DATABASE).failed(exc)
            await asyncio.sleep(backoff.next_delay())


async def plan_reads(
    settings: Settings, connections: Connections, engine: AsyncEngine
) -> ReadRouting:
    """The API's read routing: the primary alone, or with HERALD_DATABASE_READ_URL's standby,
    checked first (herald.db.replica.verify: refuses another cluster or a primary; a standby
    that cannot be reached yet is checked when it answers, and reads use the primary meanwhile).
    Through a pooler or not, the standby's engine prepares no statement."""
    read_url = settings.database_read_url
    if not read_url:
        return ReadRouting(engine)
    primary_id = await replica.system_identifier(connections.url)
    verified = await replica.verify(connections.url, read_url, primary_id)
    standby = make_async_engine(
        read_url,
        pool_size=settings.db_pool_size,
        ping_after_idle=API_PING_AFTER_IDLE_SECONDS,
        application_name="herald-api-read",
        prepare=False,
    )
    if not settings.redis_url:
        log.info(
            "inbox reads use HERALD_DATABASE_READ_URL; without HERALD_REDIS_URL a person's "
            "read-your-writes fence lives in this API process only: run one API process, or set "
            "HERALD_REDIS_URL"
        )
    return ReadRouting(
        engine,
        standby,
        max_lag_seconds=settings.read_max_lag_seconds,
        redis_url=settings.redis_url,
        primary_id=primary_id,
        verified=verified,
    )
