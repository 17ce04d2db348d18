"""A/B of the API's own cost between two revisions: two `herald api` processes, one per revision
(each from a git worktree of its own), side by side on one database (the demo school's, or with
`--large` bench/api.py --large's, whose heavy people are driven), in alternating rounds,
reporting the API process's CPU per request (and p50/p99) for each.

    .venv/bin/python bench/api_ab.py BASE [HEAD] [--rounds 4] [--requests 1600]
        [--concurrency 16] [--paths list,unread,healthz] [--person-limit 1000/second]
        [--redis-url redis://…]

BASE and HEAD are git revisions (HEAD defaults to HEAD); pass the same revision twice for an
A/A run, which says how far apart two identical processes measure on this machine today.

CPU per request is the figure to compare: on a noisy machine latencies move with everything
else, while the process's own CPU moves much less. Both worktrees are made the same way (both
under one temporary directory), so nothing but the revision differs between the two. Uses
HERALD_BENCH_DATABASE_URL or --database-url (the bench creates and drops its own database), else
the embedded PostgreSQL under .herald/bench. Never part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.harness import free_port  # noqa: E402

from bench import _harness  # noqa: E402
from bench import api as B  # noqa: E402
from herald.db import migrate  # noqa: E402
from herald.db.engine import libpq_url  # noqa: E402


def worktree(parent: Path, label: str, revision: str) -> Path:
    path = parent / label
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), revision],
        check=True,
    )
    return path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("base")
    parser.add_argument("head", nargs="?", default="HEAD")
    parser.add_argument("--database-url", default=os.environ.get("HERALD_BENCH_DATABASE_URL"))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=1600)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--paths", default="list,unread,healthz")
    parser.add_argument("--warmup", type=int, default=2000, help="see bench/api.py's drive")
    parser.add_argument(
        "--large", action="store_true", help="bench/api.py --large's database (heavy people)"
    )
    B.add_limit_arguments(parser)
    parser.add_argument("--people", type=int, default=200_000)
    parser.add_argument("--rows", type=int, default=5_100_000)
    parser.add_argument("--heavy", type=int, default=20)
    parser.add_argument("--heavy-rows", type=int, default=5_000)
    args = parser.parse_args()

    bench = _harness.BenchDatabase.create(args.database_url, "herald_ab")
    url, secret = bench.url, bench.secret
    parent = Path(tempfile.mkdtemp(prefix="herald-ab-"))
    trees = {"A": worktree(parent, "a", args.base), "B": worktree(parent, "b", args.head)}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        migrate.upgrade(url)
        with psycopg.connect(libpq_url(url)) as conn:
            if args.large:
                tenant = B.BENCH_TENANT
                rows, subjects = B.seed_large(conn, args)
            else:
                tenant, subjects = B.demo_directory(url)
                rows = B.seed_inbox(conn, tenant, per_person=30, heavy=(), heavy_rows=30)
            conn.commit()
        B.vacuum(url)
        tokens = B.tokens_for(bench.settings, tenant, subjects)
        ports = {}
        for label, tree in trees.items():
            os.environ["PYTHONPATH"] = str(tree / "src")
            ports[label] = free_port()
            procs[label] = B.start_api(
                url,
                secret,
                ports[label],
                parent / f"{label}.log",
                person_limit=args.person_limit,
                redis_url=args.redis_url,
                log_level=args.log_level,
            )
        os.environ.pop("PYTHONPATH")
        picks: dict[str, B.Pick] = {
            "list": lambda n: ("GET", B.INBOX, tokens[n % len(tokens)]),
            "unread": lambda n: ("GET", f"{B.INBOX}/unread-count", tokens[n % len(tokens)]),
            "healthz": lambda n: ("GET", "/healthz", None),
        }
        paths = args.paths.split(",")
        print(
            f"A = {args.base}, B = {args.head}; {args.concurrency} clients; "
            f"{rows:,} in-app rows, {len(subjects)} people driven"
        )
        runs: dict[tuple[str, str], list[Any]] = {}
        for round_ in range(args.rounds):
            for path in paths:
                for label in ("A", "B") if round_ % 2 == 0 else ("B", "A"):
                    B.SERVER_PID[:] = [procs[label].pid]
                    figures = asyncio.run(
                        B.drive(
                            ports[label],
                            picks[path],
                            clients=args.concurrency,
                            requests=args.requests,
                            warmup=args.warmup,
                        )
                    )
                    runs.setdefault((path, label), []).append(figures)
        for path in paths:
            for label in ("A", "B"):
                cpus = sorted(f.server_cpu * 1000 / len(f.latencies_ms) for f in runs[path, label])
                p50s = [round(f.pct(50), 1) for f in runs[path, label]]
                p99s = [round(f.pct(99), 1) for f in runs[path, label]]
                median = cpus[len(cpus) // 2]
                print(
                    f"{path:8} {label}: API CPU median {median:.3f} ms/req "
                    f"(each {[round(c, 3) for c in cpus]}), p50 {p50s} ms, p99 {p99s} ms"
                )
        print(f"(machine load average {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores)")
    finally:
        for proc in procs.values():
            _harness.stop_process(proc)
        bench.drop()
        for tree in trees.values():
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False
            )


if __name__ == "__main__":
    main()
