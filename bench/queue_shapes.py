"""What a queue table beside the delivery record would buy, as measured before it was built.

Kept as the design's record: it migrates to 0025, the schema before notification_delivery_queue
(0026), and compares the shapes there; bench/delivery.py measures the built queue.

    .venv/bin/python bench/queue_shapes.py [--deliveries 50000] [--rounds 3] [--batch 100]

docs/scaling.md ("The narrow queue table") designs a queue table beside notification_delivery and reckons its
gain from index entries. This bench measures it, on Herald's own migrated schema (partitioned by
month, every index and constraint as deployed), in one run, SQL only (no Herald Python, so the
figures are PostgreSQL's share of a delivery alone), for three ways of writing one remote
delivery's life — queued by the fan-out, claimed, its outcome recorded:

- `today`: the delivery row is queued, claimed (queued → processing) and ended (→ sent) in
  place: Herald's claim statement as delivery/queries.sql has it, and the recorder's update
  (the same SET list and lease check) with its attempt row.
- `queue`: that design. The delivery row is written `queued` plus a narrow queue row (primary key, one
  due index); the claim updates only the queue row (its next_attempt_at moves past the lease, so
  an abandoned claim comes due again by itself); the outcome deletes the queue row under the
  lease check, ends the delivery row (queued → sent) and writes the attempt row. The delivery
  table's three queue indexes (due, lease, failed-due) are dropped for this shape.
- `deferred`: the fan-out writes only the queue row (with a unique key per recipient and
  channel, the delivery row's exactly-once rule); the outcome writes the delivery row once, in
  its final state, beside the attempt row. Every reader of a queued delivery would read the
  queue table: the most invasive shape, measured for what it is worth.

Each round writes `--deliveries` email deliveries for as many recipients in fan-out batches of 500
(`INSERT … SELECT`), then drains them with claims of `--batch` and one outcome statement per claim,
on one connection, prepared and under their generic plans as the worker runs them. Printed per
shape: the fan-out's and the drain's PostgreSQL CPU per delivery (the backend's user + system time)
and the drain's rows/s, beside the anchor claim loop (../shared/anchors/claim_loop.py) over as many
rows in the same run. The shapes alternate round by round. Uses HERALD_BENCH_DATABASE_URL (a
server; the bench creates and drops its own database), else the embedded PostgreSQL under
.herald/bench. Never part of the test run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import history  # noqa: E402
from tests.conftest import create_database, drop_database  # noqa: E402

from herald.db import embedded, migrate, partitions  # noqa: E402
from herald.db.engine import libpq_url  # noqa: E402

TENANT = "bench"
FANOUT_BATCH = 500
ANCHOR = Path(
    os.environ.get("HERALD_ANCHOR_CLAIM_LOOP", ROOT.parent / "shared" / "anchors" / "claim_loop.py")
)
D = "notification_delivery"
QUEUE_INDEXES = {
    f"{D}_due_idx": f"CREATE INDEX {D}_due_idx ON {D} (channel, next_attempt_at, id) "
    "WHERE status = 'queued'",
    f"{D}_lease_idx": f"CREATE INDEX {D}_lease_idx ON {D} (lease_expires_at) "
    "WHERE status = 'processing'",
    f"{D}_failed_due_idx": f"CREATE INDEX {D}_failed_due_idx ON {D} (next_attempt_at) "
    "WHERE status = 'failed'",
}

QUEUE_DDL = """
CREATE TABLE bench_queue (
    delivery_id     bigint PRIMARY KEY,
    public_id       uuid NOT NULL DEFAULT gen_random_uuid(),
    tenant_id       text NOT NULL,
    event_id        bigint NOT NULL,
    recipient_id    bigint NOT NULL,
    channel         text NOT NULL,
    occurred_at     timestamptz NOT NULL,
    queued_at       timestamptz NOT NULL DEFAULT now(),
    next_attempt_at timestamptz NOT NULL,
    claimed_at      timestamptz,
    attempts        integer NOT NULL DEFAULT 0
);
CREATE INDEX bench_queue_due ON bench_queue (channel, next_attempt_at, delivery_id);
"""
# `deferred`: the queue row is the delivery until its outcome, so it carries the exactly-once key.
DEFERRED_KEY = (
    "CREATE UNIQUE INDEX bench_queue_target ON bench_queue (recipient_id, channel, occurred_at)"
)

# --- the fan-out's write of one page of recipients (500), per shape -----------------------------

FANOUT_TODAY = f"""
INSERT INTO {D} (tenant_id, event_id, recipient_id, channel, status, queued_at, next_attempt_at,
                 occurred_at)
