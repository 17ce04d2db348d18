"""Fan out one event to N people over in_app + email, beside a raw COPY of the same rows.

    .venv/bin/python bench/fanout.py [--people 100000 1000000] [--batch 500] [--workers 1 2]

Uses HERALD_BENCH_DATABASE_URL (any database on the server is fine: the bench creates and drops
its own), else the embedded PostgreSQL under .herald/bench. Prints:
  - baseline: the time to COPY N recipient rows, 2N delivery rows and the N queued ones' queue
    rows into the same tables;
  - fan-out: the time the real fan-out (audience pages, preferences, rendering, inserts, cursor)
    takes for the same rows, recipients/second, and the ratio to the baseline;
  - memory: RSS sampled after every batch (min / max / last, and the max of the first and the
    last third of the batches), so a leak shows as growth;
  - workers: the same rows as two events (two tenants of N/2 people each) fanned out by 1 and by
    2 worker processes, and the scaling factor. One event is fanned out by one worker at a time
    (its cursor is a sequence), so more workers help only with more events.
Never part of the test run's pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import create_database, drop_database  # noqa: E402

from herald.db import embedded, migrate  # noqa: E402
from herald.db.engine import libpq_url, make_async_engine  # noqa: E402
from herald.fanout import service as fanout  # noqa: E402
from herald.fanout.worker import fan_out_next_event  # noqa: E402
from herald.kinds.sample import SAMPLE_REGISTRY  # noqa: E402
from herald.sending.service import SendInput, asend  # noqa: E402

TENANT = "bench"


def seed_people(url: str, people: int, tenant: str = TENANT) -> None:
    with psycopg.connect(libpq_url(url)) as conn:
        with conn.cursor().copy(
            "COPY person (tenant_id, external_id, full_name, email, locale) FROM STDIN"
        ) as copy:
            for i in range(people):
                copy.write_row(
                    (
                        tenant,
                        f"p{i}",
                        f"Person {i}",
                        f"p{i}@example.com",
                        "ne" if i % 5 == 0 else "en",
                    )
                )
        conn.execute("ANALYZE person")


def backend_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) a PostgreSQL backend has used, when the server runs on this
    machine and its processes are readable; else None. Unlike wall time, it hardly depends on
    what else the machine is doing."""
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.Error, OSError):
        return None
    return float(times.user + times.system)


def cpu_delta(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def baseline_copy(url: str, people: int) -> tuple[float, float | None]:
    """COPY N recipients and 2N deliveries for one event into the real tables; return seconds
    and the backend's CPU seconds."""
    with psycopg.connect(libpq_url(url)) as conn:
        event_id, occurred_at = conn.execute(
            "INSERT INTO notification_event (tenant_id, kind, category, priority, audience, channels, "
            "variables, dedupe_key) VALUES (%s, 'announcement.posted', 'announcement', 'normal', "
            "'{\"kind\":\"all_users\"}', ARRAY['in_app','email'], '{}', %s) RETURNING id, occurred_at",
            (TENANT, uuid.uuid4().hex * 2),
        ).fetchone()  # type: ignore[misc]
        person_rows = conn.execute(
            "SELECT id, public_id, full_name FROM person WHERE tenant_id = %s ORDER BY id",
            (TENANT,),
        ).fetchall()
        conn.commit()

        cpu_before = backend_cpu(conn.info.backend_pid)
        started = time.perf_counter()
        with conn.cursor().copy(
            "COPY notification_recipient (tenant_id, event_id, user_id, user_public_id_snapshot, "
            "variables, locale, occurred_at) FROM STDIN"
        ) as copy:
            for pid, public_id, name in person_rows:
                copy.write_row(
                    (
                        TENANT,
                        event_id,
                        pid,
                        public_id,
                        json.dumps({"name": name}),
                        "en",
                        occurred_at,
                    )
                )
        recipient_ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM notification_recipient WHERE event_id = %s", (event_id,)
            )
        ]
        with conn.cursor().copy(
            "COPY notification_delivery (tenant_id, event_id, recipient_id, channel, status, "
            "delivered_at, rendered_title, rendered_body, occurred_at) FROM STDIN"
        ) as copy:
            for rid in recipient_ids:
                copy.write_row(
                    (
                        TENANT,
                        event_id,
                        rid,
                        "in_app",
                        "delivered",
                        "2026-11-30T00:00:00Z",
                        "Sports day moved",
                        "It is now on Friday.",
                        occurred_at,
                    )
                )
                copy.write_row(
                    (TENANT, event_id, rid, "email", "queued", None, None, None, occurred_at)
                )
        # The queued rows' queue rows (herald.db.queue), which the fan-out writes in its statement.
        queued_ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM notification_delivery WHERE event_id = %s AND channel = 'email'",
                (event_id,),
            )
        ]
        with conn.cursor().copy(
            "COPY notification_delivery_queue (delivery_id, tenant_id, channel, occurred_at) "
            "FROM STDIN"
        ) as copy:
            for did in queued_ids:
                copy.write_row((did, TENANT, "email", occurred_at))
        conn.commit()
        elapsed = time.perf_counter() - started
        cpu = cpu_delta(cpu_before, backend_cpu(conn.info.backend_pid))
        # Leave the tables as the fan-out will find them: empty.
        conn.execute(
            "TRUNCATE broadcast, notification_delivery_attempt, notification_delivery, "
            "notification_delivery_queue, notification_recipient, notification_event"
        )
        conn.commit()
    return elapsed, cpu


