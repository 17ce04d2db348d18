"""Retention on a seeded database: bounded bottom-up statements beside one cascading DELETE.

    .venv/bin/python bench/retention.py [--deliveries 1000000] [--batch 1000] [--explain]

Seeds (COPY) a school's worth of history: 3,000 people; "all_users" events of 3,000 recipients ×
4 deliveries (in_app, email, sms, push) and small events of 10 recipients × 2 deliveries, about
72% / 28% of N delivery rows; two thirds of the events aged past the 180-day window, the rest
fresh; attempt rows under the sms and email sends; among the aged events some hold a queued,
processing or failed delivery, some a delivery named by an unreplayed dead letter (those must
survive whole), some a replayed one (those must go); plus replayed and operational dead letters,
push tokens and feed rows. The seeded database is then copied (CREATE DATABASE … TEMPLATE) so both
runs start from identical data.

Prints:
  - Herald: the real retention sweep run to completion (every level, `retention_batch_size`
    rows per statement, each statement its own transaction): total time, statements, rows
    deleted per level, and each level's slowest and median statement — the longest any lock is
    held; then one more pass over the emptied tables (the cost of an idle tick);
  - baseline: on the copy, with the two event foreign keys switched to ON DELETE CASCADE, one
    unbounded `DELETE FROM notification_event WHERE <aged and safe>`: its duration is the time
    every deleted row stays locked;
  - a check that nothing in flight or awaiting replay was deleted and nothing aged and finished
    was left.
Uses HERALD_BENCH_DATABASE_URL (a server; the bench creates and drops its own databases), else the
embedded PostgreSQL under .herald/bench. Never part of the test run's pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import create_database, drop_database  # noqa: E402

from herald.config import Settings  # noqa: E402
from herald.db import embedded, migrate, partitions  # noqa: E402
from herald.db.engine import libpq_url, make_async_engine  # noqa: E402
from herald.maintenance import queries, retention  # noqa: E402

TENANT = "bench"
PEOPLE = 3_000
BIG_DELIVERIES = PEOPLE * 4
SMALL_RECIPIENTS = 10
SMALL_DELIVERIES = SMALL_RECIPIENTS * 2
RETENTION_DAYS = 180
NOW = datetime.now(UTC)


def ts(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


@dataclass
class Seeded:
    events: int = 0
    recipients: int = 0
    deliveries: int = 0
    attempts: int = 0
    aged_events: int = 0
    in_flight_events: set[int] = field(default_factory=set)
    dead_lettered_events: set[int] = field(default_factory=set)
    replayed_events: set[int] = field(default_factory=set)
    # (event id, delivery id) of each delivery a dead letter must name.
    letter_targets: list[tuple[int, int, bool]] = field(default_factory=list)


def create_months(url: str) -> int:
    """The month partitions a Herald running through the seeded history would have: the
    maintenance tick creates each month ahead of it. Returns how many months."""
    from sqlalchemy import create_engine, pool

    from herald.db.engine import sqlalchemy_url

    first = partitions.Month.of(NOW - timedelta(days=RETENTION_DAYS + 201))
    months = partitions.months_from(first, 0)
    while months[-1] < partitions.Month.of(NOW):
        months.append(months[-1].next())
    engine = create_engine(sqlalchemy_url(url), poolclass=pool.NullPool)
    with engine.begin() as conn:
        partitions.ensure(conn, months)
    engine.dispose()
    return len(months)


def aged_before(url: str) -> datetime:
    """Where retention's row-by-row deletes stop (partitions.Layout.aged_before)."""
    with psycopg.connect(libpq_url(url)) as conn:
        cutoff = conn.execute(
            "SELECT now() - make_interval(days => %s)", (RETENTION_DAYS,)
        ).fetchone()[0]  # type: ignore[index]
        month = partitions.Month.of(cutoff)
        exists = conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL",
            (partitions.name(partitions.RECIPIENT, month.suffix),),
        ).fetchone()[0]  # type: ignore[index]
    return month.start if exists else cutoff


