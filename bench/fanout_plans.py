"""EXPLAIN (ANALYZE, BUFFERS) of the fan-out's batch statement at chosen batches of one event.

    .venv/bin/python bench/fanout_plans.py [--people 100000] [--batch 500] [--at 2 100 190]

Seeds N people, records one all_users event over in_app + email, then fans it out with the real
batch code; before each batch named by --at it runs the same statement under EXPLAIN (ANALYZE,
BUFFERS) in a rolled-back transaction (same tenant, same cursor, same wording) and prints the
time, buffers and rows of each plan node that took time, so an early and a late batch can be
compared (does the work per person grow with the tables?). Uses HERALD_BENCH_DATABASE_URL (the
bench creates and drops its own database), else the embedded PostgreSQL under .herald/bench.
Never part of the test run's pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import create_database, drop_database  # noqa: E402

from bench.fanout import TENANT, record_event, seed_people  # noqa: E402
from herald.db import embedded, migrate, tenancy  # noqa: E402
from herald.db.engine import make_async_engine  # noqa: E402
from herald.fanout import queries  # noqa: E402
from herald.fanout import service as fanout  # noqa: E402
from herald.fanout.pagewrite import queries as pagewrite  # noqa: E402
from herald.fanout.wording import in_app_wording  # noqa: E402
from herald.kinds.sample import SAMPLE_REGISTRY  # noqa: E402


def summarise(node: dict[str, Any], depth: int = 0, out: list[str] | None = None) -> list[str]:
    """One line per plan node that took ≥ 0.5 ms: its own time excludes nothing (inclusive)."""
    out = [] if out is None else out
    total = node.get("Actual Total Time", 0.0) * node.get("Actual Loops", 1)
    if total >= 0.5 or depth == 0:
        hit = node.get("Shared Hit Blocks", 0)
        read = node.get("Shared Read Blocks", 0)
        name = node["Node Type"]
        for key in ("Index Name", "Relation Name", "CTE Name", "Subplan Name"):
            if key in node:
                name += f" [{node[key]}]"
        out.append(
            f"{'  ' * depth}{name}: {total:.1f} ms, rows {node.get('Actual Rows', 0)}"
            f" x{node.get('Actual Loops', 1)}, buffers hit {hit} read {read}"
        )
        for key in ("Index Cond", "Filter", "Rows Removed by Filter", "Heap Fetches"):
            if node.get(key):
                out.append(f"{'  ' * depth}  {key}: {str(node[key])[:160]}")
    for child in node.get("Plans", []):
        summarise(child, depth + 1, out)
    return out


async def run(url: str, batch: int, at: set[int]) -> None:
    await record_event(url, TENANT)
    engine = make_async_engine(url, pool_size=1)
    token = uuid.uuid4()
    async with engine.begin() as conn:
        event = await fanout.claim_next_event(conn, token, tenant_id=TENANT)
    assert event is not None
    kind = SAMPLE_REGISTRY.get(event.kind)
    number = 0
    while True:
        number += 1
        if number in at:
            async with engine.connect() as conn:
                await tenancy.enter_tenant(conn, event.tenant_id)
                cursor = await queries.lock_claimed_event(conn, event.id, token)
                assert cursor is not None
                wording = in_app_wording(
                    kind,  # type: ignore[arg-type]
                    event.variables,
                    await fanout._overrides(conn, event),
                )
                statement = fanout._batch_statement(event, kind, batch, renders_in_app=True)
                compiled = statement.compile(dialect=conn.dialect)
                params = {
                    **compiled.params,
                    "fanout_after": cursor,
                    **pagewrite.wording_params(wording),
                }
                found = await conn.exec_driver_sql(
                    "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + str(compiled), params
                )
                plan = found.scalar_one()
                plan = plan if isinstance(plan, list) else json.loads(plan)
                await conn.rollback()
            top = plan[0]
            print(
                f"-- batch {number} (cursor {cursor}): execution {top['Execution Time']:.1f} ms, "
                f"planning {top['Planning Time']:.1f} ms"
            )
            for trigger in top.get("Triggers", []):
                print(
                    f"   trigger {trigger['Trigger Name']} on {trigger.get('Relation', '?')}: "
                    f"{trigger['Time']:.1f} ms x{trigger['Calls']}"
                )
            print("\n".join("   " + line for line in summarise(top["Plan"])))
        async with engine.begin() as conn:
            outcome = await fanout.fan_out_batch(
                conn, event, token, registry=SAMPLE_REGISTRY, batch_size=batch
            )
        if outcome.completed:
            break
    await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--people", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--at", type=int, nargs="+", default=[2, 100, 190])
    args = parser.parse_args()
    server = os.environ.get("HERALD_BENCH_DATABASE_URL") or embedded.start(
        ROOT / ".herald" / "bench"
    )
    name = f"herald_bench_{uuid.uuid4().hex[:8]}"
    url = create_database(server, name)
    try:
        migrate.upgrade(url)
        seed_people(url, args.people)
        print(f"{args.people:,} people; batch {args.batch}; EXPLAIN at batches {args.at}")
        asyncio.run(run(url, args.batch, set(args.at)))
    finally:
        drop_database(server, name)


if __name__ == "__main__":
    main()