SELECT r.tenant_id, r.event_id, r.id, 'email', 'queued', now(), now(), r.occurred_at
  FROM notification_recipient r
 WHERE r.event_id = %(event)s AND r.id > %(after)s AND r.id <= %(until)s
"""

FANOUT_QUEUE = f"""
WITH d AS (
    INSERT INTO {D} (tenant_id, event_id, recipient_id, channel, status, queued_at,
                     next_attempt_at, occurred_at)
    SELECT r.tenant_id, r.event_id, r.id, 'email', 'queued', now(), now(), r.occurred_at
      FROM notification_recipient r
     WHERE r.event_id = %(event)s AND r.id > %(after)s AND r.id <= %(until)s
    RETURNING id, tenant_id, event_id, recipient_id, channel, occurred_at, next_attempt_at
)
INSERT INTO bench_queue (delivery_id, tenant_id, event_id, recipient_id, channel, occurred_at,
                         next_attempt_at)
SELECT id, tenant_id, event_id, recipient_id, channel, occurred_at, next_attempt_at FROM d
"""

FANOUT_DEFERRED = f"""
INSERT INTO bench_queue (delivery_id, tenant_id, event_id, recipient_id, channel, occurred_at,
                         next_attempt_at)
SELECT nextval(pg_get_serial_sequence('{D}', 'id')), r.tenant_id, r.event_id, r.id, 'email',
       r.occurred_at, now()
  FROM notification_recipient r
 WHERE r.event_id = %(event)s AND r.id > %(after)s AND r.id <= %(until)s
