"""The fan-out's hot statements keep their indexes under a GENERIC plan.

psycopg prepares a statement from its fifth run on a connection, and PostgreSQL may then use one
generic plan that knows no parameter value. A partial index is usable in a generic plan only if
its predicate follows from the SQL text alone — which is why the constants that select one
(`fanout_claimed_at IS NULL`, `is_active`, …) are written in the SQL, never bound. Each
statement here is PREPAREd exactly as the fan-out runs it, planned with
plan_cache_mode = force_generic_plan, and its EXPLAIN (FORMAT JSON) must name the intended index.

enable_seqscan is off so that a tiny test table does not make a sequential scan merely cheaper:
what is checked is that the index is *usable* by the statement's shape. A predicate that did not
imply the index's (a bound constant, a coalesce in another order) leaves the planner no choice
but the disabled scan, and the test fails.

The batch write's audience page is planned custom on purpose (herald.audience.queries: a generic
plan knows neither tenant nor cursor); its other probes — preferences, push tokens, the recipient
conflict arbiter — are checked here under a generic plan too.
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
from sqlalchemy.dialects import postgresql

from herald.audience import service as audience
from herald.db.engine import libpq_url
from herald.fanout.pagewrite import queries as pagewrite
from herald.fanout.queries import SQL
from herald.fanout.wording import in_app_wording
from herald.kinds.sample import SAMPLE_REGISTRY
from tests.plans import by_parent


def _named_to_positional(sql: str) -> tuple[str, list[str]]:
    """`:name` → `$n` (first appearance order); `::type` casts are left alone."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return re.sub(r"(?<![:\w]):([a-z_][a-z_0-9]*)", number, sql), names


EVENT_MONTH_KEY = "notification_event_id_occurred_at_key"


