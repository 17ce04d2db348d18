"""One broadcast to N people over in_app + email (mock provider), released and delivered by real
`herald scheduler` and `herald worker` processes, beside a raw COPY of the same rows in the
same run.

    .venv/bin/python bench/broadcast.py [--people 1000000] [--batch 500] [--split [--senders N]]

Uses HERALD_BENCH_DATABASE_URL (the bench creates and drops its own database), else the embedded
PostgreSQL under .herald/bench. The broadcast is written approved (two different people) and due
a few seconds ahead, so both processes are up when the scheduler releases it. Prints:
  - baseline: COPY of N recipient rows and 2N delivery rows into the same tables;
  - broadcast: release → fan-out complete, and release → completed (every email recorded by the
    mock), each with its ratio to the COPY;
  - first in-app row: how long after the release (the frozen timestamp) the first inbox row exists;
  - CPU: user + system time of each process and of every PostgreSQL process over the run, and
    how many of the machine's two cores that kept busy; PostgreSQL's split by whom it served
    (each process's backends, the checkpointer, the WAL writer, …);
  - memory: peak RSS of the scheduler and of the worker, and the worker's RSS over the run.
Never part of the test run's pass/fail.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import create_database, drop_database  # noqa: E402

from bench.api import cpu_seconds, postgres_cpu_by_pid  # noqa: E402
from bench.fanout import TENANT, baseline_copy, seed_people  # noqa: E402
from herald.db import embedded, migrate  # noqa: E402
from herald.db.engine import libpq_url  # noqa: E402

RELEASE_DELAY_SECONDS = 4


def insert_broadcast(url: str) -> str:
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute(
            "INSERT INTO broadcast (tenant_id, title, kind, variables, channels, audience, "
            "scheduled_for, state, created_by, approved_by, approved_at) VALUES (%s, 'Bench', "
            '\'announcement.posted\', \'{"title": "Sports day moved", "message": "Friday"}\', '
            "ARRAY['in_app', 'email'], '{\"kind\": \"all_users\"}', "
            "now() + make_interval(secs => %s), 'approved', 'person:a', 'person:b', now()) "
            "RETURNING public_id",
            (TENANT, RELEASE_DELAY_SECONDS),
        ).fetchone()
        conn.commit()
    assert row is not None
    return str(row[0])


def progress(conn: psycopg.Connection[tuple[object, ...]], public_id: str) -> tuple[object, ...]:
    """state, frozen_at, fan-out completed at, completed at: two primary-key lookups, so that
    polling twice a second takes nothing measurable from the processes under test."""
    row = conn.execute(
        "SELECT b.state, b.audience_frozen_at, e.fanout_completed_at, b.completed_at "
        "FROM broadcast b LEFT JOIN notification_event e ON e.id = b.event_id "
        "WHERE b.public_id = %s",
        (public_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def first_in_app_row(conn: psycopg.Connection[tuple[object, ...]], public_id: str) -> object:
    """When the first inbox row was written: asked once, after the run. (Asked on every poll,
    as it was, it read every delivery of the event twice a second — a sixth of the database's
    busy samples while a 1,000,000-person broadcast drained.)"""
    row = conn.execute(
        "SELECT min(d.delivered_at) FROM broadcast b JOIN notification_delivery d "
        "ON d.event_id = b.event_id AND d.channel = 'in_app' WHERE b.public_id = %s",
        (public_id,),
    ).fetchone()
    assert row is not None
    return row[0]


BACKEND = re.compile(r"postgres: (?:\S+: )?\S+ \S+ (?:[^ (]+\((\d+)\)|\[local\])")


def database_cpu_by_whom(
    before: dict[int, float], after: dict[int, float], processes: dict[str, subprocess.Popen[bytes]]
) -> dict[str, float]:
    """PostgreSQL's CPU over the run, split by whom it served: each Herald process's backends (a
    backend's command line names its client's port, which one of the process's sockets holds), the
    server's own processes by their names (checkpointer, walwriter, …), and "other" for the
    bench's own connections and backends no process holds any more. Read before the processes
    stop, so that their sockets are still open."""
    port_to_role: dict[int, str] = {}
    for role, proc in processes.items():
        for connection in psutil.Process(proc.pid).net_connections(kind="tcp"):
            port_to_role[connection.laddr.port] = role
    spent: dict[str, float] = {}
    for pid, seconds in after.items():
        try:
            command = " ".join(psutil.Process(pid).cmdline())
        except psutil.Error:
            command = ""
        match = BACKEND.match(command)
        if match:
            # Over a Unix socket (the embedded server) a backend names no port.
            port = match.group(1)
            whom = port_to_role.get(int(port), "other") if port else "backends over a socket"
        elif command.startswith("postgres: "):
            whom = command.rsplit(": ", 1)[-1].strip() or "other"
        else:
            whom = "postmaster"
        spent[whom] = spent.get(whom, 0.0) + seconds - before.get(pid, 0.0)
    return {
        whom: seconds
        for whom, seconds in sorted(spent.items(), key=lambda item: -item[1])
        if seconds >= 0.05
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--people", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument(
        "--split",
        action="store_true",
        help="two worker processes: `herald worker --no-channels` (fan-out) and "
        "`herald worker --no-fanout` (senders), instead of one doing both",
    )
    parser.add_argument(
        "--senders",
        type=int,
        default=1,
        help="with --split: how many `herald worker --no-fanout` processes (default 1)",
    )
    args = parser.parse_args()

    server = os.environ.get("HERALD_BENCH_DATABASE_URL") or embedded.start(
        ROOT / ".herald" / "bench"
    )
    name = f"herald_bench_{uuid.uuid4().hex[:8]}"
    url = create_database(server, name)
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        migrate.upgrade(url)
        with psycopg.connect(libpq_url(url)) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        print(
            f"PostgreSQL {version}; {args.people:,} people; batch {args.batch}; "
            + (
                f"fan-out in one worker process, senders in {args.senders}"
                if args.split
                else "one worker"
            )
        )
        seed_people(url, args.people)
        copy_seconds, _ = baseline_copy(url, args.people)
        env = {
            **os.environ,
            "HERALD_DATABASE_URL": url,
            "HERALD_FEATURE_BROADCASTS": "true",
            "HERALD_EMAIL_PROVIDER": "mock",
            "HERALD_FANOUT_BATCH_SIZE": str(args.batch),
            "HERALD_SCHEDULER_TICK_SECONDS": "0.2",
            "HERALD_LOG_LEVEL": "WARNING",
        }
        herald = str(Path(sys.executable).with_name("herald"))
        commands = {"scheduler": ["scheduler"], "worker": ["worker"]}
        if args.split:
            commands = {"scheduler": ["scheduler"], "worker": ["worker", "--no-channels"]}
            for n in range(args.senders):
                commands["senders" if n == 0 else f"senders{n + 1}"] = ["worker", "--no-fanout"]
        for role, command in commands.items():
            processes[role] = subprocess.Popen(
                [herald, *command], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        database_before = postgres_cpu_by_pid()
        public_id = insert_broadcast(url)
        peaks = {role: 0.0 for role in processes}
        worker_rss: list[float] = []
        with psycopg.connect(libpq_url(url), autocommit=True) as watcher:
            while True:
                for role, proc in processes.items():
                    if proc.poll() is not None:
                        raise SystemExit(f"herald {role} exited with {proc.returncode}")
                    rss = psutil.Process(proc.pid).memory_info().rss / 2**20
                    peaks[role] = max(peaks[role], rss)
                    if role == "worker":
                        worker_rss.append(rss)
                state, frozen, fanned, completed = progress(watcher, public_id)
                if state == "completed":
                    spent = {role: cpu_seconds(proc.pid) for role, proc in processes.items()}
                    database_after = postgres_cpu_by_pid()
                    database_by_whom = database_cpu_by_whom(
                        database_before, database_after, processes
                    )
                    break
                time.sleep(0.5)
            first_row = first_in_app_row(watcher, public_id)
        assert frozen is not None and fanned is not None and completed is not None
        assert first_row is not None
        fan_seconds = (fanned - frozen).total_seconds()  # type: ignore[operator]
        total_seconds = (completed - frozen).total_seconds()  # type: ignore[operator]
        first_seconds = (first_row - frozen).total_seconds()  # type: ignore[operator]
        rows = args.people * 3
        print(
            f"baseline   COPY {rows:,} rows (recipients + 2 deliveries each): {copy_seconds:7.2f} s"
        )
        print(
            f"fan-out    release → fan-out complete:  {fan_seconds:7.2f} s "
            f"= {fan_seconds / copy_seconds:.2f}x the COPY"
        )
        print(
            f"broadcast  release → completed (emails recorded): {total_seconds:7.2f} s "
            f"= {total_seconds / copy_seconds:.2f}x the COPY (target <= 2.5x)"
        )
        print(
            f"first row  first in-app row {first_seconds:.2f} s after the release (target <= 2 s)"
        )
        database_cpu = sum(t - database_before.get(pid, 0.0) for pid, t in database_after.items())
        print(
            "CPU        over the run (user + system): "
            + ", ".join(f"{role} {seconds:.1f} s" for role, seconds in spent.items())
            + f", PostgreSQL {database_cpu:.1f} s; "
            f"{(sum(spent.values()) + database_cpu) / total_seconds:.2f} of {os.cpu_count()} cores "
            "busy over the broadcast"
        )
        print(
            "           PostgreSQL's by whom it served: "
            + ", ".join(f"{whom} {seconds:.1f} s" for whom, seconds in database_by_whom.items())
        )
        third = max(len(worker_rss) // 3, 1)
        print(
            f"memory     peak RSS: scheduler {peaks['scheduler']:.1f} MiB, "
            f"worker {peaks['worker']:.1f} MiB"
            + "".join(
                f", {role} {peak:.1f} MiB"
                for role, peak in peaks.items()
                if role.startswith("senders")
            )
            + "; worker max in first / last third "
            f"{max(worker_rss[:third]):.1f} / {max(worker_rss[-third:]):.1f} MiB"
        )
    finally:
        for proc in processes.values():
            proc.terminate()
        for proc in processes.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        drop_database(server, name)


if __name__ == "__main__":
    main()
