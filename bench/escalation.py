"""The scheduler's escalation tick against many pending steps, beside the reminder idle tick.

    .venv/bin/python bench/escalation.py [--sizes 10000,1000000] [--due 40] [--ticks 200]

Uses HERALD_BENCH_DATABASE_URL (any database on the server is fine: the bench creates and drops
its own), else the embedded PostgreSQL under .herald/bench. For each size it stores that many
pending escalation steps due hours from now (docs/escalation.md), then prints:
  - idle tick: statements, milliseconds and shared buffers read per escalation tick with nothing
    due (the lease and the one DECIDE statement), which must not grow with the pending steps:
    the claim is a range scan of the partial due index that stops at the first step not due;
  - due tick: one DECIDE over `--due` due steps of real recipients (an `announcement.urgent`
    fanned out to the bench's people, their first step moved into the past), each decision
    rolled back so every repetition decides the same steps;
and once, in the same run, the reminder idle tick of bench/scheduler.py over 1,000 schedules.
Compare the 10k and 1M rows: the statements and buffers per tick should be the same. Never part
of the test run's pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
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

from bench import scheduler as reminder_bench  # noqa: E402
from bench._harness import bench_server  # noqa: E402
from herald.config import Settings  # noqa: E402
from herald.db import migrate  # noqa: E402
from herald.db.engine import libpq_url, make_async_engine  # noqa: E402
from herald.fanout.worker import fan_out_next_event  # noqa: E402
from herald.kinds.sample import SAMPLE_REGISTRY  # noqa: E402
from herald.scheduling.escalation import queries as escalation  # noqa: E402
from herald.scheduling.escalation import worker  # noqa: E402
from herald.sending.service import SendInput, asend  # noqa: E402

TENANT = reminder_bench.TENANT
# Recipient ids of the pending filler steps: far past any real one, so no decision touches them.
FILLER_RECIPIENTS = 10_000_000_000


def fill(url: str, pending: int) -> None:
    """`pending` steps, one per (fictional) recipient, due from an hour ahead onwards."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(
            "DELETE FROM notification_escalation_step WHERE recipient_id >= %s",
            (FILLER_RECIPIENTS,),
        )
        conn.execute(
            "INSERT INTO notification_escalation_step (tenant_id, event_id, recipient_id, "
            "occurred_at, category, suppressible, step_index, channel, due_at) "
            "SELECT %s, 1, %s + g, now(), 'announcement', true, 1, 'email', "
            "now() + interval '1 hour' + g * interval '10 milliseconds' "
            "FROM generate_series(1, %s) g",
            (TENANT, FILLER_RECIPIENTS, pending),
        )
        conn.execute("VACUUM ANALYZE notification_escalation_step")


async def escalating_event(url: str) -> int:
    """An announcement.urgent to every bench person, fanned out: two pending steps each."""
    engine = make_async_engine(url, pool_size=2)
    try:
        people = [f"p{i}" for i in range(reminder_bench.PEOPLE)]
        async with engine.begin() as conn:
            await asend(
                conn,
                SendInput(
                    tenant_id=TENANT,
                    kind="announcement.urgent",
                    audience={"kind": "users", "userIds": people},
                    channels=["in_app", "email", "sms"],
                    variables={"title": "Closed", "message": "Rain"},
                ),
                registry=SAMPLE_REGISTRY,
            )
        while await fan_out_next_event(engine, SAMPLE_REGISTRY, batch_size=500, tenant_id=TENANT):
            pass
    finally:
        await engine.dispose()
    return len(people)


def _buffers(url: str, *, due: bool) -> int:
    """Shared buffers (hit + read) one DECIDE touches, rolled back."""
    with psycopg.connect(libpq_url(url)) as conn:
        if due:
            _make_due(conn)
        # The batch size in the text: the statement's LIKE patterns hold % signs.
        statement = escalation.DECIDE_SQL.replace(":limit", str(worker.ESCALATION_BATCH))
        plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}").fetchone()
        conn.rollback()
    assert plan is not None
    top = plan[0][0]["Plan"]
    return int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))


def _make_due(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "UPDATE notification_escalation_step SET due_at = now() - interval '1 second' "
        "WHERE recipient_id < %s AND step_index = 1 AND state = 'pending'",
        (FILLER_RECIPIENTS,),
    )


async def ticks(settings: Settings, url: str, count: int, due: int) -> None:
    engine = make_async_engine(url, pool_size=2)
    statements = 0

    def counted(*_: Any) -> None:
        nonlocal statements
        statements += 1

    event.listen(engine.sync_engine, "before_cursor_execute", counted)
    try:
        # Buffers first: the timed repetitions below leave dead index entries behind them.
        idle_buffers, due_buffers = _buffers(url, due=False), _buffers(url, due=True)
        durations: list[float] = []
        statements = 0
        for _ in range(count):
            started = time.perf_counter()
            report = await worker.run_tick(engine, settings, "bench-escalation")
            durations.append((time.perf_counter() - started) * 1000)
            assert report.leader and report.sent == 0
        print(
            f"  idle tick  {statements / count:.1f} statements/tick, "
            f"{idle_buffers:5d} buffers, {reminder_bench.summary(durations)}"
        )
        durations = []
        for _ in range(max(1, count // 4)):
            async with engine.connect() as conn:
                transaction = await conn.begin()
                await conn.execute(
                    text(
                        "UPDATE notification_escalation_step SET due_at = now() - "
                        "interval '1 second' WHERE recipient_id < :filler AND step_index = 1"
                    ),
                    {"filler": FILLER_RECIPIENTS},
                )
                started = time.perf_counter()
                decided = await escalation.decide_due(conn, worker.ESCALATION_BATCH)
                durations.append((time.perf_counter() - started) * 1000)
                await transaction.rollback()
            assert decided.claimed == due, decided
        print(
            f"  due tick   {due} steps decided, {due_buffers:5d} buffers, "
            f"{reminder_bench.summary(durations)}"
        )
        await worker.release(engine, "bench-escalation")
    finally:
        await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,1000000")
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--ticks", type=int, default=200)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]

    server = bench_server()
    name = f"herald_bench_{uuid.uuid4().hex[:8]}"
    url = create_database(server, name)
    try:
        migrate.upgrade(url)
        with psycopg.connect(libpq_url(url)) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        print(f"PostgreSQL {version}; {reminder_bench.PEOPLE} recipients of one escalating event")
        reminder_bench.seed(url, args.schedules)
        settings = Settings(database_url=url, feature_reminders=True)
        print(f"reminders ({args.schedules:,} idle schedules):")
        asyncio.run(reminder_bench.idle_ticks(settings, url, args.ticks))
        due = asyncio.run(escalating_event(url))
        for size in sizes:
            fill(url, size)
            print(f"escalation ({size:,} pending steps):")
            asyncio.run(ticks(settings, url, args.ticks, due))
    finally:
        drop_database(server, name)


if __name__ == "__main__":
    main()