def _indexes(plan: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(plan, dict):
        if "Index Name" in plan:
            found.add(plan["Index Name"])
        for value in plan.values():
            found |= _indexes(value)
    elif isinstance(plan, list):
        for item in plan:
            found |= _indexes(item)
    return found


def _scans(plan: Any) -> set[tuple[str, str]]:
    """(node type, relation) of every scan that reads a table."""
    found: set[tuple[str, str]] = set()
    if isinstance(plan, dict):
        if "Relation Name" in plan and plan.get("Node Type", "").endswith("Scan"):
            found.add((plan["Node Type"], plan["Relation Name"]))
        for value in plan.values():
            found |= _scans(value)
    elif isinstance(plan, list):
        for item in plan:
            found |= _scans(item)
    return found


def _nodes(plan: Any) -> Iterator[dict[str, Any]]:
    if isinstance(plan, dict):
        yield plan
        for value in plan.values():
            yield from _nodes(value)
    elif isinstance(plan, list):
        for item in plan:
            yield from _nodes(item)


def _index_conds(plan: Any, relation: str) -> list[str]:
    return [
        str(node["Index Cond"])
        for node in _nodes(plan)
        if node.get("Relation Name") == relation and "Index Cond" in node
    ]


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(libpq_url(database_url)) as connection:
        connection.execute("SET plan_cache_mode = force_generic_plan")
        connection.execute("SET enable_seqscan = off")
        yield connection
        connection.rollback()


def generic_plan(conn: psycopg.Connection[Any], sql: str, values: dict[str, Any]) -> Any:
    positional, names = _named_to_positional(sql)
    name = f"fx_{uuid.uuid4().hex[:8]}"
    conn.execute(f"PREPARE {name} AS {positional}")  # type: ignore[arg-type]
    args = f"({', '.join(['%s'] * len(names))})" if names else ""
    cursor = psycopg.ClientCursor(conn)
    cursor.execute(
        f"EXPLAIN (FORMAT JSON) EXECUTE {name}{args}",  # type: ignore[arg-type]
        [values[n] for n in names],
    )
    row = cursor.fetchone()
    assert row is not None
    plan = row[0]
    return by_parent(plan if not isinstance(plan, str) else json.loads(plan))


TOKEN = uuid.uuid4()

CASES = [
    ("claim_event", {"token": TOKEN, "tenant_id": None, "holder": 1}, "notification_event_fanout_due_idx"),
    ("claim_event", {"token": TOKEN, "tenant_id": "t", "holder": 1}, "notification_event_fanout_due_idx"),
    ("lock_claimed_event", {"event_id": 1, "token": TOKEN}, "notification_event_pkey"),
    ("advance_cursor", {"event_id": 1, "token": TOKEN, "cursor": 5}, "notification_event_pkey"),
    ("complete_fanout", {"event_id": 1, "token": TOKEN, "cursor": 5}, "notification_recipient_event_user_key"),
    ("release_stale_fanout_claims", {"older_than_seconds": 60, "limit": 100}, "notification_event_fanout_claimed_idx"),
    ("release_orphaned_fanout_claims", {"namespace": 7, "limit": 100}, "notification_event_fanout_claimed_idx"),
    ("release_own_claim", {"event_id": 1, "token": TOKEN}, "notification_event_pkey"),
    ("wake_if_due", {}, "notification_event_fanout_due_idx"),
]  # fmt: skip


@pytest.mark.parametrize(("statement", "values", "index"), CASES)
def test_hot_statement_uses_its_index_under_a_generic_plan(
    conn: psycopg.Connection[Any], statement: str, values: dict[str, Any], index: str
) -> None:
    plan = generic_plan(conn, str(SQL[statement].text), values)
    # An event by id: its primary key, or the (id, occurred_at) key its recipients name, which
    # starts with the id too (one probe either way).
    accepted = {index} | ({EVENT_MONTH_KEY} if index == "notification_event_pkey" else set())
    assert accepted & _indexes(plan), json.dumps(plan, indent=1)[:3000]
    assert not {t for t in _scans(plan) if t[0] == "Seq Scan"}, _scans(plan)


def test_batch_write_probes_use_their_indexes_under_a_generic_plan(
    conn: psycopg.Connection[Any],
) -> None:
    """The set-based batch write (fanout.pagewrite) over in_app + email + push: preferences by
    their primary keys, push tokens by the partial active-token index (its `is_active` is in the
    SQL text), the recipient insert's conflict arbiter, the page by the live keyset index."""
    kind = SAMPLE_REGISTRY.get("announcement.posted")
    assert kind is not None
    channels = ["in_app", "email", "push"]
    page = audience.page_statement("t", {"kind": "all_users"}, pagewrite.CURSOR, 500)
    statement = pagewrite.statement(
        page,
        tenant_id="t",
        event_id=1,
        occurred_at=datetime(2026, 12, 1, tzinfo=UTC),
        category=kind.category,
        channels=channels,
        kind=kind,
        renders_in_app=True,
    )
    wording = in_app_wording(kind, dict(kind.variables), {})
    compiled = statement.compile(dialect=postgresql.psycopg.dialect())  # type: ignore[attr-defined]
    sql = re.sub(r"%\((\w+)\)s", r":\1", str(compiled))
    values = compiled.construct_params({"fanout_after": 0, **pagewrite.wording_params(wording)})
    plan = generic_plan(conn, sql, values)
    used = _indexes(plan)
    # The page's walk starts at the cursor: an index condition on one of person's id-ordered
    # indexes, never a filter (test_page_under_row_level_security_starts_at_the_cursor).
    walks = [c for c in _index_conds(plan, "person") if re.search(r"\bid > |>= ROW\(", c)]
    assert walks, json.dumps(plan, indent=1)[:3000]
    for index in ("notification_preference_pkey", "notification_channel_preference_pkey"):
        assert index in used, (index, sorted(used))
    # Either of push tokens' two partial indexes (both `WHERE is_active`, usable only because the
    # constant is in the SQL text): which one depends on the table's statistics, which in a shared
    # test database depend on what other tests wrote.
    partial = {"notification_push_token_person_idx", "notification_push_token_active_token_key"}
    assert partial & used, sorted(used)
    assert not {t for t in _scans(plan) if t[0] == "Seq Scan"}, _scans(plan)
    arbiter = json.dumps(plan)
    assert "notification_recipient_event_user_key" in arbiter


def test_page_under_row_level_security_starts_at_the_cursor(database_url: str) -> None:
    """The fan-out reads its pages as herald_app, under the tenant policy, custom-planned. The
    policy's `tenant_id = current_setting(…)` makes the tenant a planner constant, so the primary
    key also delivers the page's order; the cursor must then still be an index condition. It was
    a filter: a late page of 3,000 people walked the tenant's people from the first, discarding
    each one before the cursor (the fan-out grew quadratically with the audience). One tenant in
    the table, as in the benches: beside other tenants' rows the planner chose the keyset index."""
    with psycopg.connect(libpq_url(database_url)) as connection:
        for tenant, people in (("t", 3000),):
            with connection.cursor().copy(
                "COPY person (tenant_id, external_id, full_name, locale) FROM STDIN"
            ) as copy:
                for i in range(people):
                    copy.write_row((tenant, f"{tenant}{i}", f"Person {i}", "en"))
        connection.execute("ANALYZE person")
        row = connection.execute(
            "SELECT id FROM person WHERE tenant_id = 't' ORDER BY id OFFSET 2499 LIMIT 1"
        ).fetchone()
        assert row is not None
        cursor = int(row[0])
        connection.execute("SELECT set_config('role', 'herald_app', true)")
        connection.execute("SELECT set_config('herald.tenant_id', 't', true)")
        connection.execute("SET LOCAL plan_cache_mode = force_custom_plan")
        page = audience.page_statement("t", {"kind": "all_users"}, cursor, 100)
        compiled = page.compile(dialect=postgresql.psycopg.dialect())  # type: ignore[attr-defined]
        explained = psycopg.ClientCursor(connection).execute(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {compiled}",  # type: ignore[arg-type]
            compiled.params,
        )
        found = explained.fetchone()
        assert found is not None
        plan = by_parent(found[0] if not isinstance(found[0], str) else json.loads(found[0]))
        people = [n for n in _nodes(plan) if n.get("Relation Name") == "person"]
        assert people, plan
        discarded = sum(int(n.get("Rows Removed by Filter", 0)) for n in people)
        assert discarded < 100, json.dumps(plan, indent=1)[:3000]
        assert plan[0]["Plan"]["Actual Rows"] == 100
        connection.rollback()