"""

# --- the claim --------------------------------------------------------------------------------

CLAIM_TODAY = f"""
WITH c AS MATERIALIZED (
    SELECT c.id, c.occurred_at
      FROM {D} c
     WHERE c.status = 'queued' AND c.channel = 'email' AND c.next_attempt_at <= now()
     ORDER BY c.next_attempt_at, c.id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE {D} d
   SET status = 'processing',
       claimed_at = clock_timestamp(),
       lease_expires_at = clock_timestamp() + make_interval(secs => 60)
 WHERE d.id = ANY(ARRAY(SELECT c.id FROM c))
   AND d.occurred_at BETWEEN (SELECT min(c.occurred_at) FROM c) AND (SELECT max(c.occurred_at) FROM c)
RETURNING d.id, d.occurred_at, d.claimed_at
"""

CLAIM_QUEUE = """
WITH c AS MATERIALIZED (
    SELECT c.delivery_id
      FROM bench_queue c
     WHERE c.channel = 'email' AND c.next_attempt_at <= now()
     ORDER BY c.next_attempt_at, c.delivery_id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE bench_queue q
   SET claimed_at = clock_timestamp(),
       next_attempt_at = clock_timestamp() + make_interval(secs => 60),
       attempts = q.attempts + 1
 WHERE q.delivery_id = ANY(ARRAY(SELECT c.delivery_id FROM c))
RETURNING q.delivery_id, q.occurred_at, q.claimed_at
"""

# --- the outcome: every row sent, with rendered content and an attempt row --------------------

_ROWS = """
u AS (
    SELECT CAST(e->>0 AS bigint) AS id, CAST(e->>1 AS timestamptz) AS claimed_at,
           e->>2 AS message_id, e->>3 AS hint, e->>4 AS title, e->>5 AS body, e->>6 AS hash
      FROM jsonb_array_elements(CAST(%(rows)s AS jsonb)) AS e
)"""

OUTCOME_TODAY = f"""
WITH {_ROWS}, ended AS (
    UPDATE {D} d
       SET status = 'sent', claimed_at = NULL, lease_expires_at = NULL,
           attempts = d.attempts + 1, sent_at = now(), failed_at = NULL, dead_at = NULL,
           skipped_at = NULL, last_error = NULL,
           provider_message_id = u.message_id, destination_hint = u.hint,
           rendered_title = u.title, rendered_body = u.body, rendered_hash = u.hash
      FROM u
     WHERE d.id = ANY(ARRAY(SELECT u.id FROM u)) AND d.id = u.id
       AND d.claimed_at = u.claimed_at
       AND d.occurred_at BETWEEN %(first_at)s AND %(last_at)s
    RETURNING d.id, d.tenant_id, d.attempts, d.occurred_at, u.message_id
)
INSERT INTO notification_delivery_attempt
       (tenant_id, delivery_id, outcome, attempt_number, provider_status, provider_message_id,
        occurred_at)
SELECT tenant_id, id, 'sent', attempts, '250', message_id, occurred_at FROM ended
"""

OUTCOME_QUEUE = f"""
WITH {_ROWS}, gone AS (
    DELETE FROM bench_queue q
     USING u
     WHERE q.delivery_id = ANY(ARRAY(SELECT u.id FROM u)) AND q.delivery_id = u.id
       AND q.claimed_at = u.claimed_at
    RETURNING q.delivery_id, q.attempts, q.occurred_at
), ended AS (
    UPDATE {D} d
       SET status = 'sent', attempts = g.attempts, sent_at = now(),
           provider_message_id = u.message_id, destination_hint = u.hint,
           rendered_title = u.title, rendered_body = u.body, rendered_hash = u.hash
      FROM gone g JOIN u ON u.id = g.delivery_id
     WHERE d.id = ANY(ARRAY(SELECT g.delivery_id FROM gone g)) AND d.id = g.delivery_id
       AND d.occurred_at BETWEEN %(first_at)s AND %(last_at)s
    RETURNING d.id, d.tenant_id, d.attempts, d.occurred_at, u.message_id
)
INSERT INTO notification_delivery_attempt
       (tenant_id, delivery_id, outcome, attempt_number, provider_status, provider_message_id,
        occurred_at)
SELECT tenant_id, id, 'sent', attempts, '250', message_id, occurred_at FROM ended
"""

OUTCOME_DEFERRED = f"""
WITH {_ROWS}, gone AS (
    DELETE FROM bench_queue q
     USING u
     WHERE q.delivery_id = ANY(ARRAY(SELECT u.id FROM u)) AND q.delivery_id = u.id
       AND q.claimed_at = u.claimed_at
    RETURNING q.*
), ended AS (
    INSERT INTO {D} (id, public_id, tenant_id, event_id, recipient_id, channel, status,
                     queued_at, next_attempt_at, occurred_at, attempts, sent_at,
                     provider_message_id, destination_hint, rendered_title, rendered_body,
                     rendered_hash)
    SELECT g.delivery_id, g.public_id, g.tenant_id, g.event_id, g.recipient_id, g.channel, 'sent',
           g.queued_at, g.next_attempt_at, g.occurred_at, g.attempts, now(),
           u.message_id, u.hint, u.title, u.body, u.hash
      FROM gone g JOIN u ON u.id = g.delivery_id
    RETURNING id, tenant_id, attempts, occurred_at, provider_message_id AS message_id
)
INSERT INTO notification_delivery_attempt
       (tenant_id, delivery_id, outcome, attempt_number, provider_status, provider_message_id,
        occurred_at)
SELECT tenant_id, id, 'sent', attempts, '250', message_id, occurred_at FROM ended
"""

SHAPES = {
    "today": (FANOUT_TODAY, CLAIM_TODAY, OUTCOME_TODAY),
    "queue": (FANOUT_QUEUE, CLAIM_QUEUE, OUTCOME_QUEUE),
    "deferred": (FANOUT_DEFERRED, CLAIM_QUEUE, OUTCOME_DEFERRED),
}


def backend_cpu(conn: psycopg.Connection[Any]) -> float:
    fields = Path(f"/proc/{conn.info.backend_pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def seed(conn: psycopg.Connection[Any], n: int) -> int:
    """n people, one event, one recipient each: what every shape's fan-out reads."""
    conn.execute(
        "INSERT INTO person (tenant_id, external_id, full_name, email) "
        "SELECT %s, 'p' || g, 'Person ' || g, 'p' || g || '@example.com' "
        "FROM generate_series(1, %s) g",
        (TENANT, n),
    )
    event_id, occurred_at = conn.execute(
        "INSERT INTO notification_event (tenant_id, kind, category, priority, audience, channels, "
        "variables, dedupe_key, fanout_claimed_at, fanout_claim_token, fanout_completed_at, "
        "recipient_count) VALUES (%s, 'announcement.posted', 'announcement', 'normal', "
        "'{\"kind\": \"all_users\"}', ARRAY['email'], '{}', %s, now(), gen_random_uuid(), now(), "
        "%s) RETURNING id, occurred_at",
        (TENANT, uuid.uuid4().hex * 2, n),
    ).fetchone()  # type: ignore[misc]
    conn.execute(
        "INSERT INTO notification_recipient (tenant_id, event_id, user_id, "
        "user_public_id_snapshot, variables, occurred_at) "
        "SELECT tenant_id, %s, id, public_id, jsonb_build_object('name', full_name), %s "
        "FROM person WHERE tenant_id = %s ORDER BY id",
        (event_id, occurred_at, TENANT),
    )
    return int(event_id)


def set_shape(conn: psycopg.Connection[Any], shape: str, month: str) -> None:
    """This month's deliveries gone (the history months stay); the delivery table's queue
    indexes for `today`, the queue table for the others."""
    conn.execute(f"TRUNCATE {D}_attempt_{month}, {D}_{month}")
    conn.execute("DROP TABLE IF EXISTS bench_queue")
    for name, ddl in QUEUE_INDEXES.items():
        conn.execute(f"DROP INDEX IF EXISTS {name}")
        if shape == "today":
            conn.execute(ddl)
    if shape != "today":
        conn.execute(QUEUE_DDL)
        if shape == "deferred":
            conn.execute(DEFERRED_KEY)


def run_shape(
    conn: psycopg.Connection[Any], shape: str, event_id: int, n: int, batch: int
) -> dict[str, float]:
    fanout_sql, claim_sql, outcome_sql = SHAPES[shape]
    bounds = conn.execute(
        "SELECT min(id), max(id) FROM notification_recipient WHERE event_id = %s", (event_id,)
    ).fetchone()
    assert bounds is not None
    first, last = bounds
    cpu0, wall0 = backend_cpu(conn), time.perf_counter()
    for after in range(first - 1, last, FANOUT_BATCH):
        conn.execute(fanout_sql, {"event": event_id, "after": after, "until": after + FANOUT_BATCH})
    fan_cpu, fan_wall = backend_cpu(conn) - cpu0, time.perf_counter() - wall0
    conn.execute("VACUUM ANALYZE bench_queue" if shape != "today" else f"ANALYZE {D}")
    # As the worker runs its batches (docs/scaling.md, generic plans): the prepared claim and outcome
    # under their generic plans, never planned again for each batch's values.
    conn.execute("SET plan_cache_mode = force_generic_plan")
    done = 0
    cpu0, wall0 = backend_cpu(conn), time.perf_counter()
    claim_cpu = 0.0
    while True:
        before = backend_cpu(conn)
        claimed = conn.execute(claim_sql, {"limit": batch}, prepare=True).fetchall()
        claim_cpu += backend_cpu(conn) - before
        if not claimed:
            break
        rows = [
            [
                i,
                claimed_at.isoformat(),
                f"m{i}",
                "p…@example.com",
                "Sports day",
                "It is Friday.",
                "h",
            ]
            for i, _, claimed_at in claimed
        ]
        stamps = [occurred for _, occurred, _ in claimed]
        params = {"rows": json.dumps(rows), "first_at": min(stamps), "last_at": max(stamps)}
        written = conn.execute(outcome_sql, params, prepare=True).rowcount
        assert written == len(claimed), (shape, written, len(claimed))
        done += written
    drain_cpu, drain_wall = backend_cpu(conn) - cpu0, time.perf_counter() - wall0
    conn.execute("RESET plan_cache_mode")
    assert done == n, (shape, done, n)
    sent = conn.execute(
        f"SELECT count(*) FROM {D} WHERE status = 'sent' AND event_id = %s", (event_id,)
    ).fetchone()
    assert sent is not None and sent[0] == n, (shape, sent)
    return {
        "fanout_us": 1e6 * fan_cpu / n,
        "drain_us": 1e6 * drain_cpu / n,
        "claim_us": 1e6 * claim_cpu / n,
        "drain_rate": n / drain_wall,
        "fanout_wall": fan_wall,
    }


def anchor(dsn: str, n: int, batch: int) -> float:
    out = subprocess.run(
        [sys.executable, str(ANCHOR), "--dsn", dsn, "--rows", str(n), "--batch", str(batch)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    match = re.search(r"= ([\d,]+) rows/s", out)
    assert match, out
    return float(match.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--deliveries", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument(
        "--history", type=int, default=0, help="months of sent deliveries behind the queue"
    )
    parser.add_argument("--history-rows", type=int, default=100_000, help="deliveries a month")
    args = parser.parse_args()
    shapes = args.shapes.split(",")
    server = os.environ.get("HERALD_BENCH_DATABASE_URL") or embedded.start(
        ROOT / ".herald" / "bench"
    )
    name = f"herald_bench_{uuid.uuid4().hex[:8]}"
    url = create_database(server, name)
    try:
        # The schema before the queue table was built (0026): the shapes it compares start there.
        migrate.upgrade(url, "0025")
        dsn = libpq_url(url)
        results: dict[str, list[dict[str, float]]] = {shape: [] for shape in shapes}
        anchors: list[float] = []
        with psycopg.connect(dsn, autocommit=True) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
            print(
                f"PostgreSQL {version}; {args.deliveries:,} email deliveries a round, claims of "
                f"{args.batch}; {args.rounds} rounds, shapes alternating"
            )
            if args.history:
                history.sent_email(
                    conn,
                    TENANT,
                    history.months_before_this(args.history),
                    args.history_rows,
                    attempts=True,
                )
            event_id = seed(conn, args.deliveries)
            month = partitions.Month.of(datetime.now(UTC)).suffix
            conn.execute("VACUUM ANALYZE")
            for round_ in range(args.rounds):
                anchors.append(anchor(dsn, args.deliveries, args.batch))
                for shape in shapes:
                    set_shape(conn, shape, month)
                    results[shape].append(
                        run_shape(conn, shape, event_id, args.deliveries, args.batch)
                    )
                    r = results[shape][-1]
                    print(
                        f"  round {round_ + 1} {shape:9} fan-out {r['fanout_us']:6.1f} µs, "
                        f"drain {r['drain_us']:6.1f} µs (claim {r['claim_us']:5.1f}) "
                        "of PostgreSQL CPU a delivery, "
                        f"{r['drain_rate']:8,.0f} deliveries/s",
                        flush=True,
                    )
        anchor_rate = statistics.median(anchors)
        print(
            f"anchor claim loop: median {anchor_rate:,.0f} rows/s "
            f"({', '.join(f'{a:,.0f}' for a in anchors)})"
        )
        print(
            f"{'shape':9}  {'fan-out µs':>10}  {'drain µs':>9}  {'sum µs':>7}  "
            f"{'claim µs':>9}  {'drain /s':>9}  {'/ anchor':>8}"
        )
        for shape in shapes:
            fan = statistics.median(r["fanout_us"] for r in results[shape])
            drain = statistics.median(r["drain_us"] for r in results[shape])
            rate = statistics.median(r["drain_rate"] for r in results[shape])
            claim = statistics.median(r["claim_us"] for r in results[shape])
            print(
                f"{shape:9}  {fan:10.1f}  {drain:9.1f}  {fan + drain:7.1f}  {claim:9.1f}  {rate:9,.0f}  "
                f"{rate / anchor_rate:8.2f}"
            )
    finally:
        drop_database(server, name)


if __name__ == "__main__":
    main()
