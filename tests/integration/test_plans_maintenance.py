"""Plans of the operational-email claim and of /metrics' in-flight counts under a generic plan.

The same rules as tests/integration/test_plans_claim.py, for two statements outside the delivery
claim: once psycopg prepares them the server may run a generic plan that knows no bound value.
The operational-email claim must walk operational_email_due_idx in order and stop (no sort, no
scan of the table, its UPDATE probed by primary key); /metrics' counts of queued, processing
and failed deliveries must each be answered by that status's partial index, never by a
sequential scan of the delivery history.

The module builds its own database: its rows must not leak into the shared one.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql as sql_
from sqlalchemy import TextClause

from herald.db import migrate
from herald.db.engine import libpq_url
from herald.maintenance.queries import SQL as MAINTENANCE_SQL
from herald.observability.queries import SQL as OBSERVABILITY_SQL
from tests.conftest import create_database, drop_database
from tests.integration.test_plans_claim import _literal, _nodes, _positional
from tests.plans import by_parent, empty_partitions

QUEUED = 5_000
HISTORY = 20_000


def _seed(conn: psycopg.Connection[Any], *, tied: bool) -> None:
    """QUEUED queued operational emails beside HISTORY sent ones; HISTORY terminal deliveries
    beside a few hundred in each in-flight state; then ANALYZE."""
    conn.execute(
        "INSERT INTO operational_email (tenant_id, event_type, subject, body_text, body_html, "
        "status, next_attempt_at, sent_at) "
        "SELECT 'plans', 'key.created', 's', 't', 'h', "
        "CASE WHEN g <= %s THEN 'queued' ELSE 'sent' END, "
        "CASE WHEN %s THEN now() - interval '1 hour' "
        "ELSE now() - interval '1 hour' + g * interval '1 ms' END, "
        "CASE WHEN g <= %s THEN NULL ELSE now() END "
        "FROM generate_series(1, %s) g",
        (QUEUED, tied, QUEUED, QUEUED + HISTORY),
    )
    conn.execute(
        "INSERT INTO notification_event (tenant_id, kind, category, priority, audience, channels, "
        "variables, dedupe_key, fanout_claimed_at, fanout_claim_token, fanout_completed_at, "
        "recipient_count) VALUES ('plans', 'announcement.posted', 'announcement', 'normal', "
        '\'{"kind": "all_users"}\', ARRAY[\'email\'], \'{"title": "t", "message": "m"}\', '
        "%s, now(), gen_random_uuid(), now(), %s)",
        (uuid.uuid4().hex * 2, HISTORY),
    )
    conn.execute(
        "INSERT INTO notification_recipient (tenant_id, event_id, user_public_id_snapshot, "
        "occurred_at) SELECT 'plans', e.id, gen_random_uuid(), e.occurred_at "
        "FROM generate_series(1, %s), (SELECT id, occurred_at FROM notification_event "
        "ORDER BY id DESC LIMIT 1) e",
        (HISTORY,),
    )
    conn.execute(
        "INSERT INTO notification_delivery (tenant_id, event_id, recipient_id, channel, status, "
        "queued_at, next_attempt_at, failed_at, failure_count, "
        "attempts, sent_at, occurred_at) "
        "SELECT tenant_id, event_id, id, 'email', "
        "CASE id % 100 WHEN 0 THEN 'queued' WHEN 1 THEN 'queued' WHEN 2 THEN 'failed' "
        "ELSE 'sent' END, now() - interval '2 hours', now() - interval '1 hour', "
        "CASE WHEN id % 100 = 2 THEN now() END, CASE WHEN id % 100 = 2 THEN 1 ELSE 0 END, "
        "CASE WHEN id % 100 = 0 OR id % 100 = 1 THEN 0 ELSE 1 END, "
        "CASE WHEN id % 100 > 2 THEN now() END, occurred_at "
        "FROM notification_recipient WHERE tenant_id = 'plans'"
    )
    # The queued rows' queue rows; one in two claimed (processing: the rows of id % 100 = 1).
    conn.execute(
        "INSERT INTO notification_delivery_queue (delivery_id, tenant_id, channel, occurred_at, "
        "next_attempt_at, claimed_at, lease_expires_at) "
        "SELECT id, tenant_id, channel, occurred_at, next_attempt_at, "
        "CASE WHEN recipient_id % 100 = 1 THEN now() END, "
        "CASE WHEN recipient_id % 100 = 1 THEN now() + interval '5 minutes' END "
        "FROM notification_delivery WHERE status = 'queued'"
    )
    # A few hundred held for a digest window, beside the history.
    conn.execute(
        "UPDATE notification_delivery SET status = 'held', sent_at = NULL, attempts = 0 "
        "WHERE tenant_id = 'plans' AND id % 100 = 3"
    )
    # One endpoint's webhook history: HISTORY sent, a few hundred waiting or being posted.
    conn.execute(
        "INSERT INTO webhook_endpoint (tenant_id, url, event_types, secret_ciphertext) "
        "VALUES ('plans', 'https://host.example/hooks', ARRAY['event.completed'], 'x')"
    )
    conn.execute(
        "INSERT INTO webhook_message (tenant_id, endpoint_id, event_type, payload, status, "
        "attempts, sent_at, claimed_at, lease_expires_at) "
        "SELECT 'plans', (SELECT id FROM webhook_endpoint WHERE tenant_id = 'plans'), "
        "'event.completed', '{}', "
        "CASE g %% 100 WHEN 0 THEN 'queued' WHEN 1 THEN 'processing' ELSE 'sent' END, "
        "CASE WHEN g %% 200 = 0 THEN 0 ELSE 1 END, CASE WHEN g %% 100 > 1 THEN now() END, "
        "CASE WHEN g %% 100 = 1 THEN now() END, "
        "CASE WHEN g %% 100 = 1 THEN now() + interval '5 minutes' END "
        "FROM generate_series(1, %s) g",
        (HISTORY,),
    )
    conn.execute("VACUUM ANALYZE")


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "spread"])
def db(request: pytest.FixtureRequest, server_url: str) -> Iterator[psycopg.Connection[Any]]:
    name = f"herald_plans_{uuid.uuid4().hex[:10]}"
    url = create_database(server_url, name)
    try:
        migrate.upgrade(url)
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            # The plans are prepared by hand (DEALLOCATE ALL between them): psycopg must not
            # prepare statements of its own on this connection.
            conn.prepare_threshold = None
            _seed(conn, tied=request.param)
            conn.execute("SET plan_cache_mode = force_generic_plan")
            yield conn
    finally:
        drop_database(server_url, name)


def _generic_plan(conn: psycopg.Connection[Any], statement: TextClause, **values: Any) -> Any:
    """The generic plan of `statement`, prepared as psycopg would (EXPLAIN without ANALYZE)."""
    sql, names = _positional(str(statement))
    conn.execute("DEALLOCATE ALL")
    conn.execute(f"PREPARE plan_under_test AS {sql}")
    args = ", ".join(sql_.Literal(_literal(values[n])).as_string(conn) for n in names)
    execute = f"EXECUTE plan_under_test({args})" if names else "EXECUTE plan_under_test"
    row = conn.execute(f"EXPLAIN (FORMAT JSON) {execute}").fetchone()
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return by_parent(plan[0]["Plan"], empty_partitions(conn))


def _scans(plan: dict[str, Any], relation: str) -> list[dict[str, Any]]:
    """The reads of `relation` (of its partitions that hold rows)."""
    return [
        n
        for n in _nodes(plan)
        if n.get("Relation Name") == relation and not n.get("Empty Partition")
    ]


@pytest.mark.parametrize(
    "statement", ["claim_due_operational_emails", "claim_due_operational_emails_of_tenant"]
)
def test_the_operational_email_claim_walks_its_due_index_in_order(
    db: psycopg.Connection[Any], statement: str
) -> None:
    plan = _generic_plan(
        db, MAINTENANCE_SQL[statement], limit=10, lease_seconds=300, tenant_id="plans"
    )
    shown = json.dumps(plan, indent=1)
    kinds = {n["Node Type"] for n in _nodes(plan)}
    assert not kinds & {"Sort", "Incremental Sort", "Hash Join", "Seq Scan"}, shown
    scans = _scans(plan, "operational_email")
    candidate = [n for n in scans if n.get("Alias") == "c"]
    assert [n["Node Type"] for n in candidate] == ["Index Scan"], shown
    assert candidate[0]["Index Name"] == "operational_email_due_idx", shown
    # The LIMIT sits straight above the row locks over the ordered scan: it stops after :limit.
    limits = [n for n in _nodes(plan) if n["Node Type"] == "Limit"]
    assert limits and limits[0]["Plans"][0]["Node Type"] == "LockRows", shown
    # The UPDATE reaches the claimed rows by primary key, whatever the estimate.
    outer = [n for n in scans if n.get("Alias") == "o" and n["Node Type"] != "ModifyTable"]
    assert [n.get("Index Name") for n in outer] == ["operational_email_pkey"], shown


@pytest.mark.parametrize(
    ("statement", "indexes"),
    [
        ("open_deliveries", {"notification_delivery_failed_due_idx"}),
        # The claimed rows' queued_at: each probed by its delivery's key.
        (
            "oldest_delivery_ages",
            {"notification_delivery_failed_due_idx", "notification_delivery_pkey"},
        ),
    ],
)
def test_in_flight_counts_use_the_partial_indexes(
    db: psycopg.Connection[Any], statement: str, indexes: set[str]
) -> None:
    """Queued and processing are counted on the queue table (its due and lease indexes), failed
    on the delivery's failed_due_idx: never a scan of the history."""
    plan = _generic_plan(db, OBSERVABILITY_SQL[statement])
    shown = json.dumps(plan, indent=1)
    scans = _scans(plan, "notification_delivery")
    assert scans and all(n["Node Type"] != "Seq Scan" for n in scans), shown
    assert {n.get("Index Name") for n in scans} == indexes, shown
    # The queue table holds only the rows in flight: however it is read, it is bounded so.
    assert len(_scans(plan, "notification_delivery_queue")) == 2, shown


