"""The scheduler's cost when idle, and how soon an occurrence reaches an inbox, beside send().

    .venv/bin/python bench/scheduler.py [--schedules 1000] [--occurrences 20] [--ticks 300]

Uses HERALD_BENCH_DATABASE_URL (any database on the server is fine: the bench creates and drops
its own), else the embedded PostgreSQL under .herald/bench. Prints:
  - idle tick: statements and milliseconds per scheduler tick with nothing due (leader and
    non-leader), over `--schedules` stored schedules that are not due;
  - occurrence latency: from an occurrence's instant to its event row, and to the first in-app
    delivery, with `herald scheduler` and `herald worker` running in this process at their
    default tick and poll intervals;
  - baseline: the ordinary send path in the same run, from send()'s event row to the first
    in-app delivery.
All instants are the database's clock (event and delivery `created_at`), so nothing depends on
two clocks agreeing. Never part of the test run's pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import psycopg
from sqlalchemy import event

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import create_database, drop_database  # noqa: E402

from herald.auth.service import Operator  # noqa: E402
from herald.config import Settings  # noqa: E402
from herald.db import embedded, migrate  # noqa: E402
from herald.db.engine import libpq_url, make_async_engine  # noqa: E402
from herald.kinds.sample import SAMPLE_REGISTRY  # noqa: E402
from herald.runtime.scheduler import run_scheduler  # noqa: E402
from herald.runtime.worker import run_worker  # noqa: E402
from herald.scheduling import worker as cycle  # noqa: E402
from herald.scheduling.reminders import service as reminders  # noqa: E402
from herald.sending.service import SendInput, asend  # noqa: E402

TENANT = "bench"
PEOPLE = 20


def seed(url: str, schedules: int) -> None:
    """PEOPLE people, and `schedules` enabled schedules whose next occurrence is hours away."""
    with psycopg.connect(libpq_url(url)) as conn:
        with conn.cursor().copy(
            "COPY person (tenant_id, external_id, full_name, email) FROM STDIN"
        ) as copy:
            for i in range(PEOPLE):
                copy.write_row((TENANT, f"p{i}", f"Person {i}", f"p{i}@example.com"))
        with conn.cursor().copy(
            "COPY reminder_schedule (tenant_id, name, kind, variables, audience, timezone, "
            "local_time, weekdays, next_run_at) FROM STDIN"
        ) as copy:
            later = datetime.now(UTC) + timedelta(hours=6)
            for i in range(schedules):
                copy.write_row(
                    (
                        TENANT,
                        f"idle {i}",
                        "reminder.notice",
                        '{"title": "t", "message": "m"}',
                        '{"kind": "users", "userIds": ["p0"]}',
                        "Asia/Kathmandu",
                        "07:30",
                        "{1,2,3,4,5}",
                        later + timedelta(seconds=i),
                    )
                )
        conn.execute("ANALYZE")
        conn.commit()


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"median {statistics.median(ordered):7.1f}  p95 {p95:7.1f}  max {ordered[-1]:7.1f} ms"


async def idle_ticks(settings: Settings, url: str, ticks: int) -> None:
    engine = make_async_engine(url, pool_size=2)
    statements = 0

    def count(*_: Any) -> None:
        nonlocal statements
        statements += 1

    event.listen(engine.sync_engine, "before_cursor_execute", count)
    try:
        for role, holder in (("leader", "bench-leader"), ("non-leader", "bench-other")):
            durations: list[float] = []
            statements = 0
            for _ in range(ticks):
                started = time.perf_counter()
                report = await cycle.run_tick(engine, SAMPLE_REGISTRY, settings, holder)
                durations.append((time.perf_counter() - started) * 1000)
                assert report.leader == (role == "leader") and report.fired == 0
            print(
                f"idle tick ({role:10}) {statements / ticks:.1f} statements/tick, "
                f"{summary(durations)}"
            )
        # Hand the lease back, as a stopping scheduler does, so the next part need not wait.
        await cycle.release(engine, "bench-leader")
    finally:
        await engine.dispose()


async def latencies(settings: Settings, url: str, occurrences: int) -> None:
    engine = make_async_engine(url, pool_size=5)
    system = Operator(TENANT, "system", "bench", None, frozenset(), True)
    people = [f"p{i}" for i in range(PEOPLE)]
    payload = {
        "kind": "reminder.notice",
        "variables": {"title": "Homework", "message": "Check the diary."},
        "channels": ["in_app"],
        "audience": {"kind": "users", "userIds": people},
        "timezone": "UTC",
        "localTime": (datetime.now(UTC) + timedelta(hours=12)).strftime("%H:%M"),
        "weekdays": [1, 2, 3, 4, 5, 6, 7],
    }
    stop = asyncio.Event()
    roles = [
        asyncio.create_task(
            run_worker(settings, engine, SAMPLE_REGISTRY, stop, channels=False, maintenance=False)
        ),
        asyncio.create_task(run_scheduler(settings, engine, SAMPLE_REGISTRY, stop)),
    ]
    try:
        await asyncio.sleep(1.0)  # both running and listening
        ids = []
        async with engine.begin() as conn:
            for n in range(occurrences):
                created = await reminders.create_reminder(
                    conn, system, SAMPLE_REGISTRY, {**payload, "name": f"due {n}"}
                )
                ids.append(created.id)
            # Occurrences spread over the next seconds, not in step with the tick.
            await conn.exec_driver_sql(
                "UPDATE reminder_schedule SET next_run_at = now() + interval '1 second' "
                "+ (row_number * interval '370 milliseconds') FROM (SELECT id AS sid, "
                "row_number() OVER (ORDER BY id) AS row_number FROM reminder_schedule "
                "WHERE public_id = ANY(%(ids)s)) numbered WHERE id = sid",
                {"ids": ids},
            )
            found = await conn.exec_driver_sql(
                "SELECT public_id, next_run_at FROM reminder_schedule WHERE public_id = ANY(%(ids)s)",
                {"ids": ids},
            )
            # exec_driver_sql's rows are untyped (a tuple of no columns to mypy).
            due: dict[Any, Any] = {row[0]: row[1] for row in cast(list[Any], found.all())}
        sent_ids = []
        for _ in range(occurrences):
            await asyncio.sleep(0.37)
            async with engine.begin() as conn:
                result = await asend(
                    conn,
                    SendInput(
                        tenant_id=TENANT,
                        kind="announcement.posted",
                        audience={"kind": "users", "userIds": people},
                        channels=["in_app"],
                        variables={"title": "Sports day", "message": str(uuid.uuid4())},
                    ),
                    registry=SAMPLE_REGISTRY,
                )
                assert result is not None
                sent_ids.append(result.id)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = await _first_deliveries(engine)
            if len(rows) >= 2 * occurrences:
                break
            await asyncio.sleep(0.2)
        rows = await _first_deliveries(engine)
        by_event = {row[0]: row for row in rows}
        to_event, to_delivery, send_to_delivery = [], [], []
        runs = await _runs(engine)
        for schedule_id, instant in due.items():
            event_id = runs[schedule_id]
            _, created_at, first_delivery = by_event[event_id]
            to_event.append((created_at - instant).total_seconds() * 1000)
            to_delivery.append((first_delivery - instant).total_seconds() * 1000)
        for event_id in sent_ids:
            _, created_at, first_delivery = by_event[event_id]
            send_to_delivery.append((first_delivery - created_at).total_seconds() * 1000)
        print(
            f"reminder  occurrence -> event row          ({occurrences} occurrences, tick "
            f"{settings.scheduler_tick_seconds:g} s): {summary(to_event)}"
        )
        print(
            f"reminder  occurrence -> first in-app delivery                 : "
            f"{summary(to_delivery)}"
        )
        event_to_delivery = [d - e for d, e in zip(to_delivery, to_event, strict=True)]
        print(
            f"reminder  event row -> first in-app delivery                  : "
            f"{summary(event_to_delivery)}"
        )
        print(
            f"baseline  send() event row -> first in-app delivery ({occurrences} sends)    : "
            f"{summary(send_to_delivery)}"
        )
    finally:
        stop.set()
        await asyncio.gather(*roles, return_exceptions=True)
        await engine.dispose()


async def _first_deliveries(engine: Any) -> list[tuple[Any, datetime, datetime]]:
    async with engine.connect() as conn:
        result = await conn.exec_driver_sql(
            "SELECT e.public_id, e.created_at, min(d.created_at) FROM notification_event e "
            "JOIN notification_delivery d ON d.event_id = e.id AND d.channel = 'in_app' "
            "WHERE e.tenant_id = %(tenant)s GROUP BY e.public_id, e.created_at",
            {"tenant": TENANT},
        )
        return [tuple(row) for row in result.all()]


async def _runs(engine: Any) -> dict[Any, Any]:
    async with engine.connect() as conn:
        result = await conn.exec_driver_sql(
            "SELECT s.public_id, r.event_public_id FROM reminder_run r "
            "JOIN reminder_schedule s ON s.id = r.schedule_id WHERE r.state = 'fired'"
        )
        return {row[0]: row[1] for row in result.all()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--occurrences", type=int, default=20)
    parser.add_argument("--ticks", type=int, default=300)
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
        print(f"PostgreSQL {version}; {args.schedules:,} idle schedules; {PEOPLE} recipients")
        seed(url, args.schedules)
        settings = Settings(database_url=url, feature_reminders=True)
        asyncio.run(idle_ticks(settings, url, args.ticks))
        asyncio.run(latencies(settings, url, args.occurrences))
    finally:
        drop_database(server, name)


if __name__ == "__main__":
    main()
