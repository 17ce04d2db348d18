"""One person's delivery history reads in index order, in a generic plan (issue 44).

`GET /v1/admin/people/{externalId}/deliveries` pages a person's deliveries newest first by
(queued_at, id). Each statement here is the exact one the service runs
(herald.admin.trace.queries.person_deliveries_statement), compiled for psycopg, PREPAREd with its
values as $n, planned under `plan_cache_mode = force_generic_plan` and its EXPLAIN (FORMAT JSON)
checked: notification_delivery_person_idx walked in every month that holds the person's rows,
the months merged (never appended and sorted), and no Sort of deliveries anywhere.

The person has ROWS notifications (an in-app and an email delivery each, nine in ten read) in two
partitions (this month and the default one), among OTHERS people with EACH, analysed; one test
shows the same data makes the planner sort when the person is reached through the recipient rows
(the query before 0025), so these assertions are not vacuous. The inbox's `unreadOnly=true` list
is checked on the same mostly-read history: it walks notification_recipient_unread_idx, not the
whole-history centre index filtered row by row (test_plans_inbox.py's person is mostly unread).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import Select, select, text, tuple_
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.admin.trace import queries
from herald.admin.trace.queries import PersonDeliveryFilters
from herald.auth.service import Actor
from herald.centre import queries as centre
from herald.db import schema as s
from herald.db import tenancy
from herald.db.compiled import Compiled
from herald.db.engine import libpq_url
from tests.history import heavy_person_events
from tests.integration.test_plans_inbox import generic_plan, index_names, scans_of
from tests.plans import generic_plans_as_app

ROWS = 3000
OTHERS = 1000
EACH = 5
LIMIT = 21  # a page of 20 and the row that says another follows
DELIVERY = "notification_delivery"


@pytest.fixture
def history(database_url: str, tenant: str) -> Iterator[tuple[psycopg.Connection[Any], int]]:
    """A heavy person and OTHERS light ones of `tenant`, their recipients (nine in ten read) and
    deliveries (half of the heavy person's events in this month, half months ago in the default
    partition; queued times interleaved across the two), analysed; a connection as herald_app
    under the tenant."""
    with psycopg.connect(libpq_url(database_url)) as conn:
        person_id = heavy_person_events(
            conn,
            tenant,
            "ana",
            others=OTHERS,
            rows=ROWS,
            channels=["in_app", "email"],
            spacing=timedelta(seconds=1),
            older_half=timedelta(days=120),
        )
        conn.execute(
            """
            WITH rc AS (
                INSERT INTO notification_recipient
                    (tenant_id, event_id, user_id, user_public_id_snapshot, occurred_at, read_at)
                SELECT %(tenant)s, ev.id, p.id, p.public_id, ev.occurred_at,
                       CASE WHEN ev.n %% 10 <> 0 THEN now() END
                FROM person p JOIN ev ON ev.n <= CASE WHEN p.id = %(person)s
                                                     THEN %(rows)s ELSE %(each)s END
                WHERE p.tenant_id = %(tenant)s
                RETURNING id, user_id, event_id, occurred_at
            )
            INSERT INTO notification_delivery
                (tenant_id, recipient_id, user_id, event_id, channel, status, delivered_at,
                 sent_at, queued_at, occurred_at)
            SELECT %(tenant)s, rc.id, rc.user_id, rc.event_id, c.channel, 'delivered', now(),
                   now(), now() - rc.id * interval '1 second', rc.occurred_at
            FROM rc CROSS JOIN (VALUES ('in_app'), ('email')) AS c(channel)
            """,
            {"tenant": tenant, "rows": ROWS, "each": EACH, "person": person_id},
        )
        generic_plans_as_app(
            conn, tenant, ("notification_recipient", DELIVERY, "notification_event", "person")
        )
        # As person_deliveries sets them; the inbox's two are among them.
        inbox = set(tenancy.INBOX_PLANNER_SETTINGS) - {("plan_cache_mode", "force_generic_plan")}
        assert inbox <= set(tenancy.INDEX_ORDER_PLANNER_SETTINGS)
        for name, value in tenancy.INDEX_ORDER_PLANNER_SETTINGS:
            conn.execute(sql.SQL("SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
        yield conn, person_id
        conn.rollback()


def cursor_into(conn: psycopg.Connection[Any], person_id: int, offset: int) -> tuple[datetime, int]:
    """The keyset position `offset` deliveries into the person's history."""
    row = conn.execute(
        "SELECT queued_at, id FROM notification_delivery WHERE user_id = %s "
        "ORDER BY queued_at DESC, id DESC OFFSET %s LIMIT 1",
        (person_id, offset),
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def plan_of(conn: psycopg.Connection[Any], statement: Select[Any]) -> list[dict[str, Any]]:
    return generic_plan(conn, Compiled.of(statement), {})


def assert_walks_the_person_index(nodes: list[dict[str, Any]]) -> None:
    """The person's deliveries come off notification_delivery_person_idx in every month that
    holds them, merged in page order under the LIMIT, and nothing sorts deliveries."""
    assert nodes[0]["Node Type"] == "Limit", nodes[0]
    assert index_names(nodes, DELIVERY) == {"notification_delivery_person_idx"}
    months = {n.get("Partition") for n in scans_of(nodes, DELIVERY)}
    assert len(months) == 2, months  # this month's and the default partition's
    for node in nodes:
        assert node["Node Type"] not in ("Sort", "Incremental Sort"), node
        if node.get("Relation Name") == DELIVERY and not node.get("Empty Partition"):
            assert node["Node Type"] != "Seq Scan", node
            assert node["Node Type"] != "Bitmap Heap Scan", node
    assert any(n["Node Type"] == "Merge Append" for n in nodes), [n["Node Type"] for n in nodes]


def test_first_page_walks_the_person_index(
    history: tuple[psycopg.Connection[Any], int], tenant: str
) -> None:
    conn, person_id = history
    statement = queries.person_deliveries_statement(
        tenant, person_id, PersonDeliveryFilters(), after=None, limit=LIMIT
    )
    assert_walks_the_person_index(plan_of(conn, statement))


def test_deep_page_starts_at_the_cursor(
    history: tuple[psycopg.Connection[Any], int], tenant: str
) -> None:
    conn, person_id = history
    after = cursor_into(conn, person_id, ROWS)
    statement = queries.person_deliveries_statement(
        tenant, person_id, PersonDeliveryFilters(), after=after, limit=LIMIT
    )
    nodes = plan_of(conn, statement)
    assert_walks_the_person_index(nodes)
    person_scans = scans_of(nodes, DELIVERY)
    # The keyset position is an index condition: each month's walk starts at the cursor.
    assert all("queued_at" in n.get("Index Cond", "") for n in person_scans), person_scans


def test_filtered_page_still_walks_the_person_index(
    history: tuple[psycopg.Connection[Any], int], tenant: str
) -> None:
    """The kind, channel and status filters are checked on the walk, not a reason to sort."""
    conn, person_id = history
    filters = PersonDeliveryFilters(kind="announcement.posted", channel="email", status="delivered")
    statement = queries.person_deliveries_statement(
        tenant, person_id, filters, after=cursor_into(conn, person_id, 100), limit=LIMIT
    )
    assert_walks_the_person_index(plan_of(conn, statement))


def test_the_page_is_the_recipient_keyed_page(
    history: tuple[psycopg.Connection[Any], int], tenant: str
) -> None:
    """The delivery's copy of the person selects exactly the rows the recipient's did, in the
    same order: the first and a deep page equal those of the query before 0025, and that query
    sorts the person's deliveries under the same data (so the plan assertions above can fail)."""
    conn, person_id = history
    for after in (None, cursor_into(conn, person_id, ROWS)):
        statement = queries.person_deliveries_statement(
            tenant, person_id, PersonDeliveryFilters(), after=after, limit=LIMIT
        )
        rows = _ids(conn, statement)
        assert rows == _ids(conn, _recipient_keyed(tenant, person_id, after))
        assert len(rows) == LIMIT
    nodes = plan_of(conn, _recipient_keyed(tenant, person_id, None))
    sorts = [n for n in nodes if n["Node Type"] in ("Sort", "Incremental Sort")]
    assert any("queued_at" in " ".join(n.get("Sort Key", [])) for n in sorts), nodes[0]


def _recipient_keyed(
    tenant: str, person_id: int, after: tuple[datetime, int] | None
) -> Select[Any]:
    """The page as it was read before 0025: the person matched on the recipient row."""
    d, r, e = s.notification_delivery, s.notification_recipient, s.notification_event
    where = [d.c.tenant_id == tenant, r.c.user_id == person_id]
    if after is not None:
        where.append(tuple_(d.c.queued_at, d.c.id) < tuple_(after[0], after[1]))
    return (
        select(d.c.id, e.c.kind, r.c.read_at)
        .select_from(d.join(r, r.c.id == d.c.recipient_id).join(e, e.c.id == d.c.event_id))
        .where(*where)
        .order_by(d.c.queued_at.desc(), d.c.id.desc())
        .limit(LIMIT)
    )


def _ids(conn: psycopg.Connection[Any], statement: Select[Any]) -> list[int]:
    compiled = Compiled.of(statement)
    return [row[0] for row in conn.execute(compiled.sql, compiled.defaults).fetchall()]


def inbox_actor(tenant: str, person_id: int) -> Actor:
    return Actor(tenant, "ana", person_id, None, None, None, False)


@pytest.mark.parametrize("deep", [False, True])
def test_unread_only_page_walks_the_unread_index(
    history: tuple[psycopg.Connection[Any], int], tenant: str, deep: bool
) -> None:
    """`unreadOnly=true` over a mostly-read history: the unread index in page order, merged
    across the months and stopping at the page; no Sort, and not the centre index (which would
    step over nine read rows for each unread one)."""
    conn, person_id = history
    actor = inbox_actor(tenant, person_id)
    values = centre.actor_params(actor) | {"limit": LIMIT}
    if deep:
        row = conn.execute(
            "SELECT occurred_at, id FROM notification_recipient WHERE user_id = %s "
            "AND read_at IS NULL ORDER BY occurred_at DESC, id DESC OFFSET %s LIMIT 1",
            (person_id, ROWS // 20),
        ).fetchone()
        assert row is not None
        values["after_at"], values["after_id"] = row
    nodes = generic_plan(conn, centre._list_page(deep, True), values)
    assert nodes[0]["Node Type"] == "Limit", nodes[0]
    recipient = "notification_recipient"
    assert index_names(nodes, recipient) == {"notification_recipient_unread_idx"}
    assert len({n.get("Partition") for n in scans_of(nodes, recipient)}) == 2
    assert any(n["Node Type"] == "Merge Append" for n in nodes)
    for node in nodes:
        assert node["Node Type"] not in ("Sort", "Incremental Sort"), node
    if deep:
        scans = scans_of(nodes, recipient)
        assert all("occurred_at" in n.get("Index Cond", "") for n in scans), scans


async def test_the_planner_settings_hold_for_the_page_only(engine: AsyncEngine) -> None:
    """person_deliveries plans its page without bitmap scans, sorts or JIT (the settings the
    plans above are asserted under); the transaction's own settings are back after the page."""
    async with engine.begin() as conn:
        await conn.execute(text("SET LOCAL enable_bitmapscan = off"))
        await conn.execute(text("SET LOCAL jit = on"))

        async def settings() -> tuple[str, ...]:
            row = (
                await conn.execute(
                    text(
                        "SELECT current_setting('enable_bitmapscan'), "
                        "current_setting('enable_sort'), current_setting('jit')"
                    )
                )
            ).one()
            return tuple(row)

        assert await settings() == ("off", "on", "on")
        async with tenancy.in_index_order(conn):
            assert await settings() == ("off", "off", "off")
        assert await settings() == ("off", "on", "on")
