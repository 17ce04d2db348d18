"""The cost of row-level security on the hot paths: fan-out, delivery claim, inbox list.

    .venv/bin/python bench/rls.py [--people 20000] [--reads 400]

Uses HERALD_BENCH_DATABASE_URL (the bench creates and drops its own database), else the embedded
PostgreSQL under .herald/bench. Two tenants of the same size share the tables, so the policy has
other tenants' rows to hide. Each path runs with RLS on (as Herald runs: herald_app, SET LOCAL
tenant, forced policies) and, in the same run, with RLS switched off on every table (the same
code, the same role switch; only the policy is gone), alternating on/off twice and keeping each
side's best. Prints seconds and the on/off ratio. Never part of the test run's pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import create_database, drop_database  # noqa: E402

from herald.auth.service import Actor  # noqa: E402
from herald.centre import service as centre  # noqa: E402
from herald.db import embedded, migrate, tenancy  # noqa: E402
from herald.db.engine import libpq_url, make_async_engine  # noqa: E402
from herald.delivery import queries as delivery_queries  # noqa: E402
from herald.delivery import worker as delivery_worker  # noqa: E402
from herald.fanout import service as fanout  # noqa: E402
from herald.kinds.sample import SAMPLE_REGISTRY  # noqa: E402
from herald.sending.service import SendInput, asend  # noqa: E402

TENANTS = ("bench", "other")


def seed_people(url: str, people: int) -> None:
    with psycopg.connect(libpq_url(url)) as conn:
        with conn.cursor().copy(
            "COPY person (tenant_id, external_id, full_name, email, locale) FROM STDIN"
        ) as copy:
            for tenant in TENANTS:
                for i in range(people):
                    copy.write_row((tenant, f"p{i}", f"Person {i}", f"p{i}@example.com", "en"))
        conn.execute("ANALYZE person")


def set_rls(url: str, on: bool) -> None:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        tables = tenancy.protected_tables([r[0] for r in conn.execute(tenancy.tenant_tables_sql())])
        verb = "ENABLE" if on else "DISABLE"
        for table in tables:
            conn.execute(f'ALTER TABLE "{table}" {verb} ROW LEVEL SECURITY')


def clear_fanout(url: str) -> None:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(
            "TRUNCATE broadcast, notification_delivery_attempt, dead_letter, notification_delivery, "
            "notification_delivery_queue, notification_recipient, notification_event"
        )
        conn.execute("VACUUM ANALYZE")


async def fan_out(url: str, tenant: str) -> float:
    engine = make_async_engine(url, pool_size=2)
    async with engine.begin() as conn:
        await asend(
            conn,
            SendInput(
                tenant_id=tenant,
                kind="announcement.posted",
                audience={"kind": "all_users"},
                channels=["in_app", "email"],
                variables={"title": "Sports day", "message": f"moved {uuid.uuid4().hex[:6]}"},
            ),
            registry=SAMPLE_REGISTRY,
        )
    started = time.perf_counter()
    token = uuid.uuid4()
    async with engine.begin() as conn:
        event = await fanout.claim_next_event(conn, token, tenant_id=tenant)
    assert event is not None
    while True:
        async with engine.begin() as conn:
            outcome = await fanout.fan_out_batch(
                conn, event, token, registry=SAMPLE_REGISTRY, batch_size=500
            )
        if outcome.completed:
            break
    elapsed = time.perf_counter() - started
    await engine.dispose()
    return elapsed


async def claim_all(url: str) -> float:
    """Claim every queued email delivery in batches of 200, loading each batch's send contexts
    under its tenant, as the channel worker does; then put them back."""
    engine = make_async_engine(url, pool_size=2)
    started = time.perf_counter()
    while True:
        async with engine.begin() as conn:
            claimed = await delivery_queries.claim_due_deliveries(conn, "email", 200, 60, None)
            if not claimed:
                break
            # As deliver_batch: each tenant's rows read under that tenant, bounded by their months.
            for tenant, rows in delivery_worker._by_tenant(claimed).items():
                await tenancy.enter_tenant(conn, tenant)
                await delivery_queries.load_send_contexts(
                    conn,
                    [row[0] for row in rows],
                    delivery_queries.span_of(row[2] for row in rows),
                )
    elapsed = time.perf_counter() - started
    await engine.dispose()
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(
            "UPDATE notification_delivery_queue SET claimed_at = NULL, lease_expires_at = NULL "
            "WHERE claimed_at IS NOT NULL"
        )
    return elapsed


async def inbox_reads(url: str, reads: int) -> float:
    """`reads` inbox pages (20 items) for people of tenant "bench", as GET /v1/me/notifications
    runs them: one transaction, SET LOCAL tenant, the list query."""
    engine = make_async_engine(url, pool_size=2)
    with psycopg.connect(libpq_url(url)) as conn:
        people = conn.execute(
            "SELECT id, external_id FROM person WHERE tenant_id = 'bench' ORDER BY id LIMIT 50"
        ).fetchall()
    params = centre.parse_list_params(limit=None, cursor=None, unread_only=None, pagination=None)
    started = time.perf_counter()
    for n in range(reads):
        person_id, external_id = people[n % len(people)]
        actor = Actor(
            tenant_id="bench",
            external_id=external_id,
            person_id=person_id,
            role_code=None,
            role_id=None,
            role_scope_kind=None,
            holds_role=False,
        )
        async with engine.begin() as conn:
            await tenancy.enter_tenant(conn, "bench")
            await centre.list_notifications(conn, actor, params)
    elapsed = time.perf_counter() - started
    await engine.dispose()
    return elapsed


def best_of(
    url: str, run: Callable[[], Coroutine[Any, Any, float]], before: Callable[[], None]
) -> dict[bool, float]:
    """Alternate RLS on and off twice; each side's best time."""
    best: dict[bool, float] = {}
    for on in (True, False, True, False):
        set_rls(url, on)
        before()
        seconds = asyncio.run(run())
        best[on] = min(best.get(on, seconds), seconds)
    set_rls(url, True)
    return best