def test_in_flight_counts_are_right(db: psycopg.Connection[Any]) -> None:
    """The split statement counts what `status IN (…)` counted."""
    counted = db.execute(str(OBSERVABILITY_SQL["open_deliveries"])).fetchall()
    expected = db.execute(
        "SELECT channel, CASE WHEN status = 'queued' AND id IN (SELECT delivery_id FROM "
        "notification_delivery_queue WHERE claimed_at IS NOT NULL) THEN 'processing' "
        "ELSE status END, count(*) FROM notification_delivery "
        "WHERE status IN ('queued', 'failed') GROUP BY 1, 2"
    ).fetchall()
    assert sorted(counted) == sorted(expected) and len(expected) == 3


@pytest.mark.parametrize(
    ("statement", "relation", "indexes"),
    [
        (
            "webhook_messages_waiting",
            "webhook_message",
            {"webhook_message_due_idx", "webhook_message_lease_idx"},
        ),
        ("webhook_endpoint_health", "webhook_message", {"webhook_message_due_idx"}),
        ("digest_groups", "notification_delivery", {"notification_delivery_held_idx"}),
    ],
)
def test_webhook_and_digest_gauges_read_what_waits_not_history(
    db: psycopg.Connection[Any], statement: str, relation: str, indexes: set[str]
) -> None:
    """The scrape's webhook and digest gauges walk the partial indexes of what waits (queued,
    processing, held), never the sent history."""
    plan = _generic_plan(
        db,
        OBSERVABILITY_SQL[statement],
        kinds=["announcement.posted"],
        windows=[3600],
    )
    shown = json.dumps(plan, indent=1)
    scans = _scans(plan, relation)
    assert scans and all(n["Node Type"] != "Seq Scan" for n in scans), shown
    assert {n.get("Index Name") for n in scans} == indexes, shown


def test_webhook_and_digest_gauges_count_right(db: psycopg.Connection[Any]) -> None:
    waiting = dict(db.execute(str(OBSERVABILITY_SQL["webhook_messages_waiting"])).fetchall())
    assert waiting == {
        "queued": HISTORY // 200,
        "retrying": HISTORY // 100 - HISTORY // 200,
        "processing": HISTORY // 100,
    }
    health = db.execute(str(OBSERVABILITY_SQL["webhook_endpoint_health"])).fetchone()
    assert health is not None and health[:3] == (1, 0, 0)
    groups = db.execute(
        _literal_sql(str(OBSERVABILITY_SQL["digest_groups"])),
        {"kinds": ["announcement.posted"], "windows": [3600]},
    ).fetchall()
    # The seeded recipients name no person (user_id NULL), so every held row is in one group;
    # queued two hours ago against a one-hour window: an hour overdue.
    [(channel, pending, due, overdue)] = groups
    assert (channel, pending, due) == ("email", 1, 1)
    assert 3500 < float(overdue) < 3700


def _literal_sql(statement: str) -> str:
    """A :name statement in psycopg's %(name)s style."""
    return re.sub(r"(?<![:\w]):(\w+)", r"%(\1)s", statement)
