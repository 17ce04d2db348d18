"""Monthly partitions (herald.db.partitions, issue 12): created ahead by the maintenance tick,
dropped whole by retention, what a month must keep moved to the default partition first.

Each test has a database of its own: it creates and drops partitions, which the shared
database's other tests must not see change under them.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald.config import Settings
from herald.db import migrate, partitions
from herald.db.engine import make_async_engine
from herald.maintenance import retention
from herald.maintenance import service as maintenance
from tests import seed
from tests.conftest import create_database, drop_database
from tests.integration import test_retention as rows

TENANT = "parts"
DAYS = 180


@pytest.fixture
async def db(server_url: str) -> AsyncIterator[tuple[AsyncEngine, Settings]]:
    name = f"herald_parts_{uuid.uuid4().hex[:10]}"
    url = create_database(server_url, name)
    migrate.upgrade(url)
    engine = make_async_engine(url, pool_size=2)
    try:
        yield engine, Settings(database_url=url, retention_days=DAYS, retention_batch_size=1000)
    finally:
        await engine.dispose()
        drop_database(server_url, name)


async def children(conn: AsyncConnection, parent: str) -> dict[str, str]:
    """partition name → its bound, for `parent`."""
    result = await conn.execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(:parent) AND c.relkind = 'r'"
        ),
        {"parent": parent},
    )
    return {str(n): str(b) for n, b in result.all()}


async def where(engine: AsyncEngine, table: str, ids: list[int]) -> dict[int, str]:
    """id → the partition holding it."""
    async with engine.connect() as conn:
        result = await conn.execute(
            text(f"SELECT id, tableoid::regclass::text FROM {table} WHERE id = ANY(:ids)"),
            {"ids": ids},
        )
        return {int(i): str(p) for i, p in result.all()}


async def test_the_tick_keeps_this_month_and_the_next_two_created(
    db: tuple[AsyncEngine, Settings],
) -> None:
    """The maintenance tick creates this month and the next MONTHS_AHEAD wherever one is
    missing, for all three tables, each month with its parent's indexes under the parent's names,
    the delivery's own key to its recipient's month (the attempt has none: 0023), and
    row-level security."""
    engine, settings = db
    now = datetime.now(UTC)
    later = partitions.Month.of(now).next().next().next()  # one month past what exists
    async with engine.begin() as conn:
        for table in reversed(partitions.TABLES):
            await conn.execute(text(f'DROP TABLE "{table}_{partitions.Month.of(now).suffix}"'))
    report = await maintenance.run_tick(engine, settings, backfill_channels=[])
    assert "create_partitions" not in report.failures
    expected = {f"{t}_{partitions.Month.of(now).suffix}" for t in partitions.TABLES}
    assert set(report.partitions_created) == expected
    async with engine.begin() as conn:
        ensured = await partitions.ensure_async(conn, later.start + timedelta(days=3))
    made = [s.split('"')[1] for s in ensured.statements if s.startswith("CREATE TABLE")]
    assert made == [
        f"{t}_{m.suffix}" for t in partitions.TABLES for m in partitions.ahead(later.start)
    ]
    async with engine.connect() as conn:
        for table in partitions.TABLES:
            months = await children(conn, table)
            assert set(months) >= {f"{table}_{m.suffix}" for m in partitions.ahead(now)}
            assert months[f"{table}_{partitions.DEFAULT}"] == "DEFAULT"
        # Every index of every partition: <parent index>_<suffix>, at most 63 bytes.
        found = (
            await conn.execute(
                text(
                    "SELECT c.relname, p.relname, t.relname, pt.relname FROM pg_inherits i "
                    "JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent "
                    "JOIN pg_index x ON x.indexrelid = c.oid JOIN pg_class t ON t.oid = x.indrelid "
                    "JOIN pg_inherits ti ON ti.inhrelid = t.oid "
                    "JOIN pg_class pt ON pt.oid = ti.inhparent "
                    "WHERE pt.relname LIKE 'notification%'"
                )
            )
        ).all()
        assert len(found) > 30
        for child, parent, table, parent_table in found:
            suffix = table.removeprefix(parent_table + "_")
            assert child == f"{parent}_{suffix}", (child, parent, table)
            assert len(child.encode()) <= 63
        # The month's own key, delivery → recipient of the same month; an attempt has none to
        # its delivery (0023: the recorder writes it from the delivery it has just updated).
        keys = dict(
            (
                await conn.execute(
                    text(
                        "SELECT c.relname || '.' || k.conname, pg_get_constraintdef(k.oid) "
                        "FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid "
                        "WHERE k.conrelid IN (to_regclass(:delivery), to_regclass(:attempt)) "
                        "AND k.contype = 'f'"
                    ),
                    {
                        "delivery": f"notification_delivery_{later.suffix}",
                        "attempt": f"notification_delivery_attempt_{later.suffix}",
                    },
                )
            ).all()
        )
        part = f"notification_delivery_{later.suffix}"
        key = keys.pop(f"{part}.{part}_recipient_id_fkey")
        assert f"REFERENCES notification_recipient_{later.suffix}(id, occurred_at)" in key
        assert "ON DELETE CASCADE" in key
        # The event's key is the parent's (inherited by every month); nothing on the attempt.
        assert all(name.startswith(f"{part}.") for name in keys), keys
        unsecured = (
            await conn.execute(
                text(
                    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                    "WHERE c.relkind = 'r' AND i.inhparent::regclass::text LIKE 'notification%' "
                    "AND NOT (c.relrowsecurity AND c.relforcerowsecurity AND EXISTS ("
                    "  SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid "
                    "  AND p.polname = 'herald_tenant_isolation'))"
                )
            )
        ).all()
        assert unsecured == []
    # Idempotent: a second tick creates nothing.
    again = await maintenance.run_tick(engine, settings, backfill_channels=[])
    assert again.partitions_created == [] and "create_partitions" not in again.failures


async def test_a_month_the_default_partition_already_holds_is_left_there(
    db: tuple[AsyncEngine, Settings],
) -> None:
    """A row of a month nobody created lands in the default partition (nothing is refused);
    the tick then leaves that month to the default rather than fail, says so, and creates the
    other months."""
    engine, _ = db
    now = datetime.now(UTC)
    far = partitions.Month.of(now)
    for _ in range(5):
        far = far.next()
    async with engine.begin() as conn:
        person = await seed.person(conn, TENANT)
        # Two days into that month (a negative age: the future), as its event and its recipient.
        age = (now - (far.start + timedelta(days=2))).total_seconds() / 86400
        event_id = await rows.event(conn, TENANT, age_days=age, finished=False)
        rid = await rows.recipient(conn, TENANT, event_id, person, age)
    assert await where(engine, "notification_recipient", [rid]) == {
        rid: "notification_recipient_default"
    }
    async with engine.begin() as conn:
        ensured = await partitions.ensure_async(conn, far.start)
    assert ensured.blocked == [far]
    made = {s.split('"')[1] for s in ensured.statements if s.startswith("CREATE TABLE")}
    assert made == {
        f"{t}_{m.suffix}" for t in partitions.TABLES for m in (far.next(), far.next().next())
    }
    assert await where(engine, "notification_recipient", [rid]) == {
        rid: "notification_recipient_default"
    }


async def _month_with_history(engine: AsyncEngine, month: partitions.Month) -> dict[str, Any]:
    """Events in `month` (its partitions created as the tick would have then): two plain
    finished ones, one holding a queued email, one whose email is named by an unreplayed dead
    letter, one whose dead letter was replayed."""
    async with engine.begin() as conn:
        await conn.run_sync(lambda sync: partitions.ensure(sync, [month]))
    age = (datetime.now(UTC) - (month.start + timedelta(days=10))).total_seconds() / 86400
    made: dict[str, Any] = {"events": {}, "deliveries": {}}
    async with engine.begin() as conn:
        people = [await seed.person(conn, TENANT) for _ in range(2)]
        for label, status, letter in (
            ("plain", "sent", None),
            ("plain2", "sent", None),
            ("queued", "queued", None),
            ("dead", "dead", "unreplayed"),
            ("replayed", "dead", "replayed"),
        ):
            event_id = await rows.event(conn, TENANT, age_days=age)
            made["events"][label] = event_id
            for person in people:
                rid = await rows.recipient(conn, TENANT, event_id, person, age)
                await rows.delivery(
                    conn, TENANT, event_id, rid, channel="in_app", status="delivered"
                )
                target = await rows.delivery(conn, TENANT, event_id, rid, status=status, attempts=2)
                made["deliveries"].setdefault(label, []).append(target.id)
                if letter is not None:
                    await rows.dead_letter(conn, TENANT, target, replayed=letter == "replayed")
                    letter = None  # one letter per event
    return made


async def test_retention_drops_an_aged_month_and_keeps_what_it_must(
    db: tuple[AsyncEngine, Settings],
) -> None:
    """A month wholly past the retention window goes as three DROPs. The events retention must
    keep — a delivery still queued (R-RETENTION-3), one named by an unreplayed dead letter
    (R-RETENTION-4) — are first copied, every row and id as it was, into the default partition;
    the rest of the month, and the events left childless, are gone."""
    engine, settings = db
    month = partitions.Month.of(datetime.now(UTC) - timedelta(days=DAYS + 70))
    made = await _month_with_history(engine, month)
    kept = [made["events"]["queued"], made["events"]["dead"]]
    kept_deliveries = made["deliveries"]["queued"] + made["deliveries"]["dead"]
    async with engine.connect() as conn:
        before = {
            row.id: tuple(row)
            for row in (
                await conn.execute(
                    text(
                        "SELECT id, public_id, recipient_id, status, attempts, occurred_at "
                        "FROM notification_delivery WHERE event_id = ANY(:e)"
                    ),
                    {"e": kept},
                )
            ).all()
        }
    report = await retention.prune_events(engine, settings, max_batches=None)
    assert report.months_dropped == [month.suffix]
    assert report.kept_events == 2
    async with engine.connect() as conn:
        assert not any(month.suffix in p for p in await children(conn, "notification_delivery"))
        after = {
            row.id: tuple(row)
            for row in (
                await conn.execute(
                    text(
                        "SELECT id, public_id, recipient_id, status, attempts, occurred_at "
                        "FROM notification_delivery WHERE event_id = ANY(:e)"
                    ),
                    {"e": kept},
                )
            ).all()
        }
        assert after == before  # every kept delivery, unchanged
        attempts = (
            await conn.execute(
                text(
                    "SELECT count(*) FROM notification_delivery_attempt WHERE delivery_id = ANY(:d)"
                ),
                {"d": kept_deliveries},
            )
        ).scalar_one()
        assert attempts == 2 * len(kept_deliveries)
        left = set(
            (
                await conn.execute(
                    text("SELECT id FROM notification_event WHERE id = ANY(:e)"),
                    {"e": list(made["events"].values())},
                )
            ).scalars()
        )
    assert left == set(kept)
    places = await where(engine, "notification_delivery", kept_deliveries)
    assert set(places.values()) == {"notification_delivery_default"}
    # A kept event goes by the bounded deletes once it may: its dead letter replayed.
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE dead_letter SET replayed_at = now(), replayed_by = 'ops' "
                "WHERE replayed_at IS NULL"
            )
        )
        await conn.execute(
            text(
                "UPDATE notification_delivery SET status = 'cancelled' WHERE status = 'queued' "
                "AND event_id = :e"
            ),
            {"e": made["events"]["queued"]},
        )
    again = await retention.prune_events(engine, settings, max_batches=None)
    assert again.deliveries == 8 and again.events == 2


async def test_a_month_keeping_more_than_it_may_move_falls_back_to_bounded_deletes(
    db: tuple[AsyncEngine, Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over MOVE_LIMIT kept deliveries, the month is not dropped: the bounded deletes take what
    may go, event by event, and the kept events stay whole where they are."""
    engine, settings = db
    monkeypatch.setattr(partitions, "MOVE_LIMIT", 1)
    month = partitions.Month.of(datetime.now(UTC) - timedelta(days=DAYS + 70))
    made = await _month_with_history(engine, month)
    report = await retention.prune_events(engine, settings, max_batches=None)
    assert report.months_dropped == []
    assert report.events == 3  # plain, plain2, replayed
    async with engine.connect() as conn:
        assert any(month.suffix in p for p in await children(conn, "notification_delivery"))
    kept = made["deliveries"]["queued"] + made["deliveries"]["dead"]
    places = await where(engine, "notification_delivery", kept)
    assert set(places.values()) == {f"notification_delivery_{month.suffix}"}