def report(name: str, best: dict[bool, float], unit: str, count: int) -> None:
    on, off = best[True], best[False]
    print(
        f"{name:10} RLS on {on:7.3f} s ({count / on:9,.0f} {unit}/s)   "
        f"RLS off {off:7.3f} s ({count / off:9,.0f} {unit}/s)   on/off = {on / off:.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--people", type=int, default=20_000)
    parser.add_argument("--reads", type=int, default=400)
    args = parser.parse_args()
    server = os.environ.get("HERALD_BENCH_DATABASE_URL") or embedded.start(
        ROOT / ".herald" / "bench"
    )
    name = f"herald_bench_{uuid.uuid4().hex[:8]}"
    url = create_database(server, name)
    try:
        migrate.upgrade(url)
        with psycopg.connect(libpq_url(url)) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        print(f"PostgreSQL {version}; two tenants of {args.people:,} people each")
        seed_people(url, args.people)

        fan = best_of(url, lambda: fan_out(url, "bench"), lambda: clear_fanout(url))
        report("fan-out", fan, "recipients", args.people)

        # Both tenants' deliveries queued, so the claim (cross-tenant) and the per-tenant loads
        # both have work; then inbox rows exist for the reads.
        clear_fanout(url)
        asyncio.run(fan_out(url, "bench"))
        asyncio.run(fan_out(url, "other"))
        claim = best_of(url, lambda: claim_all(url), lambda: None)
        report("claim", claim, "deliveries", 2 * args.people)

        inbox = best_of(url, lambda: inbox_reads(url, args.reads), lambda: None)
        report("inbox", inbox, "pages", args.reads)
    finally:
        drop_database(server, name)


if __name__ == "__main__":
    main()