def seed(url: str, deliveries: int) -> Seeded:
    big = max(1, round(deliveries * 0.72 / BIG_DELIVERIES))
    small = max(0, (deliveries - big * BIG_DELIVERIES) // SMALL_DELIVERIES)
    out = Seeded()
    with psycopg.connect(libpq_url(url)) as conn:
        with conn.cursor().copy(
            "COPY person (id, tenant_id, external_id, full_name, email, phone) FROM STDIN"
        ) as copy:
            for i in range(1, PEOPLE + 1):
                copy.write_row(
                    (i, TENANT, f"p{i}", f"Person {i}", f"p{i}@example.com", f"+97798{i:08d}")
                )
        people = conn.execute("SELECT id, public_id FROM person ORDER BY id").fetchall()

        event_rows: list[tuple[object, ...]] = []
        recipient_rows: list[tuple[object, ...]] = []
        delivery_rows: list[tuple[object, ...]] = []
        attempt_rows: list[tuple[object, ...]] = []
        next_recipient = next_delivery = 1

        def add_event(
            event_id: int, aged: bool, audience_size: int, channels: tuple[str, ...], day: int
        ) -> tuple[int, int]:
            """One finished event with its recipients and deliveries; returns the id range of its
            deliveries. `day` spreads occurred_at over the window (or past it)."""
            nonlocal next_recipient, next_delivery
            age = timedelta(days=(RETENTION_DAYS + 1 + day % 200) if aged else (1 + day % 150))
            occurred = NOW - age
            event_rows.append(
                (
                    event_id,
                    TENANT,
                    "announcement.posted",
                    "announcement",
                    "normal",
                    '{"kind": "all_users"}',
                    "{" + ",".join(channels) + "}",
                    uuid.uuid4().hex * 2,
                    ts(occurred),
                    ts(occurred),
                    ts(occurred),
                    str(uuid.uuid4()),
                    ts(occurred + timedelta(seconds=30)),
                    audience_size,
                )
            )
            first_delivery = next_delivery
            start = (event_id * 7) % PEOPLE
            for k in range(audience_size):
                pid, public_id = people[(start + k) % PEOPLE]
                rid = next_recipient
                next_recipient += 1
                recipient_rows.append(
                    (
                        rid,
                        TENANT,
                        event_id,
                        pid,
                        str(public_id),
                        f'{{"name": "Person {pid}"}}',
                        "en",
                        ts(occurred),
                    )
                )
                for channel in channels:
                    did = next_delivery
                    next_delivery += 1
                    sent = occurred + timedelta(seconds=60)
                    # status, attempts, sent_at, delivered_at, skipped_at, failed_at, dead_at
                    row: tuple[str, int, str | None, str | None, str | None, None, None]
                    if channel == "in_app":
                        row = ("delivered", 0, None, ts(sent), None, None, None)
                    elif channel == "push":
                        row = ("skipped_preference", 0, None, None, ts(sent), None, None)
                    else:
                        row = ("sent", 1, ts(sent), None, None, None, None)
                        attempt_rows.append((TENANT, did, "sent", 1, None, ts(occurred)))
                    status, attempts, sent_at, delivered_at, skipped_at, failed_at, dead_at = row
                    delivery_rows.append(
                        (
                            did,
                            TENANT,
                            rid,
                            event_id,
                            channel,
                            status,
                            attempts,
                            ts(occurred),
                            sent_at,
                            delivered_at,
                            skipped_at,
                            failed_at,
                            dead_at,
                            "p●●●@example.com" if channel == "email" else None,
                            "Sports day moved" if channel in ("in_app", "email") else None,
                            "It is now on Friday." if channel in ("in_app", "email") else None,
                            ts(occurred),  # the partition key: the recipient's (event's) month
                        )
                    )
            return first_delivery, next_delivery - 1

        event_id = 0
        ranges: dict[int, tuple[int, int]] = {}
        aged_ids: list[tuple[int, bool]] = []  # (event id, is big)
        for i in range(big):
            event_id += 1
            aged = i % 3 != 0
            ranges[event_id] = add_event(
                event_id, aged, PEOPLE, ("in_app", "email", "sms", "push"), i
            )
            if aged:
                aged_ids.append((event_id, True))
        for i in range(small):
            event_id += 1
            aged = i % 3 != 0
            ranges[event_id] = add_event(event_id, aged, SMALL_RECIPIENTS, ("in_app", "email"), i)
            if aged:
                aged_ids.append((event_id, False))

        # Make some aged events unsafe to delete: a delivery still in flight, or named by an
        # unreplayed dead letter; and some safe again: their dead letter was replayed.
        in_flight_status = ["queued", "processing", "failed"]
        deltas: dict[int, str] = {}
        for n, (eid, is_big) in enumerate(aged_ids):
            slot = n % 40 if not is_big else n % 6
            first, last = ranges[eid]
            target = first + 1 + (n % 7) % max(1, last - first)  # an email delivery, mostly
            if slot == 1:
                out.in_flight_events.add(eid)
                deltas[target] = in_flight_status[n % 3]
            elif slot == 2:
                out.dead_lettered_events.add(eid)
                deltas[target] = "dead"
                out.letter_targets.append((eid, target, False))
            elif slot == 3:
                out.replayed_events.add(eid)
                deltas[target] = "dead"
                out.letter_targets.append((eid, target, True))
        claimed: list[int] = []
        for did, status in deltas.items():
            # Delivery ids were handed out from 1 in order, so row i holds id i + 1.
            base = list(delivery_rows[did - 1])
            assert base[0] == did
            base[5] = status
            base[8] = base[9] = base[10] = base[11] = base[12] = None  # sent_at … dead_at
            if status == "failed":
                base[11] = ts(NOW)
            elif status == "dead":
                base[11] = base[12] = ts(NOW)
            elif status == "processing":  # queued, its queue row claimed (herald.db.queue)
                base[5] = "queued"
                claimed.append(did)
            delivery_rows[did - 1] = tuple(base)

        with conn.cursor().copy(
            "COPY notification_event (id, tenant_id, kind, category, priority, audience, channels, "
            "dedupe_key, occurred_at, created_at, fanout_claimed_at, fanout_claim_token, "
            "fanout_completed_at, recipient_count) FROM STDIN"
        ) as copy:
            for row in event_rows:
                copy.write_row(row)
        with conn.cursor().copy(
            "COPY notification_recipient (id, tenant_id, event_id, user_id, "
            "user_public_id_snapshot, variables, locale, occurred_at) FROM STDIN"
        ) as copy:
            for row in recipient_rows:
                copy.write_row(row)
        with conn.cursor().copy(
            "COPY notification_delivery (id, tenant_id, recipient_id, event_id, channel, status, "
            "attempts, queued_at, sent_at, delivered_at, skipped_at, failed_at, dead_at, "
            "destination_hint, rendered_title, rendered_body, occurred_at) FROM STDIN"
        ) as copy:
            for row in delivery_rows:
                copy.write_row(row)
        conn.execute(
            "INSERT INTO notification_delivery_queue (delivery_id, tenant_id, channel, "
            "occurred_at, next_attempt_at, claimed_at, lease_expires_at) "
            "SELECT id, tenant_id, channel, occurred_at, next_attempt_at, "
            "CASE WHEN id = ANY(%(claimed)s) THEN now() END, "
            "CASE WHEN id = ANY(%(claimed)s) THEN now() + interval '1 minute' END "
            "FROM notification_delivery WHERE status = 'queued'",
            {"claimed": claimed},
        )
        with conn.cursor().copy(
            "COPY notification_delivery_attempt (tenant_id, delivery_id, outcome, attempt_number, "
            "error_code, occurred_at) FROM STDIN"
        ) as copy:
            for row in attempt_rows:
                copy.write_row(row)
        for table in (
            "person",
            "notification_event",
            "notification_recipient",
            "notification_delivery",
        ):
            conn.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))"
            )

        # Dead letters: the ones that protect (or no longer protect) an aged event, plus a
        # realistic crowd of replayed and operational-email ones the sweep must read past.
        for _eid, did, replayed in out.letter_targets:
            conn.execute(
                "INSERT INTO dead_letter (tenant_id, queue_name, job_name, job_id, payload_ref, "
                "attempts, last_error, replayed_at, replayed_by) "
                "SELECT %s, 'notification.' || channel, 'channel_send', public_id::text, "
                "jsonb_build_object('notificationDeliveryPublicId', public_id::text, 'channel', channel), "
                "5, 'EMAIL_TRANSPORT', %s, %s FROM notification_delivery WHERE id = %s",
                (TENANT, NOW if replayed else None, "person:ops" if replayed else None, did),
            )
        conn.execute(
            "INSERT INTO dead_letter (tenant_id, queue_name, job_name, job_id, payload_ref, attempts, "
            "last_error, replayed_at, replayed_by) "
            "SELECT %s, 'notification.email', 'channel_send', gen_random_uuid()::text, "
            "jsonb_build_object('notificationDeliveryPublicId', gen_random_uuid()::text, 'channel', 'email'), "
            "5, 'EMAIL_TRANSPORT', now(), 'person:ops' FROM generate_series(1, 5000)",
            (TENANT,),
        )
        conn.execute(
            "INSERT INTO dead_letter (tenant_id, queue_name, job_name, job_id, payload_ref, attempts, "
            "last_error) SELECT %s, 'notification.operational', 'operational_email', "
            "gen_random_uuid()::text, jsonb_build_object('eventType', 'delivery.dead'), 5, "
            "'EMAIL_TRANSPORT' FROM generate_series(1, 500)",
            (TENANT,),
        )
        conn.execute(
            "INSERT INTO notification_push_token (tenant_id, person_id, token, platform, is_active, "
            "invalidated_at, invalidation_reason) "
            "SELECT %s, 1 + g %% 3000, 'tok-' || g, 'android', false, "
            "now() - make_interval(days => g %% 90), 'replaced' FROM generate_series(1, 20000) g",
            (TENANT,),
        )
        conn.execute(
            "INSERT INTO feed_notification (tenant_id, kind, title, permission_code, occurred_at) "
            "SELECT %s, 'delivery.dead', 'A delivery died', 'NotificationFailure_READ', "
            "now() - make_interval(days => g %% 200) FROM generate_series(1, 20000) g",
            (TENANT,),
        )
        conn.commit()
        out.events = len(event_rows)
        out.recipients = len(recipient_rows)
        out.deliveries = len(delivery_rows)
        out.attempts = len(attempt_rows)
        out.aged_events = len(aged_ids)
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return out


