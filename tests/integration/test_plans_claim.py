"""The claim's plan at a realistic queue depth, as the server runs it once it is prepared.

psycopg prepares a statement after a few executions, and the server may then run a generic plan
that knows none of the bound values. These tests prepare Herald's own statements (the text in
delivery/queries.sql), force the generic plan, and read the plan from EXPLAIN (FORMAT JSON): the
claim must walk the queue table's notification_delivery_queue_due_idx in order and stop, with no
sort over the queue and no read of the wide delivery table — with tied due times (one fan-out
batch) as well as spread ones. The reaper's sweeps and the recorder's batch write must reach
their rows through an index, never a scan of the table.

The module builds its own databases (tied, spread): its rows must not leak into the shared one.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql as sql_

from herald.db import migrate, partitions
from herald.db.engine import libpq_url
from herald.delivery.queries import SQL, OutcomeRows
from tests import history
from tests.conftest import create_database, drop_database
from tests.plans import by_parent, empty_partitions

QUEUED = 5_000
QUEUE = "notification_delivery_queue"
_PARAM = re.compile(r"(?<![:\w]):([a-z_]+)")


def _positional(sql: str) -> tuple[str, list[str]]:
    """The statement with `:name` parameters turned into `$n`, and the names in order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return _PARAM.sub(number, sql), names


def _seed(conn: psycopg.Connection[Any], *, tied: bool) -> None:
    """QUEUED queued email deliveries of one event (tied or spread due times), a few hundred
    delivered in-app rows and some failed, processing and skipped rows beside them, then ANALYZE."""
    conn.execute(
        "INSERT INTO person (tenant_id, external_id, full_name, email) "
        "SELECT 'plans', 'p' || g, 'Person ' || g, 'p' || g || '@example.com' "
        "FROM generate_series(1, %s) g",
        (QUEUED,),
    )
    conn.execute(
        "INSERT INTO notification_event (tenant_id, kind, category, priority, audience, channels, "
        "variables, dedupe_key, fanout_claimed_at, fanout_claim_token, fanout_completed_at, "
        "recipient_count) VALUES ('plans', 'announcement.posted', 'announcement', 'normal', "
        '\'{"kind": "all_users"}\', ARRAY[\'email\', \'in_app\'], \'{"title": "t", "message": "m"}\', '
        "%s, now(), gen_random_uuid(), now(), %s)",
        (uuid.uuid4().hex * 2, QUEUED),
    )
    conn.execute(
        "INSERT INTO notification_recipient (tenant_id, event_id, user_id, user_public_id_snapshot, "
        "variables, occurred_at) SELECT tenant_id, (SELECT max(id) FROM notification_event), id, "
        "public_id, '{}'::jsonb, (SELECT occurred_at FROM notification_event ORDER BY id DESC "
        "LIMIT 1) FROM person WHERE tenant_id = 'plans'"
    )
    conn.execute(
        "INSERT INTO notification_delivery (tenant_id, event_id, recipient_id, channel, status, "
        "next_attempt_at, occurred_at) SELECT tenant_id, event_id, id, 'email', 'queued', "
        "CASE WHEN %s THEN now() - interval '1 hour' "
        "ELSE now() - interval '1 hour' + id * interval '1 ms' END, occurred_at "
        "FROM notification_recipient WHERE tenant_id = 'plans'",
        (tied,),
    )
    conn.execute(
        "INSERT INTO notification_delivery (tenant_id, event_id, recipient_id, channel, status, "
        "occurred_at) SELECT tenant_id, event_id, id, 'in_app', 'delivered', occurred_at "
        "FROM notification_recipient WHERE tenant_id = 'plans' AND id % 10 = 0"
    )
    # A few rows in every other state the sweeps look for.
    conn.execute(
        "UPDATE notification_delivery SET status = 'failed', failed_at = now(), failure_count = 1, "
        "attempts = 1 WHERE channel = 'email' AND id % 50 = 1"
    )
    conn.execute(
        "UPDATE notification_delivery SET status = 'skipped_unconfigured', skipped_at = now() "
        "WHERE channel = 'email' AND id % 50 = 3"
    )
    # The queue rows of the queued deliveries (as the fan-out writes them), a few claimed: those
    # are `processing`.
    conn.execute(
        "INSERT INTO notification_delivery_queue (delivery_id, tenant_id, channel, occurred_at, "
        "next_attempt_at) SELECT id, tenant_id, channel, occurred_at, next_attempt_at "
        "FROM notification_delivery WHERE status = 'queued'"
    )
    conn.execute(
        "UPDATE notification_delivery_queue SET claimed_at = now(), "
        "lease_expires_at = now() + interval '5 minutes' WHERE delivery_id % 50 = 2"
    )
    _seed_history(conn)
    conn.execute("VACUUM ANALYZE")


