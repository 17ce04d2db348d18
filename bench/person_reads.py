"""One person's two long reads at a million rows: the operator's delivery history of the person
(`GET /v1/admin/people/{externalId}/deliveries`) and the person's inbox with `unreadOnly=true`.

    .venv/bin/python bench/person_reads.py [--rows 1000000] [--unread 0.1] [--others 2000]
        [--deep 10000] [--runs 50] [--baseline-runs 5] [--keep]

Loads ROWS notifications of ONE person (an event, an inbox row and its delivered in-app delivery
each; a fraction --unread of them unread; half this month, half in the default partition, so the
reads cross months) among OTHERS people with a few rows each, server-side with INSERT … SELECT
generate_series, then VACUUM ANALYZE. Then, each through the statement the service runs, warmed
past psycopg's prepare threshold, median and p95 of RUNS executions of the first page (21 rows)
and of a keyset page DEEP rows in, each beside baselines measured in the same run:

- deliveries: the recipient-keyed query the page ran before migration 0025 (the person reached
  through notification_recipient.user_id, every delivery of theirs sorted), and a bare LIMIT on
  notification_delivery_person_idx (the floor: no join, no column but the id);
- unread inbox: the same rows through a sort of all the person's unread rows (what 0019 took
  away), and a bare LIMIT on notification_recipient_unread_idx.

Each figure's plan is printed in a line (its nodes and buffers) from EXPLAIN (ANALYZE, BUFFERS).
Figures, never pass/fail. Uses HERALD_BENCH_DATABASE_URL, else the embedded PostgreSQL under
.herald/bench; the bench's database is dropped after the run unless --keep.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from sqlalchemy import Select, select, text, tuple_  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine  # noqa: E402
from tests import history  # noqa: E402

from bench._harness import BenchDatabase  # noqa: E402
from herald.admin.trace import queries as trace  # noqa: E402
from herald.auth.service import Actor  # noqa: E402
from herald.centre import queries as centre  # noqa: E402
from herald.db import migrate, tenancy  # noqa: E402
from herald.db import schema as s  # noqa: E402
from herald.db.engine import libpq_url, make_async_engine  # noqa: E402

TENANT = "t-bench-reads"
PAGE = 21  # a page of 20 and the row that says another follows
EACH = 5


def load(url: str, rows: int, unread: float, others: int) -> int:
    """The heavy person's `rows` notifications and `others` people with EACH; the person's id."""
    with psycopg.connect(libpq_url(url)) as conn:
        # Half this month (a millisecond apart), half months ago (the default partition).
        person = history.heavy_person_events(
            conn,
            TENANT,
            "heavy",
            others=others,
            rows=rows,
            channels=["in_app"],
            spacing=timedelta(milliseconds=1),
            older_half=timedelta(days=200),
        )
        conn.execute("CREATE INDEX ON ev (n)")
        conn.execute(
            """
            WITH rc AS (
                INSERT INTO notification_recipient
                    (tenant_id, event_id, user_id, user_public_id_snapshot, occurred_at, read_at)
                SELECT %(tenant)s, ev.id, p.id, p.public_id, ev.occurred_at,
                       CASE WHEN p.id <> %(person)s OR random() >= %(unread)s THEN now() END
                FROM person p JOIN ev ON ev.n <= CASE WHEN p.id = %(person)s
                                                     THEN %(rows)s ELSE %(each)s END
                WHERE p.tenant_id = %(tenant)s
                RETURNING id, user_id, event_id, occurred_at
            )
            INSERT INTO notification_delivery
                (tenant_id, recipient_id, user_id, event_id, channel, status, delivered_at,
                 queued_at, rendered_title, rendered_body, occurred_at)
            SELECT %(tenant)s, rc.id, rc.user_id, rc.event_id, 'in_app', 'delivered', now(),
                   rc.occurred_at, 'Sports day', 'It is now on Friday.', rc.occurred_at
            FROM rc
            """,
            {"tenant": TENANT, "rows": rows, "each": EACH, "person": person, "unread": unread},
        )
        conn.commit()
        conn.autocommit = True
        for table in ("notification_event", "notification_recipient", "notification_delivery"):
            conn.execute(f"VACUUM ANALYZE {table}")
        return person


def old_delivery_page(person_id: int, after: tuple[datetime, int] | None) -> Select[Any]:
    """The page as it was read before 0025: the person matched on the recipient row."""
    d, r, e = s.notification_delivery, s.notification_recipient, s.notification_event
    where = [d.c.tenant_id == TENANT, r.c.user_id == person_id]
    if after is not None:
        where.append(tuple_(d.c.queued_at, d.c.id) < tuple_(after[0], after[1]))
    return (
        select(
            *trace._DELIVERY_COLUMNS,
            e.c.public_id.label("event_public_id"),
            e.c.kind,
            e.c.category,
            e.c.occurred_at,
            r.c.read_at,
        )
        .select_from(d.join(r, r.c.id == d.c.recipient_id).join(e, e.c.id == d.c.event_id))
        .where(*where)
        .order_by(d.c.queued_at.desc(), d.c.id.desc())
        .limit(PAGE)
    )


def _bare(table: str, order: str, where: str, deep: bool) -> Any:
    """A bare LIMIT on an index in its order: the floor of a page (no join, only the id)."""
    after = f" AND ({order}, id) < (:at, :id)" if deep else ""
    return text(
        f"SELECT id FROM {table} WHERE user_id = :person{where}{after} "
        f"ORDER BY {order} DESC, id DESC LIMIT 21"
    )


# The unread page's rows with the order taken from an expression no index holds: every unread
# row of the person is fetched and sorted before the LIMIT (the shape migration 0019 removed).
SORTED_UNREAD = text(
    "SELECT r.id FROM notification_recipient r "
    "WHERE r.tenant_id = :tenant AND r.user_id = :person AND r.read_at IS NULL "
    "AND EXISTS (SELECT 1 FROM notification_delivery d WHERE d.recipient_id = r.id "
    "AND d.occurred_at = r.occurred_at AND d.channel = 'in_app' AND d.status = 'delivered') "
    "AND (CAST(:at AS timestamptz) IS NULL OR (r.occurred_at, r.id) < (:at, :id)) "
    "ORDER BY r.occurred_at + interval '0' DESC, r.id DESC LIMIT 21"
)


async def plan_line(conn: AsyncConnection, statement: Any, params: dict[str, Any]) -> str:
    """The plan's nodes (with index names) and its shared buffers, from EXPLAIN ANALYZE."""
    compiled = statement.compile(dialect=conn.dialect)
    result = await conn.exec_driver_sql(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + str(compiled),
        compiled.construct_params(params),
    )
    raw = result.scalar_one()
    top = (raw if isinstance(raw, list) else json.loads(raw))[0]
    names: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        label = node["Node Type"]
        if "Index Name" in node:
            label += f"({node['Index Name'].rsplit('_idx', 1)[0].removeprefix('notification_')})"
        if label not in names and node["Node Type"] not in ("Result", "Memoize"):
            names.append(label)
        for child in node.get("Plans", []):
            walk(child)

    walk(top["Plan"])
    hit = top["Plan"].get("Shared Hit Blocks", 0) + top["Plan"].get("Shared Read Blocks", 0)
    return f"{top['Execution Time']:.2f} ms once, {hit} buffers: " + " > ".join(names[:6])