@dataclass
class Level:
    statements: int = 0
    rows: int = 0
    seconds: list[float] = field(default_factory=list)


async def sweep(url: str, batch: int) -> tuple[float, dict[str, Level]]:
    engine = make_async_engine(url, pool_size=2)
    settings = Settings(database_url=url, retention_days=RETENTION_DAYS, retention_batch_size=batch)
    levels: dict[str, Level] = defaultdict(Level)

    def on_statement(level: str, rows: int, seconds: float) -> None:
        entry = levels[level]
        entry.statements += 1
        entry.rows += rows
        entry.seconds.append(seconds)

    started = time.perf_counter()
    report = await retention.run_retention(
        engine, settings, max_batches=None, on_statement=on_statement
    )
    elapsed = time.perf_counter() - started
    await engine.dispose()
    if report.months_dropped:
        print(
            f"  months dropped whole: {', '.join(report.months_dropped)} "
            f"({report.kept_events} kept events moved to the default partition)"
        )
    return elapsed, dict(levels)


def explain(url: str, batch: int) -> None:
    sql = (
        str(queries.windowed("delete_aged_deliveries", queries.PARENTS))
        .replace("CAST(:after AS timestamptz)", "'-infinity'::timestamptz")
        .replace("CAST(:before AS timestamptz)", f"now() - interval '{RETENTION_DAYS} days'")
        .replace(":limit", str(batch))
        .replace("CAST(:in_flight AS text[])", "ARRAY['queued','processing','failed']")
        .replace(":uuid_pattern", f"'{queries.UUID_PATTERN}'")
    )
    with psycopg.connect(libpq_url(url)) as conn:
        plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}").fetchall()
        conn.rollback()
    print("EXPLAIN ANALYZE delete_aged_deliveries (rolled back):")
    for (line,) in plan:
        print("   ", line)


