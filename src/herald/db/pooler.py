"""Whether a database URL keeps a session: PostgreSQL itself, or a pooler such as PgBouncer in
transaction mode that lends one server connection to many clients, a transaction at a time.

Most of Herald runs in transactions and keeps no state between them: the tenant, the role and
the planner settings are all `set_config(…, true)` (SET LOCAL, herald.db.tenancy), advisory
locks are transaction-scoped, and through a pooler no statement is prepared (`prepare=False` on
the engine), so nothing of one transaction is left on a server connection for the next client.
Three things need a session of their own, on a connection that stays with one backend:

- the API's realtime hub: LISTEN herald_realtime (without HERALD_REDIS_URL);
- the worker's wake-up: LISTEN for new events and due deliveries;
- the worker's presence lock: a session-level advisory lock that lives as long as the worker.

(The scheduler's lease is a row with an expiry, herald.scheduling, and needs no session.)

`probe` tells the two apart by what the server says, not by the URL's port or name:

1. On one connection, `pg_backend_pid()` is compared with the backend pid the server announced
   when the connection was made (libpq's BackendKeyData). Equal, twice: the connection is a
   session with that backend — PostgreSQL itself, or a proxy that passes one session through.
   A pooler answers the start-up itself and announces a key of its own.
2. Otherwise a second connection is opened, and the two ask `pg_backend_pid()` in turn, each
   question its own transaction. If one connection ever sees its backend change, or both see
   the same backend, server connections are shared between clients: LISTEN, a session lock or a
   session SET would land on a backend another client uses next. A pooler in session mode keeps
   each client on its own backend and passes (it keeps sessions).

Each probe also reads the server's system identifier and the database name, so a session URL
that reaches another server or database than HERALD_DATABASE_URL is refused rather than
listened on in vain.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import psycopg

from herald.db.engine import libpq_url, named, parse_database_url

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

# How many turns each of the two connections takes in step 2. A transaction pooler reuses the
# server connection just released (PgBouncer's default, server_round_robin = 0), so the first
# turn shows it; more turns catch a pool that is busy with other clients meanwhile.
TURNS = 4

_PID = "SELECT pg_backend_pid()"
_WHERE = "SELECT (SELECT system_identifier FROM pg_control_system())::text, current_database()"


@dataclass(frozen=True)
class Probe:
    """What one URL reaches: `shares_sessions` True behind a transaction (or statement)
    pooler; `server` is (system identifier, database), the same for every URL of one database."""

    shares_sessions: bool
    server: tuple[str, str]


async def probe(url: str) -> Probe:
    """Connect to `url` (one connection, or two behind something that is not PostgreSQL itself)
    and tell whether it keeps sessions. Never prepares a statement."""
    async with await _connect(url) as first:
        server = await _where(first)
        announced = first.info.backend_pid
        if await _pid(first) == announced and await _pid(first) == announced:
            return Probe(False, server)
        async with await _connect(url) as second:
            seen_first: set[int] = set()
            seen_second: set[int] = set()
            for _ in range(TURNS):
                seen_first.add(await _pid(first))
                seen_second.add(await _pid(second))
                if len(seen_first) > 1 or len(seen_second) > 1 or seen_first & seen_second:
                    return Probe(True, server)
        return Probe(False, server)


def masked(url: str) -> str:
    """`url` with its password (in the userinfo or as `password=`) replaced by ***, for a message."""
    try:
        parsed = parse_database_url(url)
    except ValueError:
        return "<a database URL that cannot be read>"
    user, colon, _password = parsed.userinfo.partition(":")
    query = tuple((k, "***" if k == "password" else v) for k, v in parsed.query)
    return replace(parsed, userinfo=user + (":***" if colon else ""), query=query).render(
        "postgresql"
    )


async def _connect(url: str) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(
        libpq_url(url), autocommit=True, prepare_threshold=None, **named(url, "herald-probe")
    )


async def _pid(conn: psycopg.AsyncConnection[Any]) -> int:
    row = await (await conn.execute(_PID)).fetchone()
    assert row is not None
    return int(row[0])


async def _where(conn: psycopg.AsyncConnection[Any]) -> tuple[str, str]:
    row = await (await conn.execute(_WHERE)).fetchone()
    assert row is not None
    return (str(row[0]), str(row[1]))


def session_url(session: str | None, engine: AsyncEngine) -> str:
    """The libpq URL for a connection that needs a session (LISTEN, a session lock):
    HERALD_DATABASE_SESSION_URL when set, else the engine's own."""
    return libpq_url(session or engine.url.render_as_string(hide_password=False))
