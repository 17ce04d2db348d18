"""Engines for Herald's own processes (the host passes its own connection to send()).

HERALD_DATABASE_URL is a libpq URL. Besides the usual `postgresql://user@host:5432/db` it may name
several servers, the way libpq does, so that Herald follows a primary across a failover:

    postgresql://herald@db1:5432,db2:5432/herald?target_session_attrs=read-write
    postgresql://herald@/herald?host=db1,db2&port=5432,5433&target_session_attrs=read-write
    postgresql://herald@/herald?host=db1:5432&host=db2:5433&target_session_attrs=read-write
    host=db1,db2 port=5432,5433 dbname=herald user=herald target_session_attrs=read-write

libpq tries the servers in order and, with `target_session_attrs=read-write`, keeps the first that
accepts writes. SQLAlchemy's URL parser reads neither the first form (several `host:port` pairs in
the address) nor the keyword form, and it refuses `?host=a&host=b&port=1&port=2`, so every URL is
rewritten here into one form that SQLAlchemy, psycopg and libpq all read the same way:

    postgresql+psycopg://herald@/herald?host=db1,db2&port=5432,5433&target_session_attrs=...

Every connection also gets a `connect_timeout` (DEFAULT_CONNECT_TIMEOUT_SECONDS unless the URL
sets one), so a server that is down or unreachable costs a bounded wait per host, never a hang.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

import psycopg
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.util import greenlet_spawn

from herald.db.compiled import Driver

# libpq's connect_timeout, in seconds, for each host tried (libpq's own default is to wait forever).
DEFAULT_CONNECT_TIMEOUT_SECONDS = 5

# The API's engine checks a pooled connection at checkout only once it has been idle this long.
API_PING_AFTER_IDLE_SECONDS = 1.0

_LIBPQ_SCHEMES = ("postgresql", "postgres")
_SQLALCHEMY_DRIVER = "postgresql+psycopg"


@dataclass(frozen=True)
class DatabaseUrl:
    """A PostgreSQL URL taken apart: userinfo (still percent-encoded, as written), the servers in
    the order libpq tries them, the database and every other parameter in its original order."""

    scheme: str
    userinfo: str  # "user", "user:password" or "" (percent-encoded)
    hosts: tuple[tuple[str, int | None], ...]  # (host or socket directory, port)
    database: str  # decoded
    query: tuple[tuple[str, str], ...]  # decoded; never host or port

    def param(self, name: str) -> str | None:
        values = [value for key, value in self.query if key == name]
        return values[-1] if values else None

    def with_param(self, name: str, value: str) -> DatabaseUrl:
        kept = tuple((k, v) for k, v in self.query if k != name)
        return replace(self, query=(*kept, (name, value)))

    def render(self, scheme: str | None = None) -> str:
        """The canonical URL: one TCP host in the address; several (or a socket directory) as
        `?host=a,b&port=p,q`, which SQLAlchemy's psycopg dialect and libpq both understand."""
        prefix = f"{scheme or self.scheme}://"
        if self.userinfo:
            prefix += f"{self.userinfo}@"
        path = "/" + quote(self.database, safe="") if self.database else "/"
        params = list(self.query)
        address = ""
        if len(self.hosts) == 1 and self.hosts[0][0] and not _is_socket_dir(self.hosts[0][0]):
            host, port = self.hosts[0]
            address = f"[{host}]" if ":" in host else host
            if port is not None:
                address += f":{port}"
        elif self.hosts:
            multi = []
            if any(host for host, _ in self.hosts):
                multi.append(("host", ",".join(host for host, _ in self.hosts)))
            if any(port is not None for _, port in self.hosts):
                multi.append(("port", ",".join(str(port or "") for _, port in self.hosts)))
            params = multi + params
        query = urlencode(params, quote_via=quote, safe="") if params else ""
        return prefix + address + path + (f"?{query}" if query else "")


def parse_database_url(url: str) -> DatabaseUrl:
    """Read a libpq URL (one host or several, in the address or as ?host=) or a keyword/value
    connection string (`host=a,b port=… dbname=…`). Raises ValueError on what libpq would refuse
    or read differently (a port list that does not match the hosts, a port that is no number)."""
    text = url.strip()
    if "://" not in text:
        return _parse_keywords(text)
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    address_hosts = _split_address(hostlist)
    query: list[tuple[str, str]] = []
    host_values: list[str] = []
    port_values: list[str] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "host":
            host_values.append(value)
        elif key == "port":
            port_values.append(value)
        else:
            query.append((key, value))
    if host_values:  # as in libpq, parameters in the query win over the address
        hosts = _hosts_from_params(host_values, port_values)
    elif port_values:
        ports = _split_list(port_values)
        hosts = _apply_ports(tuple(host for host, _ in address_hosts) or ("",), ports)
    else:
        hosts = address_hosts
    database = unquote(parts.path[1:]) if parts.path.startswith("/") else unquote(parts.path)
    return DatabaseUrl(scheme, userinfo, hosts, database, tuple(query))