def baseline_cascade(url: str, seeded: Seeded) -> tuple[float, int, int]:
    """One unbounded DELETE of every aged, safe event, the children going by ON DELETE CASCADE:
    the lock every deleted row holds lasts as long as this statement. Returns (seconds, events,
    deliveries deleted)."""
    with psycopg.connect(libpq_url(url)) as conn:
        # The deliveries and attempts of a month follow their recipients by the months' own
        # keys (ON DELETE CASCADE); the event keys become cascading here.
        for table in ("notification_recipient", "notification_delivery"):
            conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT {table}_event_id_fkey")
            conn.execute(
                f"ALTER TABLE {table} ADD CONSTRAINT {table}_event_id_fkey FOREIGN KEY (event_id) "
                "REFERENCES notification_event (id) ON DELETE CASCADE"
            )
        conn.commit()
        before = conn.execute("SELECT count(*) FROM notification_delivery").fetchone()[0]  # type: ignore[index]
        started = time.perf_counter()
        deleted = conn.execute(
            """
            DELETE FROM notification_event e
             WHERE e.occurred_at < now() - make_interval(days => %s)
               AND (e.fanout_completed_at IS NOT NULL OR e.cancelled_at IS NOT NULL)
               AND NOT EXISTS (SELECT 1 FROM notification_delivery f
                                WHERE f.event_id = e.id
                                  AND f.status IN ('queued', 'processing', 'failed'))
               AND e.id NOT IN (
                    SELECT x.event_id FROM notification_delivery x
                     WHERE x.public_id IN (
                           SELECT CAST(dl.payload_ref ->> 'notificationDeliveryPublicId' AS uuid)
                             FROM dead_letter dl
                            WHERE dl.replayed_at IS NULL
                              AND (dl.payload_ref ->> 'notificationDeliveryPublicId') IS NOT NULL))
            """,
            (RETENTION_DAYS,),
        ).rowcount
        conn.commit()
        elapsed = time.perf_counter() - started
        after = conn.execute("SELECT count(*) FROM notification_delivery").fetchone()[0]  # type: ignore[index]
    return elapsed, deleted, before - after


