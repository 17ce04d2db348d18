"""Herald through PgBouncer in transaction mode against Herald straight on PostgreSQL, in one run:
the inbox list over HTTP and herald.send() in a host transaction.

    .venv/bin/python bench/pgbouncer.py [--requests 400] [--warmup 300] [--sends 2000]
        [--rounds 3] [--server-connections 10]

A real PgBouncer (Debian's /usr/sbin/pgbouncer, started here with an ini file of its own on a
free port, pool_mode = transaction, `--server-connections` per database and user; tests/
pgbouncer.py) in front of the bench's database. Each side runs as it is deployed:

- inbox: two `herald api` processes on the demo school's inboxes (`--demo-rows` each), one with
  HERALD_DATABASE_URL straight to PostgreSQL, one with it through PgBouncer and
  HERALD_DATABASE_SESSION_URL straight (its realtime LISTEN); the pooled one prepares no
  statement (herald.db.pooler), the direct one prepares as psycopg does. One client each, GET
  /v1/me/notifications, `--rounds` rounds taking turns, `--requests` measured a round after
  `--warmup` not measured.
- send(): `herald.send(tx, …)` in the host's own SQLAlchemy transaction (begin … commit), on a
  direct engine and on an engine through PgBouncer with `prepare_threshold=None` (what a host
  sets there), call by call in turn.

Prints p50/p99 of each side and the ratio pooled / direct (target: p50 within 1.2x for both).
Uses --database-url or HERALD_BENCH_DATABASE_URL, else the embedded PostgreSQL under
.herald/bench (PgBouncer reaches its Unix socket). Never part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from sqlalchemy import create_engine  # noqa: E402
from tests.e2e.harness import free_port  # noqa: E402
from tests.pgbouncer import pgbouncer_missing, run_pgbouncer  # noqa: E402

from bench import _harness  # noqa: E402
from bench import api as api_bench  # noqa: E402
from bench import send as send_bench  # noqa: E402
from herald.db import migrate  # noqa: E402
from herald.db.engine import libpq_url, sqlalchemy_url  # noqa: E402

TARGET = 1.2


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _line(label: str, direct: list[float], pooled: list[float]) -> list[str]:
    ratio = _pct(pooled, 0.5) / _pct(direct, 0.5)
    return [
        f"{label}:",
        f"  direct            p50 {_pct(direct, 0.5):6.3f} ms  p99 {_pct(direct, 0.99):6.3f} ms"
        f"  ({len(direct)} samples)",
        f"  through PgBouncer p50 {_pct(pooled, 0.5):6.3f} ms  p99 {_pct(pooled, 0.99):6.3f} ms"
        f"  ({len(pooled)} samples)",
        f"  pooled / direct: p50 {ratio:.2f}x  p99 {_pct(pooled, 0.99) / _pct(direct, 0.99):.2f}x"
        f"  (target: p50 <= {TARGET}x) {'ok' if ratio <= TARGET else 'OVER'}",
    ]


async def inbox_rounds(
    ports: dict[str, int], pids: dict[str, int], tokens: list[str], args: argparse.Namespace
) -> dict[str, list[float]]:
    def listing(n: int) -> tuple[str, str, str | None]:
        return ("GET", api_bench.INBOX, tokens[n % len(tokens)])

    latencies: dict[str, list[float]] = {side: [] for side in ports}
    for _ in range(args.rounds):
        for side, port in ports.items():
            api_bench.SERVER_PID[:] = [pids[side]]
            figures = await api_bench.drive(
                port, listing, clients=1, requests=args.requests, warmup=args.warmup
            )
            latencies[side].extend(figures.latencies_ms)
    return latencies


def send_turns(
    direct_url: str, pooled_url: str, args: argparse.Namespace
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """send() timed alone inside the host's open transaction (after a statement of the host's
    own, as a host sends with its own writes), and with the transaction's begin and commit."""
    engines = {
        "direct": create_engine(sqlalchemy_url(direct_url), pool_size=1),
        # A host's own engine through PgBouncer 1.18: psycopg must not prepare there.
        # Direct, but preparing nothing: splits what PgBouncer costs (its hop) from what not
        # preparing costs (the statement parsed and planned on every call).
        "direct, unprepared": create_engine(
            sqlalchemy_url(direct_url), pool_size=1, connect_args={"prepare_threshold": None}
        ),
        "pooled": create_engine(
            sqlalchemy_url(pooled_url), pool_size=1, connect_args={"prepare_threshold": None}
        ),
    }
    alone: dict[str, list[float]] = {side: [] for side in engines}
    whole: dict[str, list[float]] = {side: [] for side in engines}
    try:
        for i in range(args.warmup + args.sends):
            for side, engine in engines.items():
                began = time.perf_counter()
                with engine.begin() as tx:
                    tx.exec_driver_sql("SELECT 1")  # the host's own work: BEGIN is behind us
                    started = time.perf_counter()
                    send_bench.herald_send(tx, 3 * i + list(engines).index(side))
                    ended = time.perf_counter()
                if i >= args.warmup:
                    alone[side].append((ended - started) * 1000)
                    whole[side].append((time.perf_counter() - began) * 1000)
    finally:
        for engine in engines.values():
            engine.dispose()
    return alone, whole