def sqlalchemy_url(url: str) -> str:
    """The URL for SQLAlchemy's psycopg 3 dialect (create_engine, Alembic), with connect_timeout."""
    return _with_timeout(parse_database_url(url)).render(_sqlalchemy_scheme(url))


def libpq_url(url: str) -> str:
    """The same URL for psycopg.connect() (LISTEN connections, admin commands): libpq's scheme,
    several hosts as `host=a,b&port=p,q`, and connect_timeout."""
    return _with_timeout(parse_database_url(url)).render("postgresql")


def with_database(url: str, database: str) -> str:
    """`url` pointing at another database on the same server(s), in libpq form."""
    return replace(parse_database_url(url), database=database).render("postgresql")


def named(url: str, application_name: str | None) -> dict[str, Any]:
    """The connection argument that names a Herald process's connections (`herald-worker`, …)
    in `pg_stat_activity` and the server's log lines — none when the operator named them
    already, by `application_name` in the URL or by PGAPPNAME."""
    if (
        application_name is None
        or parse_database_url(url).param("application_name") is not None
        or os.environ.get("PGAPPNAME")
    ):
        return {}
    return {"application_name": application_name}


def make_async_engine(
    url: str,
    *,
    pool_size: int = 10,
    ping_after_idle: float | None = None,
    application_name: str | None = None,
    prepare: bool = True,
) -> AsyncEngine:
    """A pooled engine of at most 2 × pool_size connections (HERALD_DB_POOL_SIZE), kept open.

    Every connection is checked at checkout (`SELECT 1`), so one left over from before a failover
    or a restart is noticed there and replaced by a new one, which libpq makes to whichever host
    is now the primary. With `ping_after_idle`, only a connection that has sat in the pool that
    many seconds is checked: one in steady use skips the round trip (a fifth of an inbox read's),
    and if the server went away meanwhile its next statement fails, which the API answers 503
    DATABASE_UNAVAILABLE and after which SQLAlchemy replaces every connection of the pool.

    `application_name` names the process's connections in `pg_stat_activity` and the server's
    log lines (`herald-api`, `herald-worker`, …), so an operator can tell whose backend holds a
    lock or burns a core; an `application_name` in the URL, or PGAPPNAME, wins over it.

    `prepare=False`: psycopg never prepares a statement (it does after five runs otherwise), for
    a URL through a transaction pooler, where the next transaction may run on a server
    connection that lacks the statement or holds another client's (herald.db.pooler).
    """
    connect_args = named(url, application_name)
    if not prepare:
        connect_args["prepare_threshold"] = None
    engine = create_async_engine(
        sqlalchemy_url(url),
        connect_args=connect_args,
        # The bound is 2 × pool_size, as pool_size + as many overflow connections would be, but a
        # connection once opened is kept: overflow ones were closed on return, so a process
        # busier than pool_size opened (and PostgreSQL forked) a connection for some requests.
        # The pool still opens connections only when they are needed.
        pool_size=2 * pool_size,
        max_overflow=0,
        pool_pre_ping=ping_after_idle is None,
    )
    if ping_after_idle is not None:
        _ping_when_idle(engine.sync_engine, ping_after_idle)
    return engine


