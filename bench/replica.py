"""Inbox reads from a streaming standby (HERALD_DATABASE_READ_URL), beside the same reads on the
primary alone, and read-your-writes violations counted.

    .venv/bin/python bench/replica.py [--rows 200000] [--people 2000] [--clients 1,16]
        [--processes 2] [--requests 3000] [--warmup 1000] [--write-share 0.1]
        [--redis-url redis://127.0.0.1:6379/0]

Builds a primary and its standby of the bench's own on this machine (tests/replica_cluster.py:
initdb with wal_level=replica, `pg_basebackup -R`, free ports; fsync off, as a bench's scratch
cluster), loads ROWS delivered in-app rows over PEOPLE people server-side (30 % read), VACUUM
ANALYZE, and waits for the standby to replay the load. Then twice, with the same load:

- baseline: PROCESSES `herald api` processes on the primary alone (Redis for the rate limits);
- standby: the same processes with HERALD_DATABASE_READ_URL on the standby.

CLIENTS clients (each count of the list in turn), each with one keep-alive connection to every
API process, send REQUESTS requests: the inbox list and the unread count of a random person (the p50/p99 printed), and a
WRITE_SHARE of read-your-writes checks — a person marks the newest unread item of their first
page read through one process, then reads their unread list through the next process at once;
the item still listed there is a violation (counted, and the figure is 0 or something is wrong).
The standby's share of the reads is its transactions over the run (pg_stat_database) beside the
primary's. Figures, never pass/fail; the cluster is removed after the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.harness import free_port  # noqa: E402
from tests.replica_cluster import ReplicaCluster, missing_reason, query  # noqa: E402

from bench import _harness, api  # noqa: E402
from herald.auth.service import sign_token  # noqa: E402
from herald.config import Settings  # noqa: E402
from herald.db import migrate  # noqa: E402

TENANT = api.BENCH_TENANT
INBOX = api.INBOX
DATABASE = "herald"


@dataclass
class Load:
    reads: list[float] = field(default_factory=list)
    checks: int = 0
    violations: int = 0
    seconds: float = 0.0

    def pct(self, p: float) -> float:
        ordered = sorted(self.reads)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else 0.0


async def run_load(
    ports: list[int], tokens: list[str], args: argparse.Namespace, record: bool, seed: int
) -> Load:
    load = Load()
    rng = random.Random(seed)
    # Every client owns its own writers (no two clients mark the same person's items).
    per_client = max(len(tokens) // args.clients, 1)
    conns = [[await api.Connection.open(port) for port in ports] for _ in range(args.clients)]
    counter = iter(range(args.requests if record else args.warmup))

    async def client(n: int) -> None:
        mine = conns[n]
        writers = tokens[n * per_client : (n + 1) * per_client] or tokens[:1]
        turn = 0
        for _ in counter:
            turn += 1
            if rng.random() < args.write_share:
                token = rng.choice(writers)
                first, second = mine[turn % len(mine)], mine[(turn + 1) % len(mine)]
                status, body = await first.request("GET", f"{INBOX}?unreadOnly=true", token)
                items = json.loads(body)["items"] if status == 200 else []
                if not items:
                    continue
                target = items[0]["id"]
                status, _ = await first.request("POST", f"{INBOX}/{target}/read", token)
                if status != 200:
                    raise RuntimeError(f"mark read: {status}")
                status, body = await second.request("GET", f"{INBOX}?unreadOnly=true", token)
                if status != 200:
                    raise RuntimeError(f"unread list: {status}")
                load.checks += 1
                if any(item["id"] == target for item in json.loads(body)["items"]):
                    load.violations += 1
                continue
            token = rng.choice(tokens)
            path = INBOX if turn % 2 else f"{INBOX}/unread-count"
            conn = mine[turn % len(mine)]
            started = time.perf_counter()
            status, body = await conn.request("GET", path, token)
            if record:
                load.reads.append((time.perf_counter() - started) * 1000)
            if status != 200:
                raise RuntimeError(f"GET {path}: {status} {body[:200]!r}")

    started = time.perf_counter()
    await asyncio.gather(*(client(n) for n in range(args.clients)))
    load.seconds = time.perf_counter() - started
    for row in conns:
        for conn in row:
            conn.close()
    return load


def commits(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (DATABASE,)
        ).fetchone()
    return int(row[0]) if row else 0


def measure(
    cluster: ReplicaCluster,
    label: str,
    environment: dict[str, str],
    clients: int,
    tokens: list[str],
    secret: str,
    args: argparse.Namespace,
    logs: Path,
) -> str:
    procs: list[subprocess.Popen[bytes]] = []
    ports = []
    try:
        for n in range(args.processes):
            port = free_port()
            procs.append(
                _harness.start_api(
                    cluster.primary_url(DATABASE),
                    secret,
                    port,
                    logs / f"{label}-{n}.log",
                    {
                        "HERALD_RATE_LIMIT_PER_PERSON": api.PERSON_LIMIT,
                        "HERALD_LOG_LEVEL": "WARNING",
                        "HERALD_REDIS_URL": args.redis_url,
                        **environment,
                    },
                )
            )
            ports.append(port)
        args = argparse.Namespace(**{**vars(args), "clients": clients})
        asyncio.run(run_load(ports, tokens, args, record=False, seed=1))
        before = commits(cluster.standby_url(DATABASE)), commits(cluster.primary_url(DATABASE))
        load = asyncio.run(run_load(ports, tokens, args, record=True, seed=2))
        after = commits(cluster.standby_url(DATABASE)), commits(cluster.primary_url(DATABASE))
    finally:
        for proc in procs:
            _harness.stop_process(proc)
    on_standby, on_primary = after[0] - before[0], after[1] - before[1]
    return (
        f"{label:28} {clients:3} clients  reads p50 {load.pct(50):6.2f} ms  p99 {load.pct(99):6.2f} ms  "
        f"{len(load.reads) / load.seconds:6.0f} reads/s  read-your-writes checks {load.checks}, "
        f"violations {load.violations}  transactions: standby {on_standby}, primary {on_primary}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000, help="delivered in-app rows in all")
    parser.add_argument("--people", type=int, default=2_000)
    parser.add_argument(
        "--clients",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[16],
        help="client counts, comma-separated: each is measured on both setups (e.g. 1,16)",
    )
    parser.add_argument("--processes", type=int, default=2, help="API processes")
    parser.add_argument("--requests", type=int, default=3_000)
    parser.add_argument("--warmup", type=int, default=1_000)
    parser.add_argument("--write-share", type=float, default=0.1)
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("HERALD_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
        help="Redis for the fences (and the rate limits, in both runs)",
    )
    args = parser.parse_args()
    reason = missing_reason()
    if reason is not None:
        raise SystemExit(f"bench/replica.py cannot build a primary and a standby here: {reason}")
    started = time.perf_counter()
    with ReplicaCluster.create() as cluster, tempfile.TemporaryDirectory() as logs:
        query(cluster.primary_url(), f"CREATE DATABASE {DATABASE}")
        url = cluster.primary_url(DATABASE)
        migrate.upgrade(url)
        with psycopg.connect(url) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
            subjects = _harness.seed_people(conn, TENANT, args.people)
            per_person = max(-(-args.rows // args.people), 1)
            rows = api.seed_inbox(conn, TENANT, per_person=per_person, heavy=[], heavy_rows=0)
        api.vacuum(url)
        cluster.wait_caught_up()
        secret = secrets.token_urlsafe(32)
        settings = Settings(database_url=url, jwt_secret=secret)
        tokens = [sign_token(settings, tenant_id=TENANT, subject=s) for s in subjects]
        print(
            f"PostgreSQL {version}, a primary and its streaming standby on this machine; "
            f"{rows:,} inbox rows over {args.people:,} people ({per_person} each), "
            f"{args.processes} API processes, {args.requests} requests "
            f"({args.write_share:.0%} read-your-writes checks); loaded in "
            f"{time.perf_counter() - started:.0f} s"
        )
        standby = {
            "HERALD_DATABASE_READ_URL": cluster.standby_url(DATABASE),
            "HERALD_READ_MAX_LAG_SECONDS": "5",
        }
        for clients in args.clients:
            for label, environment in (
                ("baseline: primary only", {}),
                ("reads on the standby", standby),
            ):
                print(
                    measure(cluster, label, environment, clients, tokens, secret, args, Path(logs)),
                    flush=True,
                )


if __name__ == "__main__":
    main()