# Months of sent email behind the queue, each a partition of its own: what a statement that
# reaches claimed rows by id alone would probe, once for every month.
HISTORY_MONTHS = 2
HISTORY_ROWS = 2_000


def _history_months() -> list[partitions.Month]:
    return history.months_before_this(HISTORY_MONTHS)


def _seed_history(conn: psycopg.Connection[Any]) -> None:
    history.sent_email(conn, "plans", _history_months(), HISTORY_ROWS, day=3)


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "spread"])
def queue(request: pytest.FixtureRequest, server_url: str) -> Iterator[psycopg.Connection[Any]]:
    name = f"herald_plans_{uuid.uuid4().hex[:10]}"
    url = create_database(server_url, name)
    try:
        migrate.upgrade(url)
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            _seed(conn, tied=request.param)
            conn.execute("SET plan_cache_mode = force_generic_plan")
            yield conn
    finally:
        drop_database(server_url, name)


def _generic_plan(
    conn: psycopg.Connection[Any], statement: str, *, analyze: bool = False, **values: Any
) -> dict[str, Any]:
    """The generic plan of Herald's statement `statement`, prepared as psycopg would; with
    `analyze`, as it ran (in the caller's transaction, which must roll it back)."""
    sql, names = _positional(str(SQL[statement]))
    # Not prepared by psycopg itself (prepare=False): after a few runs it would be, and
    # DEALLOCATE ALL would then drop its own prepared form.
    conn.execute("DEALLOCATE ALL", prepare=False)
    conn.execute(f"PREPARE plan_under_test AS {sql}", prepare=False)
    args = ", ".join(sql_.Literal(_literal(values[n])).as_string(conn) for n in names)
    # EXPLAIN without ANALYZE: nothing is claimed or written.
    row = conn.execute(
        f"EXPLAIN (FORMAT JSON{', ANALYZE' if analyze else ''}) EXECUTE plan_under_test({args})",
        prepare=False,
    ).fetchone()
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return dict(by_parent(plan[0]["Plan"], empty_partitions(conn)))


def _literal(value: Any) -> str:
    """An untyped literal: the prepared statement's own casts give it its type."""
    if isinstance(value, list):
        return "{" + ",".join(str(v) for v in value) + "}"
    return str(value)


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _scans_of_delivery(
    plan: dict[str, Any], relation: str = "notification_delivery"
) -> list[dict[str, Any]]:
    """The plan's reads of `relation` (notification_delivery's partitions that hold rows)."""
    return [
        n
        for n in _nodes(plan)
        if n.get("Relation Name") == relation and not n.get("Empty Partition")
    ]


def _index_names(plan: dict[str, Any]) -> set[str]:
    return {n["Index Name"] for n in _nodes(plan) if "Index Name" in n}


def _assert_no_sort_and_no_seq_scan(
    plan: dict[str, Any], *, sorted_over: str = "", relation: str = "notification_delivery"
) -> None:
    """No Sort, no sequential scan of a month that holds rows. `sorted_over`: a Sort is allowed
    when every populated read beneath it is that partial index (its rows are bounded by the
    state it holds, as the rows in processing are by the workers' claims)."""
    for sort in (n for n in _nodes(plan) if n["Node Type"] in ("Sort", "Incremental Sort")):
        below = [n for n in _nodes(sort) if "Relation Name" in n and not n.get("Empty Partition")]
        allowed = sorted_over and all(n.get("Index Name") == sorted_over for n in below)
        assert allowed, json.dumps(plan, indent=1)
    scans = _scans_of_delivery(plan, relation)
    assert scans and all(n["Node Type"] != "Seq Scan" for n in scans), json.dumps(plan, indent=1)
    queue_scans = _scans_of_delivery(plan, QUEUE)
    assert all(n["Node Type"] != "Seq Scan" for n in queue_scans), json.dumps(plan, indent=1)