def verify(url: str, seeded: Seeded) -> list[str]:
    problems: list[str] = []
    with psycopg.connect(libpq_url(url)) as conn:
        kept = seeded.in_flight_events | seeded.dead_lettered_events
        rows = conn.execute(
            "SELECT e.id, (SELECT count(*) FROM notification_recipient r WHERE r.event_id = e.id), "
            "(SELECT count(*) FROM notification_delivery d WHERE d.event_id = e.id), e.recipient_count "
            "FROM notification_event e WHERE e.id = ANY(%s)",
            (sorted(kept),),
        ).fetchall()
        if len(rows) != len(kept):
            problems.append(f"{len(kept) - len(rows)} protected events were deleted")
        for eid, recipients, deliveries, expected in rows:
            channels = 4 if expected == PEOPLE else 2
            if recipients != expected or deliveries != expected * channels:
                problems.append(f"protected event {eid} lost children")
        in_flight = conn.execute(
            "SELECT count(*) FROM notification_delivery "
            "WHERE status IN ('queued', 'processing', 'failed')"
        ).fetchone()[0]  # type: ignore[index]
        if in_flight != len(seeded.in_flight_events):
            problems.append(
                f"in-flight deliveries: {in_flight}, seeded {len(seeded.in_flight_events)}"
            )
        # Aged: before the cutoff, or before its month's start when that month is a partition
        # (dropped whole once it has all aged; its rows wait for it).
        aged_left = conn.execute(
            "SELECT count(*) FROM notification_event WHERE occurred_at < %s AND NOT (id = ANY(%s))",
            (aged_before(url), sorted(kept)),
        ).fetchone()[0]  # type: ignore[index]
        if aged_left:
            problems.append(f"{aged_left} aged, finished, unprotected events were left")
        replayed_left = conn.execute(
            "SELECT count(*) FROM notification_event WHERE id = ANY(%s)",
            (sorted(seeded.replayed_events),),
        ).fetchone()[0]  # type: ignore[index]
        if replayed_left:
            problems.append(f"{replayed_left} events whose dead letter was replayed were left")
        letters = conn.execute("SELECT count(*) FROM dead_letter").fetchone()[0]  # type: ignore[index]
        if letters != len(seeded.letter_targets) + 5500:
            problems.append("dead letters were deleted")
    return problems