@dataclass
class FanoutRun:
    seconds: float
    recipients: int
    rss: list[float]
    server_cpu: float | None  # the one backend's CPU seconds
    client_cpu: float  # this process's CPU seconds


async def real_fanout(url: str, batch: int) -> FanoutRun:
    # One pooled connection, so one backend does all the work and its CPU can be read.
    engine = make_async_engine(url, pool_size=1)
    process = psutil.Process()
    rss: list[float] = []
    async with engine.begin() as conn:
        await asend(
            conn,
            SendInput(
                tenant_id=TENANT,
                kind="announcement.posted",
                audience={"kind": "all_users"},
                channels=["in_app", "email"],
                variables={"title": "Sports day moved", "message": "It is now on Friday."},
            ),
            registry=SAMPLE_REGISTRY,
        )
    async with engine.connect() as conn:
        pid = (await conn.exec_driver_sql("SELECT pg_backend_pid()")).scalar_one()
    cpu_before, client_before = backend_cpu(pid), process.cpu_times()
    started = time.perf_counter()
    token = uuid.uuid4()
    async with engine.begin() as conn:
        event = await fanout.claim_next_event(conn, token, tenant_id=TENANT)
    assert event is not None
    while True:
        async with engine.begin() as conn:
            outcome = await fanout.fan_out_batch(
                conn, event, token, registry=SAMPLE_REGISTRY, batch_size=batch
            )
        rss.append(process.memory_info().rss / 2**20)
        if outcome.completed:
            break
    elapsed = time.perf_counter() - started
    client_after = process.cpu_times()
    async with engine.connect() as conn:
        same = (await conn.exec_driver_sql("SELECT pg_backend_pid()")).scalar_one() == pid
    server = cpu_delta(cpu_before, backend_cpu(pid)) if same else None
    await engine.dispose()
    assert outcome.recipient_count is not None
    client = (client_after.user + client_after.system) - (client_before.user + client_before.system)
    return FanoutRun(elapsed, outcome.recipient_count, rss, server, client)


async def record_event(url: str, tenant: str) -> None:
    engine = make_async_engine(url, pool_size=1)
    async with engine.begin() as conn:
        await asend(
            conn,
            SendInput(
                tenant_id=tenant,
                kind="announcement.posted",
                audience={"kind": "all_users"},
                channels=["in_app", "email"],
                variables={"title": "Sports day moved", "message": "It is now on Friday."},
            ),
            registry=SAMPLE_REGISTRY,
        )
    await engine.dispose()


def worker_process(url: str, batch: int) -> None:
    """One fan-out worker process: fan out due events until none is left."""

    async def run() -> None:
        engine = make_async_engine(url, pool_size=2)
        while await fan_out_next_event(engine, SAMPLE_REGISTRY, batch_size=batch):
            pass
        await engine.dispose()

    asyncio.run(run())


