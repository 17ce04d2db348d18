"""Fan out one event to N people over in_app + email, beside a raw COPY of the same rows.

    .venv/bin/python bench/fanout.py [--people 100000] [--batch 500]

Uses HERALD_BENCH_DATABASE_URL (any database on the server is fine: the bench creates and drops
its own), else the embedded PostgreSQL under .herald/bench. Prints:
  - baseline: the time to COPY N recipient rows and 2N delivery rows into the same tables;
  - fan-out: the time the real fan-out (audience pages, preferences, rendering, inserts, cursor)
    takes for the same rows, recipients/second, and the ratio to the baseline;
  - memory: RSS sampled after every batch (min / max / last), so a leak shows as growth.
Never part of the test run's pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path

import psutil
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import create_database, drop_database  # noqa: E402

from herald.db import embedded, migrate  # noqa: E402
from herald.db.engine import libpq_url, make_async_engine  # noqa: E402
from herald.fanout import service as fanout  # noqa: E402
from herald.kinds.sample import SAMPLE_REGISTRY  # noqa: E402
from herald.sending.service import SendInput, asend  # noqa: E402

TENANT = "bench"


def seed_people(url: str, people: int) -> None:
    with psycopg.connect(libpq_url(url)) as conn:
        with conn.cursor().copy(
            "COPY person (tenant_id, external_id, full_name, email, locale) FROM STDIN"
        ) as copy:
            for i in range(people):
                copy.write_row(
                    (
                        TENANT,
                        f"p{i}",
                        f"Person {i}",
                        f"p{i}@example.com",
                        "ne" if i % 5 == 0 else "en",
                    )
                )
        conn.execute("ANALYZE person")


def baseline_copy(url: str, people: int) -> float:
    """COPY N recipients and 2N deliveries for one event into the real tables; return seconds."""
    with psycopg.connect(libpq_url(url)) as conn:
        event_id = conn.execute(
            "INSERT INTO notification_event (tenant_id, kind, category, priority, audience, channels, "
            "variables, dedupe_key) VALUES (%s, 'announcement.posted', 'announcement', 'normal', "
            "'{\"kind\":\"all_users\"}', ARRAY['in_app','email'], '{}', %s) RETURNING id",
            (TENANT, uuid.uuid4().hex * 2),
        ).fetchone()[0]  # type: ignore[index]
        person_rows = conn.execute(
            "SELECT id, public_id, full_name FROM person WHERE tenant_id = %s ORDER BY id",
            (TENANT,),
        ).fetchall()
        conn.commit()

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
                        "2026-11-30T00:00:00Z",
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
            "delivered_at, rendered_title, rendered_body) FROM STDIN"
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
                    )
                )
                copy.write_row((TENANT, event_id, rid, "email", "queued", None, None, None))
        conn.commit()
        elapsed = time.perf_counter() - started
        # Leave the tables as the fan-out will find them: empty.
        conn.execute(
            "TRUNCATE broadcast, notification_delivery_attempt, notification_delivery, notification_recipient, "
            "notification_event"
        )
        conn.commit()
    return elapsed


async def real_fanout(url: str, batch: int) -> tuple[float, int, list[float]]:
    engine = make_async_engine(url, pool_size=2)
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
    await engine.dispose()
    assert outcome.recipient_count is not None
    return elapsed, outcome.recipient_count, rss


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--people", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=500)
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
        print(f"PostgreSQL {version}; {args.people:,} people; batch {args.batch}")
        seed_people(url, args.people)
        copy_seconds = baseline_copy(url, args.people)
        fan_seconds, recipients, rss = asyncio.run(real_fanout(url, args.batch))
        assert recipients == args.people, recipients
        rows = args.people * 3
        print(
            f"baseline  COPY {rows:,} rows (recipients + 2 deliveries each): {copy_seconds:6.2f} s"
        )
        print(
            f"fan-out   {recipients:,} recipients over in_app + email:        {fan_seconds:6.2f} s "
            f"= {recipients / fan_seconds:,.0f} recipients/s"
        )
        print(f"ratio     fan-out / COPY = {fan_seconds / copy_seconds:.2f}x (target <= 4x)")
        print(
            f"memory    RSS per batch: min {min(rss):.1f} MiB, max {max(rss):.1f} MiB, last {rss[-1]:.1f} MiB"
        )
    finally:
        drop_database(server, name)


if __name__ == "__main__":
    main()