def level_line(name: str, level: Level) -> str:
    ms = sorted(x * 1000 for x in level.seconds)
    p95 = ms[min(len(ms) - 1, int(len(ms) * 0.95))]
    return (
        f"  {name:<19} {level.rows:>9,} rows in {level.statements:>5,} statements; "
        f"max {ms[-1]:7.1f} ms (#{level.seconds.index(max(level.seconds)) + 1}), "
        f"p95 {p95:6.1f}, median {statistics.median(ms):6.1f} ms; total {sum(ms) / 1000:6.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--deliveries", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--explain", action="store_true", help="print the level-1 plan first")
    parser.add_argument(
        "--no-months",
        action="store_true",
        help="seed without month partitions (every row in the default partition: the bounded "
        "deletes alone, as before partitioning)",
    )
    args = parser.parse_args()

    server = os.environ.get("HERALD_BENCH_DATABASE_URL") or embedded.start(
        ROOT / ".herald" / "bench"
    )
    name = f"herald_bench_{uuid.uuid4().hex[:8]}"
    copy_name = f"{name}_copy"
    url = create_database(server, name)
    try:
        migrate.upgrade(url)
        with psycopg.connect(libpq_url(url)) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        months = 0 if args.no_months else create_months(url)
        started = time.perf_counter()
        seeded = seed(url, args.deliveries)
        seed_seconds = time.perf_counter() - started
        with psycopg.connect(libpq_url(server), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{copy_name}" TEMPLATE "{name}"')
        copy_url = url.replace(f"/{name}", f"/{copy_name}")
        print(
            f"PostgreSQL {version}; {months} month partitions; "
            f"seeded in {seed_seconds:.1f} s: {seeded.events:,} events "
            f"({seeded.aged_events:,} aged), {seeded.recipients:,} recipients, "
            f"{seeded.deliveries:,} deliveries, {seeded.attempts:,} attempts; aged events kept by "
            f"an in-flight delivery: {len(seeded.in_flight_events)}, by an unreplayed dead letter: "
            f"{len(seeded.dead_lettered_events)}; replayed (deletable): {len(seeded.replayed_events)}"
        )
        if args.explain:
            explain(url, args.batch)

        total, levels = asyncio.run(sweep(url, args.batch))
        print(f"Herald retention, batch {args.batch}, to completion: {total:.2f} s")
        for level_name, level in levels.items():
            print(level_line(level_name, level))
        slowest = max(max(level.seconds) for level in levels.values())
        print(f"  largest single statement: {slowest * 1000:.1f} ms")
        idle_total, idle_levels = asyncio.run(sweep(url, args.batch))
        idle_slowest = max(max(level.seconds) for level in idle_levels.values())
        print(
            f"  idle pass (nothing left to delete): {idle_total * 1000:.1f} ms, slowest statement "
            f"{idle_slowest * 1000:.1f} ms"
        )
        problems = verify(url, seeded)
        print(
            "  check: "
            + (
                "nothing protected deleted, nothing aged left"
                if not problems
                else "; ".join(problems)
            )
        )

        seconds, events, deliveries = baseline_cascade(copy_url, seeded)
        print(
            f"baseline: one cascading DELETE of the same aged events: {seconds * 1000:.1f} ms "
            f"({events:,} events, {deliveries:,} deliveries) in a single statement"
        )
        print(f"ratio: baseline statement / largest Herald statement = {seconds / slowest:.0f}x")
    finally:
        drop_database(server, copy_name)
        drop_database(server, name)


if __name__ == "__main__":
    main()