async def test_a_row_waits_for_its_month_to_age_whole(db: tuple[AsyncEngine, Settings]) -> None:
    """The bounded deletes stop at the start of the cutoff's month when that month is a
    partition: a row just past the window lives until its month is dropped (at most a month
    longer), instead of being deleted row by row out of a month about to be dropped whole."""
    engine, settings = db
    cutoff = datetime.now(UTC) - timedelta(days=DAYS)
    month = partitions.Month.of(cutoff)
    if cutoff - month.start < timedelta(hours=2):
        pytest.skip("the cutoff is at its month's first hours: no room for a row before it")
    async with engine.begin() as conn:
        await conn.run_sync(lambda sync: partitions.ensure(sync, [month]))
        person = await seed.person(conn, TENANT)
        event_id = await rows.event(conn, TENANT, age_days=DAYS + 1 / 24)
        await rows.recipient(conn, TENANT, event_id, person, DAYS + 1 / 24)
    report = await retention.prune_events(engine, settings, max_batches=None)
    assert report.months_dropped == [] and report.recipients == 0 and report.events == 0
    async with engine.connect() as conn:
        layout = await partitions.layout(conn)
    assert layout.aged_before(DAYS) == month.start
    # Without the month's partition the same row would go now (the default's rows are aged
    # row by row, to the day).
    assert partitions.Layout(layout.now, [], False).aged_before(DAYS) < layout.now


