"""The cost of herald.send() in a host transaction, beside a bare insert measured in the same run.

    .venv/bin/python bench/send.py [--sends 5000] [--warmup 300]

1. Herald: `herald.send(tx, SendInput(...))` inside the host's own SQLAlchemy transaction — the
   checks, the dedupe key, the event upsert and the transactional wake-up.
2. Bare: the same transaction shape with an INSERT of a similar notification_event row (same
   columns, precomputed values, no ON CONFLICT) plus `SELECT pg_notify(...)`, as text statements
   on the same engine.

The two alternate call by call so that load on the machine falls on both alike. Each call is
timed alone (inside the open transaction) and with its transaction (begin … commit); p50 and p99
of each are printed with the ratio. Targets: send() p50 ≤ 1 ms and ≤ 2× the bare insert.

Uses HERALD_BENCH_DATABASE_URL (a server; the bench creates and drops its own database), else the
embedded PostgreSQL under .herald/bench. Never part of the test run's pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import Connection, text  # noqa: E402
from tests.conftest import create_database, drop_database  # noqa: E402

import herald  # noqa: E402
from herald import SendInput  # noqa: E402
from herald.db import embedded, migrate  # noqa: E402
from herald.db.engine import make_sync_engine  # noqa: E402
from herald.kinds.sample import SAMPLE_REGISTRY  # noqa: E402

TENANT = "bench"

BARE_INSERT = text(
    "INSERT INTO notification_event (tenant_id, kind, category, priority, audience, channels, "
    "variables, action_url, dedupe_key) VALUES (:tenant_id, :kind, 'announcement', 'normal', "
    "CAST(:audience AS jsonb), CAST(:channels AS text[]), CAST(:variables AS jsonb), :action_url, "
    ":dedupe_key) RETURNING public_id"
)
BARE_WAKE = text("SELECT pg_notify('herald_fanout', '')")


def _input(i: int) -> SendInput:
    return SendInput(
        tenant_id=TENANT,
        kind="announcement.posted",
        audience={"kind": "guardians_of_group", "groupIds": ["class-7a"]},
        channels=["in_app", "email"],
        variables={"title": f"Sports day moved {i}", "message": "It is now on Friday."},
        action_url=f"/announcements/{i}",
    )


def herald_send(tx: Connection, i: int) -> None:
    result = herald.send(tx, _input(i), registry=SAMPLE_REGISTRY)
    assert result is not None and result.created


def bare_send(tx: Connection, i: int) -> None:
    tx.execute(
        BARE_INSERT,
        {
            "tenant_id": TENANT,
            "kind": "announcement.posted",
            "audience": json.dumps({"kind": "guardians_of_group", "groupIds": ["class-7a"]}),
            "channels": ["in_app", "email"],
            "variables": json.dumps(
                {"title": f"Sports day moved {i}", "message": "It is now on Friday."}
            ),
            "action_url": f"/announcements/{i}",
            "dedupe_key": uuid.uuid4().hex * 2,
        },
    ).one()
    tx.execute(BARE_WAKE)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sends", type=int, default=5_000)
    parser.add_argument("--warmup", type=int, default=300)
    args = parser.parse_args()

    server = os.environ.get("HERALD_BENCH_DATABASE_URL") or embedded.start(
        ROOT / ".herald" / "bench"
    )
    name = f"herald_bench_{uuid.uuid4().hex[:8]}"
    url = create_database(server, name)
    engine = make_sync_engine(url, pool_size=1)
    try:
        migrate.upgrade(url)
        with engine.connect() as conn:
            version = conn.execute(text("SHOW server_version")).scalar_one()
        print(f"PostgreSQL {version}; {args.sends:,} sends each, alternating, after a warm-up")
        calls = {"herald": herald_send, "bare": bare_send}
        inside: dict[str, list[float]] = {k: [] for k in calls}
        whole: dict[str, list[float]] = {k: [] for k in calls}
        cpu: dict[str, float] = dict.fromkeys(calls, 0.0)
        for i in range(args.warmup + args.sends):
            for label, call in calls.items():
                began = time.perf_counter()
                with engine.begin() as tx:
                    started, cpu_started = time.perf_counter(), time.process_time()
                    call(tx, i)
                    ended, cpu_ended = time.perf_counter(), time.process_time()
                committed = time.perf_counter()
                if i >= args.warmup:
                    inside[label].append(ended - started)
                    whole[label].append(committed - began)
                    cpu[label] += cpu_ended - cpu_started
        for title, samples in (("the call alone", inside), ("with its transaction", whole)):
            h, b = samples["herald"], samples["bare"]
            print(f"{title}:")
            for label, s in (("herald.send()", h), ("bare insert+notify", b)):
                print(
                    f"  {label:20} p50 {_pct(s, 0.5):6.3f} ms  p99 {_pct(s, 0.99):6.3f} ms  "
                    f"mean {statistics.fmean(s) * 1000:6.3f} ms"
                )
            print(
                f"  herald / bare: p50 {_pct(h, 0.5) / _pct(b, 0.5):.2f}x  "
                f"p99 {_pct(h, 0.99) / _pct(b, 0.99):.2f}x  (target: p50 <= 1 ms and <= 2x)"
            )
        print(
            "client CPU per call (load-independent): "
            + ", ".join(f"{k} {v / args.sends * 1e6:.0f} us" for k, v in cpu.items())
        )
    finally:
        engine.dispose()
        drop_database(server, name)


if __name__ == "__main__":
    main()
