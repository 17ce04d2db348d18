"""The inbox's hot statements keep their indexes in a generic plan (issue 19).

psycopg prepares a statement after a few executions, and PostgreSQL may then plan it once for any
parameter values (a generic plan). A value that selects a partial index (`channel = 'in_app' AND
status = 'delivered'` for notification_delivery_inbox_idx, `read_at IS NULL` for
notification_recipient_unread_idx) must therefore be written into the SQL text: a bound one would
make the partial index unusable in the generic plan. Each statement here is the exact SQL the API
sends (herald.centre.queries, compiled once), PREPAREd with its parameters as $n, planned under
`plan_cache_mode = force_generic_plan`, and its EXPLAIN (FORMAT JSON) checked: the intended index,
no sequential scan of the inbox tables, no Sort over the person's history.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from herald.auth.service import Actor
from herald.centre import queries
from herald.db import tenancy
from herald.db.compiled import Compiled
from herald.db.engine import libpq_url
from tests import history
from tests.plans import by_parent, empty_partitions, generic_plans_as_app

INBOX_TABLES = ("notification_recipient", "notification_delivery")
# One heavy person (ROWS notifications) among OTHERS people with EACH: a generic plan estimates
# `user_id = $1` from the average person, as it would on a real inbox.
ROWS = 3000
OTHERS = 1000
EACH = 5
BOUND_CONSTANT = re.compile(r"\b(channel|status) = \(?\$\d")


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)


def prepared(compiled: Compiled) -> tuple[str, list[str]]:
    """The compiled SQL with each `%(name)s` as `$n` (the order of first use) and the names."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return re.sub(r"%\(([a-z_0-9]+)\)s", number, compiled.sql), names