async def test_the_legacy_partitions_age_out_and_are_dropped_once_empty(server_url: str) -> None:
    """On a database migrated while it held rows, the old tables are the legacy partitions:
    the bounded deletes empty them as their rows age, and retention then drops them."""
    name = f"herald_parts_{uuid.uuid4().hex[:10]}"
    url = create_database(server_url, name)
    engine = make_async_engine(url, pool_size=2)
    try:
        migrate.upgrade(url, "0020")
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    """
                    WITH p AS (
                        INSERT INTO person (tenant_id, external_id) VALUES ('t', 'ana')
                        RETURNING id, public_id
                    ), e AS (
                        INSERT INTO notification_event
                            (tenant_id, kind, category, priority, audience, channels,
                             dedupe_key, occurred_at, fanout_claimed_at, fanout_claim_token,
                             fanout_completed_at, recipient_count)
                        SELECT 't', 'announcement.posted', 'announcement', 'normal',
                               '{"kind": "all_users"}', ARRAY['email'], repeat(g::text, 64),
                               now() - make_interval(days => 200 + g * 30), now(),
                               gen_random_uuid(), now(), 1
                          FROM generate_series(1, 3) g
                        RETURNING id, occurred_at
                    ), r AS (
                        INSERT INTO notification_recipient
                            (tenant_id, event_id, user_id, user_public_id_snapshot, occurred_at)
                        SELECT 't', e.id, p.id, p.public_id, e.occurred_at FROM e, p
                        RETURNING id, event_id
                    )
                    INSERT INTO notification_delivery
                        (tenant_id, event_id, recipient_id, channel, status, sent_at)
                    SELECT 't', r.event_id, r.id, 'email', 'sent', now() FROM r
                    """
                )
            )
        migrate.upgrade(url)
        async with engine.connect() as conn:
            assert (await partitions.layout(conn)).legacy
        settings = Settings(database_url=url, retention_days=DAYS, retention_batch_size=1000)
        first = await retention.prune_events(engine, settings, max_batches=None)
        assert (first.deliveries, first.recipients, first.events) == (3, 3, 3)
        assert first.months_dropped == []  # emptied by this run, dropped by the next
        second = await retention.prune_events(engine, settings, max_batches=None)
        assert second.months_dropped == [partitions.LEGACY]
        async with engine.connect() as conn:
            layout = await partitions.layout(conn)
            assert not layout.legacy
            for table in partitions.TABLES:
                assert not any(p.endswith("_legacy") for p in await children(conn, table))
    finally:
        await engine.dispose()
        drop_database(server_url, name)