async def timed(run: Callable[[], Awaitable[object]], runs: int) -> tuple[float, float]:
    """(median, p95) in ms of `runs` calls, after warming past psycopg's prepare threshold."""
    for _ in range(6):
        await run()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        await run()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.95))]


def figure(label: str, times: tuple[float, float], plan: str) -> None:
    print(f"  {label:44} median {times[0]:9.2f} ms  p95 {times[1]:9.2f} ms")
    print(f"  {'':44} {plan}")


async def measure(url: str, person: int, deep: int, runs: int, baseline_runs: int) -> None:
    engine = make_async_engine(url, pool_size=1)
    actor = Actor(TENANT, "heavy", person, None, None, None, False)
    async with engine.connect() as conn:
        await tenancy.enter_tenant(conn, TENANT)
        row = (
            await conn.execute(
                text(
                    "SELECT queued_at, id FROM notification_delivery WHERE user_id = :p "
                    "ORDER BY queued_at DESC, id DESC OFFSET :n LIMIT 1"
                ),
                {"p": person, "n": deep},
            )
        ).one()
        delivery_cursor = (row[0], row[1])
        unread_total = (
            await conn.execute(
                text(
                    "SELECT count(*) FROM notification_recipient "
                    "WHERE user_id = :p AND read_at IS NULL"
                ),
                {"p": person},
            )
        ).scalar_one()
        # A small run's unread list may be shorter than DEEP: then its deep page is mid-list.
        unread_deep = min(deep, unread_total // 2)
        row = (
            await conn.execute(
                text(
                    "SELECT occurred_at, id FROM notification_recipient WHERE user_id = :p "
                    "AND read_at IS NULL ORDER BY occurred_at DESC, id DESC OFFSET :n LIMIT 1"
                ),
                {"p": person, "n": unread_deep},
            )
        ).one()
        unread_cursor = (row[0], row[1])
        await conn.commit()
    print(f"the person's unread rows: {unread_total:,}")

    for deep_page in (False, True):
        title = f"keyset page {deep:,} rows in" if deep_page else "first page"
        print(f"\ndelivery history, {title}")
        await delivery_figures(
            engine, person, delivery_cursor if deep_page else None, runs, baseline_runs
        )
        title = f"keyset page {unread_deep:,} unread rows in" if deep_page else "first page"
        print(f"\ninbox, unreadOnly=true, {title}")
        await inbox_figures(
            engine, actor, unread_cursor if deep_page else None, runs, baseline_runs
        )
    await engine.dispose()


def _raw(person: int, cursor: tuple[datetime, int] | None) -> dict[str, Any]:
    return {
        "person": person,
        "at": cursor[0] if cursor else None,
        "id": cursor[1] if cursor else None,
    }


async def delivery_figures(
    engine: AsyncEngine,
    person: int,
    cursor: tuple[datetime, int] | None,
    runs: int,
    baseline_runs: int,
) -> None:
    none = trace.PersonDeliveryFilters()
    raw = _raw(person, cursor)
    async with engine.connect() as conn:
        await tenancy.enter_tenant(conn, TENANT)

        async def page() -> object:
            return await trace.person_deliveries(
                conn, TENANT, person, none, after=cursor, limit=PAGE
            )

        async def old() -> object:
            return (await conn.execute(old_delivery_page(person, cursor))).all()

        bare = _bare("notification_delivery", "queued_at", "", cursor is not None)

        async def floor() -> object:
            return (await conn.execute(bare, raw)).all()

        statement = trace.person_deliveries_statement(
            TENANT, person, none, after=cursor, limit=PAGE
        )
        async with tenancy.in_index_order(conn):
            plan = await plan_line(conn, statement, {})
        figure("person_deliveries (person_idx, 0025)", await timed(page, runs), plan)
        figure(
            "baseline: recipient-keyed query (before 0025)",
            await timed(old, baseline_runs),
            await plan_line(conn, old_delivery_page(person, cursor), {}),
        )
        figure(
            "baseline: bare LIMIT on person_idx",
            await timed(floor, runs),
            await plan_line(conn, bare, raw),
        )
        await conn.rollback()


async def inbox_figures(
    engine: AsyncEngine,
    actor: Actor,
    cursor: tuple[datetime, int] | None,
    runs: int,
    baseline_runs: int,
) -> None:
    raw = _raw(actor.person_id, cursor)
    async with engine.connect() as conn:
        await tenancy.enter_tenant(conn, TENANT)
        for name, value in tenancy.INBOX_PLANNER_SETTINGS:  # as an actor's request sets them
            await conn.execute(text(f"SET LOCAL {name} = '{value}'"))

        async def inbox() -> object:
            return await centre.list_page(conn, actor, limit=PAGE, after=cursor, unread_only=True)

        async def sorted_unread() -> object:
            return (await conn.execute(SORTED_UNREAD, raw | {"tenant": TENANT})).all()

        bare = _bare(
            "notification_recipient", "occurred_at", " AND read_at IS NULL", cursor is not None
        )

        async def unread_floor() -> object:
            return (await conn.execute(bare, raw)).all()

        statement = centre.list_page_statement(actor, limit=PAGE, after=cursor, unread_only=True)
        plan = await plan_line(conn, statement, {})
        figure("centre list_page (unread_idx, 0019)", await timed(inbox, runs), plan)
        await conn.execute(text("SET LOCAL enable_sort = on"))
        figure(
            "baseline: all unread rows sorted",
            await timed(sorted_unread, baseline_runs),
            await plan_line(conn, SORTED_UNREAD, raw | {"tenant": TENANT}),
        )
        figure(
            "baseline: bare LIMIT on unread_idx",
            await timed(unread_floor, runs),
            await plan_line(conn, bare, raw),
        )
        await conn.rollback()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000, help="the person's notifications")
    parser.add_argument("--unread", type=float, default=0.1, help="fraction left unread")
    parser.add_argument("--others", type=int, default=2000, help="other people, 5 rows each")
    parser.add_argument("--deep", type=int, default=10_000, help="rows before the deep page")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument(
        "--baseline-runs", type=int, default=5, help="runs of the sorting baselines"
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--keep", action="store_true", help="keep the bench's database")
    args = parser.parse_args()
    db = BenchDatabase.create(args.database_url, "herald_bench_reads")
    try:
        migrate.upgrade(db.url)
        started = time.perf_counter()
        person = load(db.url, args.rows, args.unread, args.others)
        print(
            f"PostgreSQL {db.server_version()}; loaded {args.rows:,} notifications of one person "
            f"(+{args.others:,} people with {EACH}) in {time.perf_counter() - started:.0f} s"
        )
        asyncio.run(measure(db.url, person, args.deep, args.runs, args.baseline_runs))
    finally:
        if args.keep:
            print(f"kept database {db.name}")
        else:
            db.drop()


if __name__ == "__main__":
    main()
