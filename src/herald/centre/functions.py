"""The inbox's four statements as server-side functions: one round trip a request, no BEGIN or
COMMIT.

A plain inbox request (herald.centre.fast) was four round trips on one pooled connection: BEGIN,
the liveness check that enters the tenant (auth.queries' actor lookup), the route's statement
(herald.centre.queries), COMMIT. On this machine each round trip costs the API process and the
PostgreSQL backend a wake-up, a protocol exchange and psycopg's and asyncio's machinery on the
client side — more than the statements themselves: bench/round_trips.py measured 291-301 µs of
client CPU and 320-330 µs of backend CPU for the list's transaction, against 80-139 µs and
200-323 µs for the same two statements run by one PL/pgSQL function called once in autocommit.

Each function here is the same two statements, their SQL text compiled from the very statement
objects the FastAPI routes run (so the two ways cannot drift apart), in a body that:
  1. runs the actor lookup as the connecting user, whose set_config columns switch the rest of
     the statement's own transaction to herald_app under the claims' tenant, with the inbox's
     planner settings (tenancy.INBOX_PLANNER_SETTINGS) — exactly as it does in the four-trip
     transaction; no row (an unknown or deleted person) returns no row at all;
  2. returns one actor row (person id, role id, scope kind, holds: the person was found), then
     the route's own rows —
     the route's statement running as herald_app under row-level security, with the person and
     role the lookup found.
The row-level security, the access predicates (queries._visible) and the plans are the route
statements' own (tests/integration/test_plans_inbox.py holds the plans; the function's cached
plans are the same generic ones). The functions are created by the process that first needs them
(`ensure`), named by a hash of their body so that processes of two releases never replace each
other's, and executable by their owner only.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import weakref
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.auth import queries as auth_queries
from herald.auth.service import UNKNOWN_PERSON, ActorClaims
from herald.centre import queries
from herald.db.compiled import Compiled
from herald.db.engine import driver_statement, driver_transaction
from herald.errors import Unauthenticated

log = logging.getLogger(__name__)

# The lookup's parameters, and each route's own, as the function's arguments (name → SQL type).
_LOOKUP_ARGS = (("tenant_id", "text"), ("external_id", "text"), ("role_code", "text"))
# The route statements' actor parameters, filled from the lookup's row.
_FROM_ACTOR = {"person_id": "herald_actor.id", "role_id": "herald_actor.role_id"}
_ACTOR_COLUMNS = (
    ("actor_person", "bigint"),
    ("actor_role", "bigint"),
    ("actor_scope", "text"),
    ("actor_holds", "boolean"),
)
# A bind parameter as the psycopg dialect writes it; its cast (`::BIGINT`) stays after it.
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


@dataclass(frozen=True)
class RouteFunction:
    """One route statement as a function: `args` its own parameters (beyond the lookup's),
    `columns` the SQL types of its rows; `rowcount`: the statement returns no rows, and the
    function returns how many it changed."""

    route: str
    statement: Compiled
    args: tuple[tuple[str, str], ...]
    columns: tuple[str, ...]
    rowcount: bool = False

    @functools.cached_property
    def body(self) -> str:
        lookup = _substituted(auth_queries._actor_lookup(True), {})
        route = _substituted(self.statement, _FROM_ACTOR)
        nulls = ", ".join(f"NULL::{t}" for t in self.columns)
        actor_row = (
            "SELECT herald_actor.id, herald_actor.role_id, herald_actor.scope_kind, "
            f"herald_actor.holds, {nulls}"
        )
        no_actor = ", ".join(f"NULL::{t}" for _, t in _ACTOR_COLUMNS)
        if self.rowcount:
            run = (
                f"{route};\nGET DIAGNOSTICS herald_changed = ROW_COUNT;\n"
                f"RETURN QUERY SELECT {no_actor}, herald_changed;"
            )
        elif route.lstrip().upper().startswith("SELECT"):
            # The route's rows in the statement's own order: a sub-select with a LIMIT is never
            # flattened into the outer one, which scans it as it comes.
            run = f"RETURN QUERY SELECT {no_actor}, herald_rows.* FROM ({route}) AS herald_rows;"
        else:
            # A write's RETURNING rows, through a data-modifying WITH (it cannot be a sub-select).
            run = (
                f"RETURN QUERY WITH herald_rows AS ({route}) "
                f"SELECT {no_actor}, herald_rows.* FROM herald_rows;"
            )
        return (
            "DECLARE herald_actor record; herald_changed bigint;\nBEGIN\n"
            f"SELECT * INTO herald_actor FROM ({lookup}) AS herald_lookup;\n"
            "IF NOT FOUND THEN RETURN; END IF;\n"
            f"RETURN QUERY {actor_row};\n{run}\nEND"
        )

    @functools.cached_property
    def name(self) -> str:
        digest = hashlib.sha256(self.definition_template.encode()).hexdigest()[:16]
        return f"herald_centre_{self.route}_{digest}"

    @property
    def arguments(self) -> list[tuple[str, str]]:
        return [*_LOOKUP_ARGS, *self.args]

    @functools.cached_property
    def definition_template(self) -> str:
        args = ", ".join(f"herald_{name} {sql_type}" for name, sql_type in self.arguments)
        out = ", ".join(
            [f"{name} {t}" for name, t in _ACTOR_COLUMNS]
            + [f"route_{n} {t}" for n, t in enumerate(self.columns)]
        )
        return (
            f"({args}) RETURNS TABLE ({out}) LANGUAGE plpgsql VOLATILE AS $herald_fn$\n"
            f"{self.body}\n$herald_fn$"
        )

    def create_sql(self) -> list[str]:
        signature = ", ".join(sql_type for _, sql_type in self.arguments)
        return [
            f"CREATE FUNCTION {self.name}{self.definition_template}",
            f"REVOKE ALL ON FUNCTION {self.name}({signature}) FROM PUBLIC",
        ]

    @functools.cached_property
    def call_sql(self) -> str:
        placeholders = ", ".join(f"%({name})s" for name, _ in self.arguments)
        return f"SELECT * FROM {self.name}({placeholders})"


def _substituted(compiled: Compiled, from_actor: dict[str, str]) -> str:
    """The statement's SQL with each bind parameter replaced by the function's argument of that
    name (or the actor row's column), and the statement's own constants written in."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in from_actor:
            return from_actor[name]
        if name in compiled.defaults and compiled.defaults[name] is not None:
            value = compiled.defaults[name]
            if type(value) is not int:
                raise ValueError(f"constant {name}={value!r} is not an integer")
            return str(value)
        return f"herald_{name}"

    return _PLACEHOLDER.sub(replace, compiled.sql).replace("%%", "%")


LIST = {
    (keyset, unread): RouteFunction(
        route=f"list{'_after' if keyset else ''}{'_unread' if unread else ''}",
        statement=queries._list_page(keyset, unread),
        args=(("limit", "integer"),)
        + ((("after_at", "timestamptz"), ("after_id", "bigint")) if keyset else ()),
        columns=("bigint", "timestamptz", "text"),
    )
    for keyset in (False, True)
    for unread in (False, True)
}
UNREAD_COUNT = RouteFunction("unread_count", queries._unread_count(), (), ("bigint",))
MARK_READ = RouteFunction(
    "mark_read", queries._mark_read(), (("public_id", "uuid"),), ("uuid", "timestamptz")
)
MARK_ALL_READ = RouteFunction(
    "mark_all_read", queries._mark_all_read(), (), ("bigint",), rowcount=True
)
ALL = (*LIST.values(), UNREAD_COUNT, MARK_READ, MARK_ALL_READ)

# The engines (databases) this process has seen the functions in, or created them in; and why
# creating them failed here, if it did (the connecting user may not create functions): then the
# routes keep their four-trip transaction, and the process says so once.
_ready: weakref.WeakSet[Engine] = weakref.WeakSet()
_unavailable: list[str] = []


async def ensure(engine: AsyncEngine) -> bool:
    """Every function exists in the engine's database (created now if not); False when they
    cannot be created there."""
    if engine.sync_engine in _ready:
        return True
    if _unavailable:
        return False
    try:
        async with driver_transaction(engine) as conn:
            # One creator at a time: two processes starting together would otherwise race to
            # insert the same function.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('herald_centre_functions'))")
            cursor = await conn.execute(
                "SELECT proname FROM pg_proc WHERE proname = ANY(%s) "
                "AND pronamespace = current_schema()::regnamespace",
                ([f.name for f in ALL],),
            )
            existing = {row[0] for row in await cursor.fetchall()}
            for function in ALL:
                if function.name not in existing:
                    for sql in function.create_sql():
                        await conn.execute(sql.encode())
    except psycopg.errors.InsufficientPrivilege as exc:
        _unavailable.append(type(exc).__name__)
        log.warning(
            "the inbox's one-statement functions cannot be created in this database (%s); its "
            "routes send four round trips a request instead",
            type(exc).__name__,
        )
        return False
    _ready.add(engine.sync_engine)
    return True


async def call(
    engine: AsyncEngine,
    function: RouteFunction,
    claims: ActorClaims,
    params: dict[str, Any],
    *,
    create: bool = True,
) -> list[tuple[Any, ...]]:
    """The route's rows of `function` for these claims, in one round trip. An unknown or deleted
    person (no actor row) is refused as auth.live_actor refuses one. `create=False`: on a read
    standby, which cannot create a missing function (it comes by replication), the
    UndefinedFunction error goes to the caller."""
    values = {
        "tenant_id": claims.tenant_id,
        "external_id": claims.subject,
        "role_code": claims.role_code,
        **params,
    }
    try:
        rows = await _run(engine, function, values)
    except psycopg.errors.UndefinedFunction:
        # The database was replaced under this process (restored, or re-created from its
        # migrations): create the functions again, once.
        if not create:
            raise
        _ready.discard(engine.sync_engine)
        if not await ensure(engine):
            raise
        rows = await _run(engine, function, values)
    if not rows:
        raise Unauthenticated(UNKNOWN_PERSON)
    # The first row is the actor's (person, role, scope, holds); the route's own rows follow.
    return [row[len(_ACTOR_COLUMNS) :] for row in rows[1:]]


async def _run(
    engine: AsyncEngine, function: RouteFunction, values: dict[str, Any]
) -> list[tuple[Any, ...]]:
    async with driver_statement(engine) as conn:
        cursor = await conn.execute(function.call_sql, values)
        return await cursor.fetchall()
