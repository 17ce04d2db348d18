"""What one inbox list transaction costs the client process and the PostgreSQL backend, sent in
nine ways: the FastAPI route's own, and eight ways of sending the same statements in fewer
messages, the last of them what the fast routes send (herald.centre.functions).

    .venv/bin/python bench/round_trips.py [--transactions 3000] [--rounds 2]

The transaction is the list route's (GET /v1/me/notifications): BEGIN, the liveness check that
enters the tenant (auth.queries's actor lookup: SET LOCAL ROLE herald_app and the tenant, as
set_config calls in its select list), the first page of the list (centre.queries, 21 rows of
JSON written by PostgreSQL), COMMIT. One psycopg connection on uvloop, the demo school with 30
in-app rows per person; every way runs `--transactions` transactions after a warm-up, in
`--rounds` rounds in turn, and prints the client's CPU (this process), the backend's CPU (from
/proc, the same machine) and the wall time, each per transaction:

  - route: the FastAPI route's transaction, four round trips on psycopg's prepared statements;
  - pipeline, one sync: psycopg's pipeline mode, everything in one round trip (the route could
    not do this: the list binds the person and role ids the liveness check returns);
  - pipeline, two syncs: BEGIN + liveness, then list + COMMIT;
  - simple, one message: one simple-protocol message with the values inlined (planned each time);
  - EXECUTE, one message: the statements PREPAREd once on the connection, then one message of
    BEGIN; EXECUTE …; EXECUTE …; COMMIT with the values inlined (the same list-binds caveat);
  - EXECUTE, two messages: BEGIN + EXECUTE liveness, then EXECUTE list + COMMIT;
  - function: the list's function of herald.centre.functions, one statement in autocommit (no
    BEGIN or COMMIT), what the fast routes send since 2026-12-04;
  - the two one-message ways again with the list rewritten so that it could follow the liveness
    check unseen: the check also sets herald.person_id and herald.role_id (set_config, local),
    and the list reads them (`NULLIF(current_setting(…), '')::BIGINT`) instead of binding them;
    before measuring, the bench checks that this list returns the route's page for every person.

The figures decide where a cut of the API's cost can come from; docs/performance.md (measuring
pass) reads them. Uses HERALD_BENCH_DATABASE_URL or --database-url (the bench creates and drops
its own database), else the embedded PostgreSQL under .herald/bench. Never part of the test run.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import psycopg
import uvloop
from psycopg import sql
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect
from sqlalchemy.sql.compiler import SQLCompiler

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from bench import _harness  # noqa: E402
from bench import api as B  # noqa: E402
from herald.auth import queries as auth_queries  # noqa: E402
from herald.auth.service import ActorClaims, live_actor  # noqa: E402
from herald.centre import functions  # noqa: E402
from herald.centre import queries as centre_queries  # noqa: E402
from herald.db import migrate  # noqa: E402
from herald.db.compiled import Compiled  # noqa: E402
from herald.db.engine import libpq_url  # noqa: E402

Conn = psycopg.AsyncConnection[Any]
# The same statements compiled with $1… placeholders, for PREPARE.
NUMBERED = psycopg_dialect.dialect(paramstyle="numeric_dollar")  # type: ignore[no-untyped-call]


def backend_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Prepared:
    """A Compiled statement PREPAREd by name on one connection, run with EXECUTE."""

    def __init__(self, name: str, compiled: Compiled) -> None:
        numbered = cast(SQLCompiler, compiled.statement.compile(dialect=NUMBERED))
        self.name = name
        self.sql = str(numbered)
        self.order = list(numbered.positiontup or [])
        self.defaults = dict(numbered.params)

    async def prepare(self, conn: Conn) -> None:
        await conn.execute(f"PREPARE {self.name} AS {self.sql}".replace("%", "%%"))

    def execute(self, conn: Conn, params: dict[str, Any]) -> str:
        values = self.defaults | params
        literals = ",".join(sql.Literal(values[key]).as_string(conn) for key in self.order)
        return f"EXECUTE {self.name}({literals})"


# The person and role ids as the rewritten list reads them: set by the rewritten liveness check.
FROM_GUC = "NULLIF(current_setting('herald.{0}', true), '')::BIGINT"
IDS = ("person_id", "role_id")


def ids_from_gucs(prepared: Prepared) -> Prepared:
    """The list with its person and role parameters replaced by FROM_GUC, renumbered."""
    text = prepared.sql
    for key in IDS:
        k = prepared.order.index(key) + 1
        text = re.sub(rf"\${k}(::\w+)?(?!\d)", FROM_GUC.format(key), text)
    kept = [key for key in prepared.order if key not in IDS]
    number = {prepared.order.index(key) + 1: n + 1 for n, key in enumerate(kept)}
    prepared.sql = re.sub(r"\$(\d+)", lambda m: f"${number[int(m.group(1))]}", text)
    prepared.order = kept
    return prepared


def setting_ids(text: str) -> str:
    """The liveness check (its SQL text) that also sets herald.person_id and herald.role_id."""
    anchor = " \nFROM person LEFT OUTER JOIN"
    assert anchor in text, "the liveness check's SQL changed shape"
    extra = (
        ", set_config('herald.person_id', person.id::text, true) AS set_person, "
        "set_config('herald.role_id', coalesce(anon_1.id::text, ''), true) AS set_role"
    )
    return text.replace(anchor, extra + anchor)


async def run(url: str, tenant: str, subjects: list[str], args: argparse.Namespace) -> None:
    conn: Conn = await psycopg.AsyncConnection.connect(libpq_url(url))
    pid = conn.info.backend_pid
    claims = [ActorClaims(tenant_id=tenant, subject=s, role_code=None) for s in subjects]
    lookup = auth_queries._actor_lookup(True)
    listing = centre_queries._list_page(False, False)
    # The list's values for the non-route ways: the first person's (they cannot use the
    # liveness check's answer before sending the list).
    first = await live_actor(conn, claims[0], enter_tenant=True)
    await conn.commit()
    list_params = centre_queries._list_params(first, 21, None)

    def lookup_params(i: int) -> dict[str, Any]:
        claim = claims[i % len(claims)]
        return {"tenant_id": claim.tenant_id, "external_id": claim.subject, "role_code": None}

    async def route(i: int) -> None:
        actor = await live_actor(conn, claims[i % len(claims)], enter_tenant=True)
        await centre_queries.list_page(conn, actor, limit=20, after=None, unread_only=False)
        await conn.commit()

    async def pipeline_one(i: int) -> None:
        async with conn.pipeline():
            await conn.execute(lookup.sql, lookup.defaults | lookup_params(i))
            cur = await conn.execute(listing.sql, listing.defaults | list_params)
            await conn.commit()
        await cur.fetchall()

    async def pipeline_two(i: int) -> None:
        async with conn.pipeline() as pipeline:
            cur = await conn.execute(lookup.sql, lookup.defaults | lookup_params(i))
            await pipeline.sync()
            await cur.fetchall()
            cur = await conn.execute(listing.sql, listing.defaults | list_params)
            await conn.commit()
        await cur.fetchall()

    client_cursor = psycopg.AsyncClientCursor(conn)

    async def simple_one(i: int) -> None:
        a = client_cursor.mogrify(lookup.sql, lookup.defaults | lookup_params(i))
        b = client_cursor.mogrify(listing.sql, listing.defaults | list_params)
        await client_cursor.execute(f"BEGIN;{a};{b};COMMIT")
        client_cursor.nextset()
        client_cursor.nextset()
        await client_cursor.fetchall()

    p_lookup = Prepared("bench_lookup", lookup)
    p_list = Prepared("bench_list", listing)
    await conn.set_autocommit(True)
    for prepared in (p_lookup, p_list):
        await prepared.prepare(conn)

    async def execute_one(i: int) -> None:
        a = p_lookup.execute(conn, lookup_params(i))
        b = p_list.execute(conn, list_params)
        cur = conn.cursor()
        await cur.execute(f"BEGIN;{a};{b};COMMIT".encode(), prepare=False)
        cur.nextset()
        cur.nextset()
        await cur.fetchall()

    async def execute_two(i: int) -> None:
        cur = conn.cursor()
        await cur.execute(f"BEGIN;{p_lookup.execute(conn, lookup_params(i))}".encode())
        cur.nextset()
        await cur.fetchall()
        await cur.execute(f"{p_list.execute(conn, list_params)};COMMIT".encode())
        await cur.fetchall()

    g_lookup = Prepared("bench_lookup_ids", lookup)
    g_lookup.sql = setting_ids(g_lookup.sql)
    g_list = ids_from_gucs(Prepared("bench_list_ids", listing))
    for prepared in (g_lookup, g_list):
        await prepared.prepare(conn)
    # The same two for psycopg's own (pyformat) placeholders, for the pipeline.
    pipelined_lookup = setting_ids(lookup.sql)
    pipelined_list = listing.sql
    for key in IDS:
        pipelined_list = re.sub(
            rf"%\({key}\)s(::\w+)?", FROM_GUC.format(key).replace("%", "%%"), pipelined_list
        )
    # The rewritten list's own values: no person or role, they come from the settings.
    page_params = {"tenant_id": tenant, "limit": 21}

    async def execute_ids(i: int) -> list[Any]:
        a = g_lookup.execute(conn, lookup_params(i))
        b = g_list.execute(conn, page_params)
        cur = conn.cursor()
        await cur.execute(f"BEGIN;{a};{b};COMMIT".encode(), prepare=False)
        cur.nextset()
        cur.nextset()
        return await cur.fetchall()

    async def pipeline_ids(i: int) -> list[Any]:
        async with conn.pipeline():
            await conn.execute(pipelined_lookup, lookup.defaults | lookup_params(i))
            cur = await conn.execute(pipelined_list, listing.defaults | page_params)
            await conn.commit()
        return await cur.fetchall()

    # What the fast routes send since herald.centre.functions: one statement, one round trip,
    # no BEGIN or COMMIT (the list's function, created here as the routes' first request would).
    await conn.set_autocommit(True)
    listed = functions.LIST[(False, False)]
    exists = await conn.execute("SELECT 1 FROM pg_proc WHERE proname = %s", (listed.name,))
    if await exists.fetchone() is None:
        for statement in listed.create_sql():
            await conn.execute(statement.encode())

    async def function_one(i: int) -> list[Any]:
        claim = claims[i % len(claims)]
        cur = await conn.execute(
            listed.call_sql,
            {"tenant_id": claim.tenant_id, "external_id": claim.subject, "role_code": None}
            | {"limit": 21},
        )
        return [row[4:] for row in (await cur.fetchall())[1:]]

    # The rewritten list must return the route's page for every person, or its figures mean
    # nothing.
    for i in range(len(claims)):
        await conn.set_autocommit(False)
        actor = await live_actor(conn, claims[i], enter_tenant=True)
        want = await centre_queries.list_page(conn, actor, limit=21, after=None, unread_only=False)
        await conn.commit()
        piped = await pipeline_ids(i)
        await conn.set_autocommit(True)
        executed = await execute_ids(i)
        called = await function_one(i)
        assert [row.item for row in want] == [r[2] for r in executed] == [r[2] for r in piped], i
        assert [row.item for row in want] == [r[2] for r in called], i
    print(
        f"the list reading its ids from settings returns the route's page for {len(claims)} people"
    )

    ways: list[tuple[str, Callable[[int], Awaitable[object]], bool]] = [
        ("route: 4 round trips, prepared by psycopg", route, False),
        ("pipeline, one sync", pipeline_one, False),
        ("pipeline, two syncs", pipeline_two, False),
        ("simple, one message, values inlined", simple_one, True),
        ("EXECUTE, one message", execute_one, True),
        ("EXECUTE, two messages", execute_two, True),
        ("pipeline, one sync, ids from settings", pipeline_ids, False),
        ("EXECUTE, one message, ids from settings", execute_ids, True),
        ("function, one round trip, no BEGIN/COMMIT", function_one, True),
    ]
    n = args.transactions
    print(f"per list transaction, {n} transactions a run (client = this process):")
    for round_ in range(args.rounds):
        print(f" round {round_ + 1}")
        for name, way, autocommit in ways:
            await conn.set_autocommit(autocommit)
            for i in range(200):
                await way(i)
            cpu, backend, wall = time.process_time(), backend_cpu(pid), time.perf_counter()
            for i in range(n):
                await way(i)
            cpu = (time.process_time() - cpu) * 1e6 / n
            backend = (backend_cpu(pid) - backend) * 1e6 / n
            wall = (time.perf_counter() - wall) * 1e6 / n
            print(
                f"  {name:42} client CPU {cpu:5.0f} µs  backend CPU {backend:5.0f} µs  "
                f"sum {cpu + backend:5.0f} µs  wall {wall:5.0f} µs"
            )
    await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", default=os.environ.get("HERALD_BENCH_DATABASE_URL"))
    parser.add_argument("--transactions", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    bench = _harness.BenchDatabase.create(args.database_url, "herald_rt")
    try:
        migrate.upgrade(bench.url)
        tenant, subjects = B.demo_directory(bench.url)
        with psycopg.connect(libpq_url(bench.url)) as conn:
            B.seed_inbox(conn, tenant, per_person=30, heavy=(), heavy_rows=30)
            conn.commit()
        B.vacuum(bench.url)
        uvloop.run(run(bench.url, tenant, subjects, args))
    finally:
        bench.drop()


if __name__ == "__main__":
    main()