def pgbouncer_version() -> str:
    from tests.pgbouncer import PGBOUNCER

    out = subprocess.run([PGBOUNCER, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0] if out.stdout else "PgBouncer"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", default=os.environ.get("HERALD_BENCH_DATABASE_URL"))
    parser.add_argument("--requests", type=int, default=400, help="measured, a round and side")
    parser.add_argument("--warmup", type=int, default=300, help="not measured, before each")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sends", type=int, default=2000, help="send() calls a side")
    parser.add_argument("--demo-rows", type=int, default=30, help="in-app rows per demo person")
    parser.add_argument("--server-connections", type=int, default=10)
    args = parser.parse_args()
    missing = pgbouncer_missing()
    if missing:
        sys.exit(f"cannot run: {missing}")

    bench = _harness.BenchDatabase.create(args.database_url, "herald_bench_pgb")
    url, secret, settings = bench.url, bench.secret, bench.settings
    procs = []
    try:
        migrate.upgrade(url)
        tenant, subjects = api_bench.demo_directory(url)
        with psycopg.connect(libpq_url(url)) as conn:
            rows = api_bench.seed_inbox(
                conn, tenant, per_person=args.demo_rows, heavy=(), heavy_rows=args.demo_rows
            )
            conn.commit()
        api_bench.vacuum(url)
        with run_pgbouncer(
            bench.server, pool_mode="transaction", pool_size=args.server_connections
        ) as bouncer:
            pooled_url = bouncer.url_for(url)
            print(
                f"PostgreSQL {bench.server_version()}, {pgbouncer_version()} in transaction mode with "
                f"{args.server_connections} server connections; {rows:,} in-app rows for "
                f"{len(subjects)} people"
            )
            logs = Path(tempfile.gettempdir())
            ports = {"direct": free_port(), "pooled": free_port()}
            environments = {
                "direct": (url, {}),
                "pooled": (pooled_url, {"HERALD_DATABASE_SESSION_URL": url}),
            }
            pids = {}
            for side, (side_url, extra) in environments.items():
                environment = {"HERALD_RATE_LIMIT_PER_PERSON": "off", **extra}
                proc = _harness.start_api(
                    side_url, secret, ports[side], logs / f"{bench.name}-{side}.log", environment
                )
                procs.append(proc)
                pids[side] = proc.pid
            tokens = api_bench.tokens_for(settings, tenant, subjects)
            inbox = asyncio.run(inbox_rounds(ports, pids, tokens, args))
            alone, whole = send_turns(url, pooled_url, args)
        print(
            "\n".join(
                _line(
                    f"GET {api_bench.INBOX}, one client, {args.rounds} rounds in turn",
                    inbox["direct"],
                    inbox["pooled"],
                )
                + _line(
                    "herald.send() alone, in the host's transaction",
                    alone["direct"],
                    alone["pooled"],
                )
                + _line(
                    "herald.send() with the host's transaction (SELECT 1, send, commit)",
                    whole["direct"],
                    whole["pooled"],
                )
            )
        )
        split = _pct(alone["direct, unprepared"], 0.5)
        print(
            f"send() alone, direct but unprepared: p50 {split:6.3f} ms "
            f"({split / _pct(alone['direct'], 0.5):.2f}x direct: the cost of preparing nothing; "
            f"the rest of the pooled figure is PgBouncer's hop)"
        )
        print(f"(machine load average {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores)")
    finally:
        for proc in procs:
            _harness.stop_process(proc)
        bench.drop()


if __name__ == "__main__":
    main()