@pytest.mark.parametrize("statement", ["claim_due_deliveries", "claim_due_deliveries_of_tenant"])
def test_the_claim_walks_the_due_index_in_order_under_a_generic_plan(
    queue: psycopg.Connection[Any], statement: str
) -> None:
    plan = _generic_plan(
        queue, statement, channel="email", limit=100, lease_seconds=300, tenant_id="plans"
    )
    _assert_no_sort_and_no_seq_scan(plan, relation=QUEUE)
    candidate = [n for n in _scans_of_delivery(plan, QUEUE) if n.get("Alias") == "c"]
    # One ordered walk of the queue's due index, whatever the history behind it.
    assert candidate and {(n["Node Type"], n["Index Name"]) for n in candidate} == {
        ("Index Scan", "notification_delivery_queue_due_idx")
    }, json.dumps(plan, indent=1)
    # The claim writes the narrow row only: the wide record is not read or written.
    assert _scans_of_delivery(plan) == [], json.dumps(plan, indent=1)
    updated = [n for n in _nodes(plan) if n["Node Type"] == "ModifyTable"]
    assert [n["Relation Name"] for n in updated] == [QUEUE], json.dumps(plan, indent=1)
    # The LIMIT sits straight above the row locks over the ordered scan: it stops after :limit.
    limits = [n for n in _nodes(plan) if n["Node Type"] == "Limit"]
    assert limits and limits[0]["Plans"][0]["Node Type"] == "LockRows"


@pytest.mark.parametrize(
    ("statement", "index"),
    [
        ("reclaim_expired_leases", "notification_delivery_queue_lease_idx"),
        ("requeue_due_failures", "notification_delivery_failed_due_idx"),
        # deliverAt's inbox rows: the queue's due index, channel 'in_app' (a constant).
        ("release_due_inbox", "notification_delivery_queue_due_idx"),
        ("backfill_unconfigured", "notification_delivery_unconfigured_idx"),
    ],
)
def test_the_sweeps_walk_their_indexes(
    queue: psycopg.Connection[Any], statement: str, index: str
) -> None:
    plan = _generic_plan(
        queue, statement, limit=500, max_attempts=5, channel="email", max_age_hours=24
    )
    _assert_no_sort_and_no_seq_scan(plan)
    assert index in _index_names(plan), json.dumps(plan, indent=1)


def test_the_recorder_reaches_its_rows_by_primary_key(queue: psycopg.Connection[Any]) -> None:
    """The outcome write probes each row it records through the primary key — never through
    the processing rows' partial index, however few rows the statistics put in that state.

    That index is not bounded by the rows in flight: it keeps an entry for every row claimed
    since the table was last vacuumed. A 1,000,000-person broadcast's drain read 327,200 of its
    entries and 14,949 heap pages to record 200 outcomes (140 ms a write, 2026-12-03), because
    statistics taken before the claims estimated 149 processing rows and the planner drove the
    join from there. This fixture's statistics put ~100 rows in processing, as those did."""
    rows = _outcomes(queue)
    plan = _generic_plan(queue, "record_outcomes", **rows.params())
    scans = [n for n in _scans_of_delivery(plan) if n["Node Type"] != "ModifyTable"]
    assert [(n["Node Type"], n.get("Index Name")) for n in scans] == [
        ("Index Scan", "notification_delivery_pkey")
    ], json.dumps(plan, indent=1)
    assert "id = ANY" in scans[0]["Index Cond"], json.dumps(plan, indent=1)
    # The lease check deletes the batch's queue rows through the queue's primary key.
    held = [n for n in _scans_of_delivery(plan, QUEUE) if n["Node Type"] != "ModifyTable"]
    assert [(n["Node Type"], n.get("Index Name")) for n in held] == [
        ("Index Scan", "notification_delivery_queue_pkey")
    ], json.dumps(plan, indent=1)