def _ping_when_idle(engine: Engine, seconds: float) -> None:
    @event.listens_for(engine, "checkin")
    def checked_in(_dbapi_connection: Any, record: Any) -> None:
        record.info["checked_in_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("checked_in_at")
        if since is None or time.monotonic() - since < seconds:
            return  # new, or used a moment ago
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            # The pool discards this connection and checks out another (SQLAlchemy's
            # "pessimistic disconnect handling" by a checkout event).
            raise DisconnectionError() from exc


@asynccontextmanager
async def driver_transaction(engine: AsyncEngine) -> AsyncIterator[Driver]:
    """One transaction on a pooled connection's own psycopg connection, with no SQLAlchemy
    Connection around it: for the inbox's routes, whose statements already run on psycopg's
    cursor (db.compiled). SQLAlchemy's Connection, its begin and its commit cost ~200 µs of
    CPU a request on top of the pool's checkout (a quarter of a list request's own work);
    the pool, its bound and its checkout ping (`ping_after_idle`) are the same ones.

    psycopg begins the transaction with the first statement; the block's end commits it; any
    error rolls it back, and a connection that broke (or whose rollback failed) is invalidated
    with every connection opened before it, as SQLAlchemy does on a disconnect, before the
    error goes on to the route."""
    fairy = await engine.raw_connection()
    driver: Driver = fairy.driver_connection  # type: ignore[assignment]
    invalidated = False
    try:
        yield driver
        await driver.commit()
    except BaseException as exc:
        if not await _rolled_back(driver):
            # What SQLAlchemy's own Connection does on a disconnect: this connection is
            # discarded, and every other one opened before now is replaced at its next checkout
            # (whatever broke this one, a restart or a failover, most likely broke them too).
            await greenlet_spawn(engine.sync_engine.pool._invalidate, fairy, exc)
            invalidated = True
        raise
    finally:
        if not invalidated:
            await greenlet_spawn(fairy.close)


@asynccontextmanager
async def driver_statement(engine: AsyncEngine) -> AsyncIterator[Driver]:
    """A pooled connection's own psycopg connection in autocommit, for a block that sends one
    statement: the statement is its own transaction, with no BEGIN or COMMIT round trip
    (herald.centre.functions). The connection goes back to the pool as it came (not in
    autocommit); one that broke is invalidated as driver_transaction does."""
    fairy = await engine.raw_connection()
    driver: Driver = fairy.driver_connection  # type: ignore[assignment]
    invalidated = False
    try:
        await driver.set_autocommit(True)
        yield driver
    except BaseException as exc:
        if driver.broken or driver.closed or not await _rolled_back(driver):
            await greenlet_spawn(engine.sync_engine.pool._invalidate, fairy, exc)
            invalidated = True
        raise
    finally:
        if not invalidated:
            try:
                await driver.set_autocommit(False)
            except psycopg.Error as exc:
                await greenlet_spawn(engine.sync_engine.pool._invalidate, fairy, exc)
                invalidated = True
        if not invalidated:
            await greenlet_spawn(fairy.close)


async def _rolled_back(driver: Driver) -> bool:
    if driver.broken or driver.closed:
        return False
    try:
        await driver.rollback()
    except psycopg.Error:
        return False
    return True


def make_sync_engine(url: str, *, pool_size: int = 5) -> Engine:
    return create_engine(sqlalchemy_url(url), pool_size=pool_size, pool_pre_ping=True)


def _sqlalchemy_scheme(url: str) -> str:
    scheme = url.strip().partition("://")[0].lower() if "://" in url else "postgresql"
    if scheme in (*_LIBPQ_SCHEMES, "postgresql+psycopg2"):
        return _SQLALCHEMY_DRIVER
    return scheme


def _with_timeout(parsed: DatabaseUrl) -> DatabaseUrl:
    if parsed.param("connect_timeout") is not None:
        return parsed
    return parsed.with_param("connect_timeout", str(DEFAULT_CONNECT_TIMEOUT_SECONDS))


def _is_socket_dir(host: str) -> bool:
    return host.startswith("/") or host.startswith("@")


def _split_list(values: list[str]) -> list[str]:
    return [item.strip() for value in values for item in value.split(",")]


def _port(text: str) -> int | None:
    if text == "":
        return None
    if not text.isdigit():
        raise ValueError(f"the database URL has a port that is not a number: {text!r}")
    return int(text)


def _apply_ports(hosts: tuple[str, ...], ports: list[str]) -> tuple[tuple[str, int | None], ...]:
    """libpq's rule: one port for every host, or exactly one port per host."""
    if len(ports) == 1:
        return tuple((host, _port(ports[0])) for host in hosts)
    if len(ports) != len(hosts):
        raise ValueError(
            f"the database URL names {len(hosts)} host(s) but {len(ports)} ports; "
            "give one port for all or one per host"
        )
    return tuple((host, _port(port)) for host, port in zip(hosts, ports, strict=True))


def _split_address(hostlist: str) -> tuple[tuple[str, int | None], ...]:
    """`h1:5432,[::1]:5433,h3` from a URL's address into (host, port) pairs."""
    if not hostlist:
        return ()
    hosts: list[tuple[str, int | None]] = []
    for item in hostlist.split(","):
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else ""
        else:
            host, _, port = item.partition(":")
        hosts.append((unquote(host), _port(port)))
    return tuple(hosts)


def _hosts_from_params(
    host_values: list[str], port_values: list[str]
) -> tuple[tuple[str, int | None], ...]:
    """`host=a,b&port=p,q`, `host=a&host=b&port=p&port=q` or `host=a:p&host=b:q`."""
    tokens = _split_list(host_values)
    if port_values:
        return _apply_ports(tuple(tokens), _split_list(port_values))
    hosts: list[tuple[str, int | None]] = []
    for token in tokens:
        # `name:port` or `[v6]:port`; a bare IPv6 address (two colons or more) has no port.
        if token.startswith("["):
            host, _, rest = token[1:].partition("]")
            hosts.append((host, _port(rest[1:]) if rest.startswith(":") else None))
        elif token.count(":") == 1 and not _is_socket_dir(token):
            host, _, port = token.partition(":")
            hosts.append((host, _port(port)))
        else:
            hosts.append((token, None))
    return tuple(hosts)


def _parse_keywords(text: str) -> DatabaseUrl:
    """A keyword/value connection string, read by libpq itself."""
    from psycopg.conninfo import conninfo_to_dict

    params = {key: str(value) for key, value in conninfo_to_dict(text).items() if value is not None}
    user = params.pop("user", "")
    password = params.pop("password", "")
    userinfo = quote(user, safe="")
    if password:
        userinfo += ":" + quote(password, safe="")
    host = params.pop("host", "")
    port = params.pop("port", "")
    database = params.pop("dbname", "")
    hosts: tuple[tuple[str, int | None], ...] = ()
    if host:
        hosts = _hosts_from_params([host], [port] if port else [])
    elif port:
        hosts = _apply_ports(("",), _split_list([port]))
    return DatabaseUrl("postgresql", userinfo, hosts, database, tuple(params.items()))
