"""The follow-up sweep's cost per tenant with nothing due, and with 10,000 due, beside baselines
measured in the same run.

    .venv/bin/python bench/followups.py [--tenants 50] [--idle-rows 2000] [--due 10000]

Uses HERALD_BENCH_DATABASE_URL (any database on the server is fine: the bench creates and drops
its own), else the embedded PostgreSQL under .herald/bench. Prints:
  - idle sweep: statements and milliseconds per tenant for a sweep with nothing due, over
    `--tenants` tenants holding `--idle-rows` follow-ups each (armed and notified ones with
    deadlines hours away, resolved ones); baseline: one bare `SELECT 1` round trip, and the
    reminder cycle's idle tick, in the same run;
  - due sweep: one sweep over `--due` due follow-ups in one tenant (the notify pass), then the
    reminder pass over the same rows: seconds, follow-ups per second, statements per
    follow-up; baseline: a bare loop of the same number of conditional UPDATEs, one per
    transaction (the claim alone), and of send() one per transaction (the event alone).
Never part of the test run's pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import event, text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import create_database, drop_database  # noqa: E402

from herald.config import Settings  # noqa: E402
from herald.db import embedded, migrate  # noqa: E402
from herald.db.engine import libpq_url, make_async_engine  # noqa: E402
from herald.followups import worker as followups  # noqa: E402
from herald.kinds.sample import SAMPLE_REGISTRY  # noqa: E402
from herald.scheduling import worker as cycle  # noqa: E402
from herald.sending.service import SendInput, asend  # noqa: E402

VARIABLES = '{"studentName": "Asha Rai", "date": "2026-09-01", "eventType": "absent"}'
AUDIENCE = '{"kind": "guardians_of_users", "userIds": ["stu-1"]}'
COLUMNS = (
    "COPY followup (tenant_id, key, kind, reminder_kind, audience, variables, grace_seconds, "
    "reminder_delay_seconds, state, arm_at, notified_at, escalate_at, reminded_at) FROM STDIN"
)
IDLE_STATES = ("armed", "notified", "acknowledged", "follow_up", "not_required")


def _row(tenant: str, key: str, state: str, *, due: bool) -> tuple[Any, ...]:
    """A follow-up whose deadlines are offsets from now (intervals, resolved on insert)."""
    arm = "-1 minute" if due else "6 hours"
    timing = {
        "armed": (arm, None, None, None),
        "notified": ("-1 hour", "-1 hour", "6 hours", None),
        "follow_up": ("-3 hours", "-3 hours", "-2 hours", "-2 hours"),
        "acknowledged": ("-1 hour", None, None, None),
        "not_required": (None, None, None, None),
    }[state]
    return (tenant, key, "attendance.event", "attendance.reminder", AUDIENCE, VARIABLES, 900,
            3600, state, *timing)  # fmt: skip


def seed(url: str, tenants: int, idle_rows: int, due: int) -> None:
    with psycopg.connect(libpq_url(url)) as conn:
        conn.execute(
            "CREATE TEMP TABLE staging (tenant_id text, key text, kind text, reminder_kind text, "
            "audience jsonb, variables jsonb, grace_seconds int, reminder_delay_seconds int, "
            "state text, arm_at interval, notified_at interval, escalate_at interval, "
            "reminded_at interval)"
        )
        with conn.cursor().copy(COLUMNS.replace("followup", "staging")) as copy:
            for t in range(tenants):
                for i in range(idle_rows):
                    state = IDLE_STATES[i % len(IDLE_STATES)]
                    copy.write_row(_row(f"idle-{t:03d}", f"k{i}", state, due=False))
            for i in range(due):
                copy.write_row(_row("due", f"k{i}", "armed", due=True))
                copy.write_row(_row("baseline", f"k{i}", "armed", due=True))
        conn.execute(
            "INSERT INTO followup (tenant_id, key, kind, reminder_kind, audience, variables, "
            "grace_seconds, reminder_delay_seconds, state, arm_at, notified_at, escalate_at, "
            "reminded_at) SELECT tenant_id, key, kind, reminder_kind, audience, variables, "
            "grace_seconds, reminder_delay_seconds, state, now() + arm_at, now() + notified_at, "
            "now() + escalate_at, now() + reminded_at FROM staging"
        )
        conn.execute("ANALYZE")
        conn.commit()


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"median {statistics.median(ordered):7.2f}  p95 {p95:7.2f}  max {ordered[-1]:7.2f} ms"


class Counter:
    def __init__(self, engine: Any) -> None:
        self.statements = 0
        event.listen(engine.sync_engine, "before_cursor_execute", self._count)

    def _count(self, *_: Any) -> None:
        self.statements += 1


async def idle(settings: Settings, url: str, tenants: int, sweeps: int) -> None:
    engine = make_async_engine(url, pool_size=2)
    counter = Counter(engine)
    try:
        # Only the idle tenants: the due ones are measured apart.
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE followup SET arm_at = now() + interval '1 day' "
                                    "WHERE tenant_id IN ('due', 'baseline')"))  # fmt: skip
        per_tenant: list[float] = []
        counter.statements = 0
        for _ in range(sweeps):
            started = time.perf_counter()
            report = await followups.sweep(engine, SAMPLE_REGISTRY)
            elapsed = (time.perf_counter() - started) * 1000
            assert report.notified == report.reminded == report.errors == 0
            per_tenant.append(elapsed / report.tenants)
        swept = report.tenants
        print(
            f"idle sweep  {swept} tenants: {counter.statements / sweeps / swept:.1f} "
            f"statements/tenant, per tenant {summary(per_tenant)}"
        )
        bare: list[float] = []
        async with engine.connect() as conn:
            for _ in range(sweeps * 10):
                started = time.perf_counter()
                await conn.execute(text("SELECT 1"))
                bare.append((time.perf_counter() - started) * 1000)
        print(f"baseline    bare SELECT 1 round trip:              {summary(bare)}")
        ticks: list[float] = []
        counter.statements = 0
        for _ in range(sweeps):
            started = time.perf_counter()
            await cycle.run_tick(engine, SAMPLE_REGISTRY, settings, "bench")
            ticks.append((time.perf_counter() - started) * 1000)
        print(
            f"baseline    reminder idle tick (leader): {counter.statements / sweeps:.1f} "
            f"statements/tick, {summary(ticks)}"
        )
        await cycle.release(engine, "bench")
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE followup SET arm_at = now() - interval '1 minute' "
                                    "WHERE tenant_id = 'due'"))  # fmt: skip
    finally:
        await engine.dispose()


async def due(url: str, count: int) -> None:
    engine = make_async_engine(url, pool_size=2)
    counter = Counter(engine)
    try:
        for leg in ("notify", "remind"):
            if leg == "remind":
                async with engine.begin() as conn:
                    await conn.execute(
                        text("UPDATE followup SET escalate_at = now() - interval '1 second' "
                             "WHERE tenant_id = 'due'")
                    )  # fmt: skip
            counter.statements = 0
            started = time.perf_counter()
            report = await followups.sweep(engine, SAMPLE_REGISTRY)
            elapsed = time.perf_counter() - started
            done = report.notified if leg == "notify" else report.reminded
            assert done == count and report.errors == 0, report
            print(
                f"due sweep   {leg:6} pass over {count:,} due: {elapsed:6.2f} s, "
                f"{count / elapsed:7.0f}/s, {elapsed / count * 1000:.2f} ms and "
                f"{counter.statements / count:.1f} statements per follow-up"
            )

        async with engine.begin() as conn:
            await conn.execute(text("UPDATE followup SET arm_at = now() - interval '1 minute' "
                                    "WHERE tenant_id = 'baseline'"))  # fmt: skip
        async with engine.connect() as conn:
            ids = [r[0] for r in await conn.execute(
                text("SELECT id FROM followup WHERE tenant_id = 'baseline' ORDER BY id"))]  # fmt: skip
            await conn.commit()
            started = time.perf_counter()
            for row_id in ids:
                async with conn.begin():
                    result = await conn.execute(
                        text("UPDATE followup SET state = 'notified', notified_at = now(), "
                             "escalate_at = now() + interval '1 hour' WHERE id = :id AND "
                             "tenant_id = 'baseline' AND state = 'armed' AND arm_at <= now()"),
                        {"id": row_id},
                    )  # fmt: skip
                    assert result.rowcount == 1
            elapsed = time.perf_counter() - started
        print(
            f"baseline    bare conditional UPDATE, one per transaction, x{len(ids):,}: "
            f"{elapsed:6.2f} s, {len(ids) / elapsed:7.0f}/s, {elapsed / len(ids) * 1000:.2f} ms each"
        )
        started = time.perf_counter()
        async with engine.connect() as conn:
            for i in range(count):
                async with conn.begin():
                    await asend(
                        conn,
                        SendInput(tenant_id="baseline", kind="attendance.event",
                                  audience={"kind": "guardians_of_users", "userIds": ["stu-1"]},
                                  variables={"studentName": "Asha Rai", "date": "2026-09-01",
                                             "eventType": f"absent {i}"}),
                        registry=SAMPLE_REGISTRY,
                    )  # fmt: skip
        elapsed = time.perf_counter() - started
        print(
            f"baseline    send(), one per transaction, x{count:,}:               "
            f"{elapsed:6.2f} s, {count / elapsed:7.0f}/s, {elapsed / count * 1000:.2f} ms each"
        )
    finally:
        await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--idle-rows", type=int, default=2000)
    parser.add_argument("--due", type=int, default=10_000)
    parser.add_argument("--sweeps", type=int, default=30)
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
        print(
            f"PostgreSQL {version}; {args.tenants} idle tenants x {args.idle_rows:,} follow-ups; "
            f"{args.due:,} due in one tenant"
        )
        seed(url, args.tenants, args.idle_rows, args.due)
        settings = Settings(database_url=url, feature_reminders=True)
        asyncio.run(idle(settings, url, args.tenants, args.sweeps))
        asyncio.run(due(url, args.due))
    finally:
        drop_database(server, name)


if __name__ == "__main__":
    main()