def _queued(conn: psycopg.Connection[Any]) -> list[tuple[int, datetime]]:
    return [
        (r[0], r[1])
        for r in conn.execute(
            "SELECT id, occurred_at FROM notification_delivery WHERE status = 'queued' LIMIT 200",
            prepare=False,  # see test_a_batchs_statements_read_only_the_months_of_its_rows
        )
    ]


def _outcomes(conn: psycopg.Connection[Any]) -> OutcomeRows:
    """200 sent outcomes of queued rows (their lease token matches none: nothing is written)."""
    rows = OutcomeRows()
    for i, occurred_at in _queued(conn):
        rows.ids.append(i)
        rows.occurred_ats.append(occurred_at)
        rows.claimed_ats.append(datetime(2026, 1, 1, tzinfo=UTC))
        rows.statuses.append("sent")
        rows.attempt_incs.append(1)
        rows.failure_incs.append(0)
        rows.called.append(True)
        rows.outcomes.append("sent")
        rows.providers.append("smtp")
        for name in (
            "delays",
            "errors",
            "message_ids",
            "hints",
            "titles",
            "bodies",
            "hashes",
            "passed_over",
        ):
            getattr(rows, name).append(None)
        rows.template_versions.append(None)
        rows.provider_statuses.append(None)
    return rows


def test_the_send_contexts_read_the_claimed_rows_on_their_own_by_primary_key(
    queue: psycopg.Connection[Any],
) -> None:
    """The send contexts read the claimed rows by primary key in a step planned apart from the
    joins. Planned with them, a tenant with one event (one row to the planner) was read event
    first, the claimed ids ANDed with the event's (event_id, status) index: a 1,000,000-person
    broadcast's drain read 3,363,800 entries of it (3,639 buffers, 134 ms) for each batch of
    200, the slowest statement of the drain (2026-12-03). Whatever the statistics, the claimed
    rows' step has only their ids to go by."""
    queued = _queued(queue)
    queue.execute("BEGIN")
    try:
        # As the worker reads them: herald_app under the tenant's policy.
        queue.execute(
            "SELECT set_config('herald.tenant_id', 'plans', true), "
            "set_config('role', 'herald_app', true)"
        )
        plan = _generic_plan(queue, "load_send_contexts", **_contexts_params(queued))
    finally:
        queue.execute("ROLLBACK")
    claimed = [n for n in _nodes(plan) if n.get("Subplan Name") == "CTE d"]
    assert len(claimed) == 1, json.dumps(plan, indent=1)
    inside = [
        n
        for n in _nodes(claimed[0])
        if n.get("Relation Name") == "notification_delivery" and not n.get("Empty Partition")
    ]
    assert [n.get("Index Name") for n in inside] == ["notification_delivery_pkey"]
    assert "id = ANY" in inside[0]["Index Cond"], json.dumps(plan, indent=1)
    # The joins read the claimed rows from that step, never the table again.
    assert len(_scans_of_delivery(plan)) == 1, json.dumps(plan, indent=1)