def with_workers(server: str, people: int, batch: int, workers: int) -> float:
    """Seconds for `workers` processes to fan out two events of people/2 each (two tenants)."""
    name = f"herald_bench_{uuid.uuid4().hex[:8]}"
    url = create_database(server, name)
    try:
        migrate.upgrade(url)
        tenants = [f"{TENANT}-{n}" for n in range(2)]
        for tenant in tenants:
            seed_people(url, people // 2, tenant)
            asyncio.run(record_event(url, tenant))
        context = multiprocessing.get_context("spawn")
        started = time.perf_counter()
        processes = [
            context.Process(target=worker_process, args=(url, batch)) for _ in range(workers)
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join()
            assert process.exitcode == 0, process.exitcode
        elapsed = time.perf_counter() - started
        with psycopg.connect(libpq_url(url)) as conn:
            done = conn.execute(
                "SELECT count(*) FROM notification_event WHERE fanout_completed_at IS NOT NULL"
            ).fetchone()
        assert done is not None and done[0] == len(tenants), done
        return elapsed
    finally:
        drop_database(server, name)


def empty_tables(url: str) -> None:
    with psycopg.connect(libpq_url(url)) as conn:
        conn.execute(
            "TRUNCATE broadcast, notification_delivery_attempt, notification_delivery, "
            "notification_delivery_queue, notification_recipient, notification_event"
        )


def one_size(server: str, people: int, batch: int, repeat: int) -> None:
    name = f"herald_bench_{uuid.uuid4().hex[:8]}"
    url = create_database(server, name)
    try:
        migrate.upgrade(url)
        with psycopg.connect(libpq_url(url)) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        print(f"PostgreSQL {version}; {people:,} people; batch {batch}")
        seed_people(url, people)
        # Alternate the two, `repeat` times each, and compare the fastest of each: on a shared
        # machine the minimum is the run least disturbed by others.
        copies: list[float] = []
        fans: list[float] = []
        copy_cpus: list[float] = []
        fan_cpus: list[float] = []
        client_cpus: list[float] = []
        for _ in range(repeat):
            copy_run, copy_cpu = baseline_copy(url, people)
            copies.append(copy_run)
            run = asyncio.run(real_fanout(url, batch))
            assert run.recipients == people, run.recipients
            fans.append(run.seconds)
            client_cpus.append(run.client_cpu)
            if copy_cpu is not None and run.server_cpu is not None:
                copy_cpus.append(copy_cpu)
                fan_cpus.append(run.server_cpu)
            empty_tables(url)
        copy_seconds, fan_seconds = min(copies), min(fans)
        recipients, rss = run.recipients, run.rss
        if repeat > 1:
            print(
                "runs      COPY "
                + " ".join(f"{t:.2f}" for t in copies)
                + " s; fan-out "
                + " ".join(f"{t:.2f}" for t in fans)
                + " s (the fastest of each below)"
            )
        rows = people * 4
        print(
            f"baseline  COPY {rows:,} rows (recipients + 2 deliveries + the email's queue row each): "
            f"{copy_seconds:6.2f} s"
        )
        print(
            f"fan-out   {recipients:,} recipients over in_app + email:        {fan_seconds:6.2f} s "
            f"= {recipients / fan_seconds:,.0f} recipients/s"
        )
        print(f"ratio     fan-out / COPY = {fan_seconds / copy_seconds:.2f}x (target <= 2x)")
        if copy_cpus:
            print(
                f"server    backend CPU: COPY {min(copy_cpus):.2f} s, fan-out {min(fan_cpus):.2f} s "
                f"= {min(fan_cpus) / min(copy_cpus):.2f}x; fan-out process CPU "
                f"{min(client_cpus):.2f} s"
            )
        third = max(len(rss) // 3, 1)
        print(
            f"memory    RSS per batch ({len(rss)} batches): min {min(rss):.1f} MiB, "
            f"max {max(rss):.1f} MiB, last {rss[-1]:.1f} MiB; max in first / last third "
            f"{max(rss[:third]):.1f} / {max(rss[-third:]):.1f} MiB"
        )
    finally:
        drop_database(server, name)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--people", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=1, help="alternate COPY and fan-out runs")
    parser.add_argument(
        "--workers",
        type=int,
        nargs="*",
        default=[1, 2],
        help="worker process counts to compare (none: skip the comparison)",
    )
    args = parser.parse_args()

    server = os.environ.get("HERALD_BENCH_DATABASE_URL") or embedded.start(
        ROOT / ".herald" / "bench"
    )
    for people in args.people:
        one_size(server, people, args.batch, args.repeat)
        timings = {n: with_workers(server, people, args.batch, n) for n in args.workers}
        for n, seconds in timings.items():
            print(
                f"workers   {n} process(es), two events of {people // 2:,}: {seconds:6.2f} s "
                f"= {people / seconds:,.0f} recipients/s"
            )
        if 1 in timings and len(timings) > 1:
            most = max(timings)
            print(
                f"scaling   {most} processes / 1 = {timings[1] / timings[most]:.2f}x "
                f"(on {os.cpu_count()} cores, shared with PostgreSQL)"
            )


if __name__ == "__main__":
    main()