@pytest.fixture
def inbox(database_url: str, tenant: str) -> Iterator[tuple[psycopg.Connection[Any], Actor]]:
    """A person of `tenant` with ROWS delivered in-app notifications (a third read, a third under a
    staff role they hold) and an email delivery beside each, OTHERS people with EACH, analysed; a
    connection as herald_app under the tenant, as the API runs."""
    with psycopg.connect(libpq_url(database_url)) as conn:
        role_id = conn.execute(
            "INSERT INTO role (tenant_id, code, name, scope_kind) "
            "VALUES (%s, 'teacher', 'Teacher', 'staff') RETURNING id",
            (tenant,),
        ).fetchone()[0]  # type: ignore[index]
        person_id = history.heavy_person_events(
            conn,
            tenant,
            "ana",
            others=OTHERS,
            rows=ROWS,
            channels=["in_app", "email"],
            spacing=timedelta(minutes=1),
            numbered_by="occurred_at DESC",
        )
        conn.execute(
            "INSERT INTO person_role (tenant_id, person_id, role_id) VALUES (%s, %s, %s)",
            (tenant, person_id, role_id),
        )
        conn.execute(
            """
            WITH rc AS (
                INSERT INTO notification_recipient
                    (tenant_id, event_id, user_id, user_public_id_snapshot, audience_role_id,
                     occurred_at, read_at)
                SELECT %(tenant)s, ev.id, p.id, p.public_id,
                       CASE WHEN p.id = %(person)s AND ev.n %% 3 = 0
                            THEN %(role)s::bigint END,
                       ev.occurred_at,
                       CASE WHEN ev.n %% 3 = 1 THEN now() END
                FROM person p JOIN ev ON ev.n <= CASE WHEN p.id = %(person)s
                                                     THEN %(rows)s ELSE %(each)s END
                WHERE p.tenant_id = %(tenant)s
                RETURNING id, event_id, occurred_at
            )
            INSERT INTO notification_delivery
                (tenant_id, recipient_id, event_id, channel, status, delivered_at, sent_at,
                 rendered_title, rendered_body, occurred_at)
            SELECT %(tenant)s, rc.id, rc.event_id, c.channel, 'delivered', now(), now(), 't', 'b',
                   rc.occurred_at
            FROM rc CROSS JOIN (VALUES ('in_app'), ('email')) AS c(channel)
            """,
            {
                "tenant": tenant,
                "rows": ROWS,
                "each": EACH,
                "person": person_id,
                "role": role_id,
            },
        )
        generic_plans_as_app(
            conn, tenant, (*INBOX_TABLES, "notification_event", "person_role", "role")
        )
        for name, value in tenancy.INBOX_PLANNER_SETTINGS:  # as actor_transaction sets them
            conn.execute(sql.SQL("SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
        actor = Actor(
            tenant_id=tenant,
            external_id="ana",
            person_id=person_id,
            role_code="teacher",
            role_id=role_id,
            role_scope_kind="staff",
            holds_role=True,
        )
        yield conn, actor
        conn.rollback()


def generic_plan(
    conn: psycopg.Connection[Any], compiled: Compiled, values: dict[str, Any]
) -> list[dict[str, Any]]:
    """EXPLAIN (FORMAT JSON) of the statement PREPAREd and EXECUTEd with `values` under the
    session's force_generic_plan: the plan every later execution would reuse."""
    text, names = prepared(compiled)
    name = f"hot_{uuid.uuid4().hex[:8]}"
    conn.execute(sql.SQL("PREPARE {} AS ").format(sql.Identifier(name)) + sql.SQL(text))
    params = compiled.defaults | values
    args = sql.SQL(", ").join(sql.Literal(params[n]) for n in names)
    [(explained,)] = conn.execute(
        sql.SQL("EXPLAIN (FORMAT JSON) EXECUTE {}({})").format(sql.Identifier(name), args)
    ).fetchall()
    conn.execute(sql.SQL("DEALLOCATE {}").format(sql.Identifier(name)))
    assert "$1" in text  # really a parameterised statement
    return list(plan_nodes(by_parent(explained[0]["Plan"], empty_partitions(conn))))


def scans_of(nodes: list[dict[str, Any]], table: str) -> list[dict[str, Any]]:
    """The scans of `table`'s partitions that hold rows (not the ModifyTable node of an
    UPDATE; a month with no row costs nothing whatever is planned for it)."""
    return [
        n
        for n in nodes
        if n.get("Relation Name") == table
        and "Scan" in n["Node Type"]
        and not n.get("Empty Partition")
    ]


def index_names(nodes: list[dict[str, Any]], table: str) -> set[str | None]:
    return {n.get("Index Name") for n in scans_of(nodes, table)}


def assert_no_history_scan(nodes: list[dict[str, Any]]) -> None:
    """No sequential scan of the inbox tables and no sort of recipient rows."""
    for node in nodes:
        if node.get("Relation Name") in INBOX_TABLES and not node.get("Empty Partition"):
            assert node["Node Type"] != "Seq Scan", node
        if node["Node Type"] in ("Sort", "Incremental Sort"):
            keys = " ".join(node.get("Sort Key", []))
            assert "occurred_at" not in keys and "notification_recipient" not in keys, node


def assert_delivery_probe_uses_inbox_index(nodes: list[dict[str, Any]]) -> None:
    """The delivered-in-app probe reads the partial index (the constants are in the SQL text)."""
    names = index_names(nodes, "notification_delivery")
    assert "notification_delivery_inbox_idx" in names, names
    for node in scans_of(nodes, "notification_delivery"):
        # The channel and status are constants of the SQL text, never bound values.
        for condition in (node.get("Filter", ""), node.get("Index Cond", "")):
            assert not BOUND_CONSTANT.search(condition), node


def list_values(actor: Actor, after: tuple[datetime, int] | None = None) -> dict[str, Any]:
    values = queries.actor_params(actor) | {"limit": 21}
    if after is not None:
        values["after_at"], values["after_id"] = after
    return values


def cursor_into(
    conn: psycopg.Connection[Any], actor: Actor, offset: int, *, unread_only: bool
) -> tuple[datetime, int]:
    """The keyset position `offset` items into the person's list (unread items only, or all)."""
    unread = "AND read_at IS NULL " if unread_only else ""
    row = conn.execute(
        "SELECT occurred_at, id FROM notification_recipient WHERE user_id = %s "
        + unread
        + "ORDER BY occurred_at DESC, id DESC OFFSET %s LIMIT 1",
        (actor.person_id, offset),
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def test_first_page_walks_the_centre_index(inbox: tuple[psycopg.Connection[Any], Actor]) -> None:
    conn, actor = inbox
    nodes = generic_plan(conn, queries._list_page(False, False), list_values(actor))
    assert index_names(nodes, "notification_recipient") == {"notification_recipient_centre_idx"}
    assert nodes[0]["Node Type"] == "Limit"
    assert_no_history_scan(nodes)
    assert_delivery_probe_uses_inbox_index(nodes)


def test_deep_cursor_page_walks_the_centre_index(
    inbox: tuple[psycopg.Connection[Any], Actor],
) -> None:
    conn, actor = inbox
    nodes = generic_plan(
        conn,
        queries._list_page(True, False),
        list_values(actor, cursor_into(conn, actor, ROWS // 2, unread_only=False)),
    )
    recipient_scans = scans_of(nodes, "notification_recipient")
    assert {n.get("Index Name") for n in recipient_scans} == {"notification_recipient_centre_idx"}
    # The keyset position is an index condition: the scan starts at the cursor.
    assert any("occurred_at" in n.get("Index Cond", "") for n in recipient_scans), recipient_scans
    assert_no_history_scan(nodes)
    assert_delivery_probe_uses_inbox_index(nodes)


def test_unread_count_reads_the_unread_index_and_stops(
    inbox: tuple[psycopg.Connection[Any], Actor],
) -> None:
    conn, actor = inbox
    nodes = generic_plan(conn, queries._unread_count(), queries.actor_params(actor))
    assert index_names(nodes, "notification_recipient") == {"notification_recipient_unread_idx"}
    limits = [n for n in nodes if n["Node Type"] == "Limit"]
    assert limits, "the count must stop at UNREAD_COUNT_CAP rows"
    assert_no_history_scan(nodes)
    assert_delivery_probe_uses_inbox_index(nodes)


def test_mark_read_is_one_unique_lookup(inbox: tuple[psycopg.Connection[Any], Actor]) -> None:
    conn, actor = inbox
    public_id = conn.execute(
        "SELECT public_id FROM notification_recipient WHERE user_id = %s LIMIT 1",
        (actor.person_id,),
    ).fetchone()[0]  # type: ignore[index]
    nodes = generic_plan(
        conn, queries._mark_read(), queries.actor_params(actor) | {"public_id": public_id}
    )
    assert index_names(nodes, "notification_recipient") == {"notification_recipient_public_id_key"}
    assert_no_history_scan(nodes)
    assert_delivery_probe_uses_inbox_index(nodes)


def test_read_all_reads_only_unread_rows(inbox: tuple[psycopg.Connection[Any], Actor]) -> None:
    conn, actor = inbox
    nodes = generic_plan(conn, queries._mark_all_read(), queries.actor_params(actor))
    assert index_names(nodes, "notification_recipient") == {"notification_recipient_unread_idx"}
    assert_no_history_scan(nodes)
    assert_delivery_probe_uses_inbox_index(nodes)


def test_unread_only_first_page_walks_an_index_in_page_order(
    inbox: tuple[psycopg.Connection[Any], Actor],
) -> None:
    """`unreadOnly=true`: the person's unread rows in the page's order, stopping at the page,
    never all of them sorted (the unread index carries occurred_at and id)."""
    conn, actor = inbox
    nodes = generic_plan(conn, queries._list_page(False, True), list_values(actor))
    assert nodes[0]["Node Type"] == "Limit"
    assert index_names(nodes, "notification_recipient") <= {
        "notification_recipient_centre_idx",
        "notification_recipient_unread_idx",
    }
    assert_no_history_scan(nodes)
    assert_delivery_probe_uses_inbox_index(nodes)


def test_unread_only_deep_page_starts_at_the_cursor(
    inbox: tuple[psycopg.Connection[Any], Actor],
) -> None:
    conn, actor = inbox
    nodes = generic_plan(
        conn,
        queries._list_page(True, True),
        list_values(actor, cursor_into(conn, actor, ROWS // 3, unread_only=True)),
    )
    recipient_scans = scans_of(nodes, "notification_recipient")
    assert any("occurred_at" in n.get("Index Cond", "") for n in recipient_scans), recipient_scans
    assert_no_history_scan(nodes)
    assert_delivery_probe_uses_inbox_index(nodes)