async def test_a_broadcasts_per_event_statements_never_scan_the_table(
    queue: psycopg.Connection[Any], server_url: str
) -> None:
    """docs/scaling.md, generic plans: with one event dominating the table and statistics that still call it
    mostly queued, the planner reads the table from its start for the first unfinished row — a
    prefix that grows as a broadcast drains. The scheduler's in-flight check and the bounded
    cancel run through the (event_id, status) index instead, and leave the setting as found."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    from herald.db.engine import make_async_engine
    from herald.delivery import queries as delivery_queries
    from herald.delivery import service as delivery

    name = queue.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
    engine = make_async_engine(
        make_url(server_url).set(database=name).render_as_string(hide_password=False), pool_size=1
    )
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SET LOCAL plan_cache_mode = force_generic_plan"))
            event_id = (
                await conn.execute(
                    text("SELECT max(event_id) FROM notification_delivery WHERE status = 'queued'")
                )
            ).scalar_one()
            assert await delivery.in_flight(conn, event_id)
            assert await delivery.cancel_unclaimed(conn, event_id, limit=10) == 10
            scans = (
                await conn.execute(
                    text(
                        "SELECT sum(seq_scan) AS seq_scan, sum(idx_scan) AS idx_scan "
                        "FROM pg_stat_xact_user_tables WHERE relid IN (SELECT inhrelid "
                        "FROM pg_inherits WHERE inhparent = 'notification_delivery'::regclass)"
                    )
                )
            ).one()
            assert (scans.seq_scan, scans.idx_scan >= 2) == (0, True), scans
            assert (await conn.execute(text("SHOW enable_seqscan"))).scalar_one() == "on"
            assert (await conn.execute(text("SHOW enable_bitmapscan"))).scalar_one() == "on"
            # Planned as they run: a plain index scan (which stops at the first live row and
            # marks the dead entries it passes), never a bitmap scan of every entry the event's
            # drain has left in the index — even with statistics that call the event's unfinished
            # rows few (as late in a drain; rolled back with the transaction, like the rows).
            await conn.execute(
                text(
                    "UPDATE notification_delivery SET status = 'cancelled' "
                    "WHERE status = 'queued' AND id % 100 <> 0"
                )
            )
            await conn.execute(text("ANALYZE notification_delivery"))
            async with delivery_queries._through_an_index(conn):
                for statement, values in (
                    ("deliveries_in_flight", {"event_id": event_id}),
                    ("cancel_unclaimed_deliveries", {"event_id": event_id, "limit": 10}),
                ):
                    # Prepared, so the plan is the generic one (force_generic_plan above).
                    sql, names = _positional(str(delivery_queries.SQL[statement]))
                    await conn.exec_driver_sql(f"PREPARE {statement} AS {sql}")
                    args = ", ".join(str(values[n]) for n in names)
                    raw = (
                        await conn.exec_driver_sql(
                            f"EXPLAIN (FORMAT JSON) EXECUTE {statement}({args})"
                        )
                    ).scalar()
                    plan = by_parent((json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"])
                    kinds = {n["Node Type"] for n in _nodes(plan)}
                    assert not kinds & {"Seq Scan", "Bitmap Heap Scan"}, (statement, kinds)
                    assert "notification_delivery_event_id_idx" in _index_names(plan), statement
            await conn.rollback()  # nothing cancelled stays: the module's other tests read these
    finally:
        await engine.dispose()


def _contexts_params(queued: list[tuple[int, datetime]]) -> dict[str, Any]:
    return {
        "ids": [i for i, _ in queued],
        "first_at": min(at for _, at in queued),
        "last_at": max(at for _, at in queued),
    }


@pytest.mark.parametrize(
    "statement", ["claim_due_deliveries", "load_send_contexts", "record_outcomes", "extend_leases"]
)
def test_a_batchs_statements_read_only_the_months_of_its_rows(
    queue: psycopg.Connection[Any], statement: str
) -> None:
    """Every statement of a delivery batch reaches its rows by id, and the ids are bounded by
    the rows' own occurred_at (the claim's, carried through the batch): the months behind them
    are pruned and never read, however many of them retention keeps. By id alone, each row was
    probed in every month's primary key, delivery and recipient alike, and the send contexts'
    generic plan hash-joined a sequential scan of every month's recipients (340 ms a batch of 200
    with six months of 100,000 behind the queue, bench/delivery.py --history 6)."""
    queued = _queued(queue)
    values: dict[str, Any]
    if statement == "claim_due_deliveries":
        values = {"channel": "email", "limit": 100, "lease_seconds": 300}
    elif statement == "load_send_contexts":
        values = _contexts_params(queued)
    elif statement == "record_outcomes":
        values = _outcomes(queue).params()
    else:
        values = _contexts_params(queued) | {
            "claimed_ats": ["2026-01-01T00:00:00+00:00"] * len(queued),
            "lease_seconds": 300,
        }
    history = {
        partitions.name(table, month.suffix)
        for month in _history_months()
        for table in ("notification_delivery", "notification_recipient")
    }
    # Not prepared (prepare=False): _generic_plan's DEALLOCATE ALL would drop psycopg's own.
    queue.execute("BEGIN", prepare=False)
    try:
        queue.execute(
            "SELECT set_config('herald.tenant_id', 'plans', true), "
            "set_config('role', 'herald_app', true)",
            prepare=False,
        )
        plan = _generic_plan(queue, statement, analyze=True, **values)
    finally:
        queue.execute("ROLLBACK", prepare=False)
    read = sorted(
        n["Partition"]
        for n in _nodes(plan)
        # The claim's walk of each month's due index (alias c) is the claim itself: a due row
        # may be in any month. What is bounded is every read of the rows once chosen.
        if n.get("Partition") in history and n.get("Actual Loops", 0) > 0 and n.get("Alias") != "c"
    )
    assert read == [], json.dumps(plan, indent=1)
    if statement in ("claim_due_deliveries", "extend_leases"):
        # The queue row's alone: no month of the wide table is read at all.
        assert _scans_of_delivery(plan) == [], json.dumps(plan, indent=1)
        return
    # The rows' own month was read (the statement did reach them).
    assert any(
        n.get("Relation Name") == "notification_delivery" and n.get("Actual Loops", 0) > 0
        for n in _nodes(plan)
    ), json.dumps(plan, indent=1)


async def test_a_workers_batch_runs_its_statements_under_their_generic_plans(
    server_url: str,
) -> None:
    """docs/scaling.md, generic plans: the plans this module asserts are the generic ones, and the worker
    must run those. Left to the server's choice, a prepared claim or outcome write was planned
    again on every execution (a custom plan pruned to its values' months always looks cheaper
    than the generic plan over every month), and planning over the months cost more server CPU
    than running the statement. The worker's transactions set plan_cache_mode =
    force_generic_plan for themselves: a prepared statement of a batch is never custom-planned,
    not even on its first executions (which the server's own choice always plans custom)."""
    from cryptography.fernet import Fernet
    from sqlalchemy import text

    from herald.config import Settings
    from herald.db.engine import make_async_engine
    from herald.delivery.worker import deliver_batch
    from herald.kinds.sample import SAMPLE_REGISTRY
    from herald.secrets.vault import TableVault
    from tests.integration.test_delivery import ScriptedProvider

    name = f"herald_plans_{uuid.uuid4().hex[:10]}"
    url = create_database(server_url, name)
    try:
        migrate.upgrade(url)
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            _seed(conn, tied=False)
        # One connection: the batches run one after another, each transaction on the same
        # session, whose prepared statements are read below.
        engine = make_async_engine(url, pool_size=1)
        provider = ScriptedProvider("email")
        try:
            settings = Settings(database_url=url)
            vault = TableVault(engine, Fernet.generate_key())
            for _ in range(8):  # psycopg prepares a statement on its sixth run
                claimed = await deliver_batch(
                    engine,
                    "email",
                    provider,
                    registry=SAMPLE_REGISTRY,
                    vault=vault,
                    settings=settings,
                    limit=50,
                )
                assert claimed == 50
            async with engine.connect() as conn:
                prepared = (
                    await conn.execute(
                        text(
                            "SELECT statement, generic_plans, custom_plans "
                            "FROM pg_prepared_statements"
                        )
                    )
                ).all()
                # Every claimed row's outcome was written (the seeded event's variables leave
                # its email template unresolved: each send is recorded as skipped).
                ended = (
                    await conn.execute(
                        text(
                            "SELECT count(*) FROM notification_delivery "
                            "WHERE status = 'skipped_no_template'"
                        )
                    )
                ).scalar_one()
        finally:
            await engine.dispose()
        assert ended == 400
        plans = {}
        for statement in ("claim_due_deliveries", "load_send_contexts", "record_outcomes"):
            first_line = str(SQL[statement]).strip().splitlines()[0]
            found = [(g, c) for text_, g, c in prepared if text_.strip().startswith(first_line)]
            assert len(found) == 1, (statement, [p[0][:60] for p in prepared])
            plans[statement] = found[0]
        assert all(generic > 0 and custom == 0 for generic, custom in plans.values()), plans
    finally:
        drop_database(server_url, name)
