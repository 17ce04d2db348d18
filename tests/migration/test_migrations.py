"""Migrations produce exactly db/schema.py, and every migration's down reverses its up."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from psycopg.rows import TupleRow
from sqlalchemy import create_engine, pool

from herald import vocabulary
from herald.db import migrate, partitions, schema
from herald.db.engine import libpq_url, sqlalchemy_url
from tests.conftest import create_database, drop_database

CATALOG = """
SELECT 'column', c.relname || '.' || a.attname,
       format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
       || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
       || CASE WHEN a.attidentity <> '' THEN ' identity' ELSE '' END
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid AND c.relkind = 'r'
  JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE a.attnum > 0 AND NOT a.attisdropped AND c.relname <> 'alembic_version'
UNION ALL
SELECT 'constraint', c.relname || '.' || k.conname, pg_get_constraintdef(k.oid)
  FROM pg_constraint k
  JOIN pg_class c ON c.oid = k.conrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
 WHERE c.relname <> 'alembic_version'
UNION ALL
SELECT 'index', i.indexname, i.indexdef
  FROM pg_indexes i
 WHERE i.schemaname = 'public' AND i.tablename <> 'alembic_version'
ORDER BY 1, 2
"""


def catalog(url: str) -> list[tuple[str, str, str]]:
    with psycopg.connect(libpq_url(url)) as conn:
        return [tuple(row) for row in conn.execute(CATALOG).fetchall()]  # type: ignore[misc]


Conn = psycopg.Connection[TupleRow]
Fetched = tuple[Any, ...] | None  # a row as fetchone() gives it
T = TypeVar("T")


def round_trip(
    database: str,
    before: str,
    after: str,
    *,
    populate: Callable[[Conn], T],
    check: Callable[[Conn, T], None],
    after_down: Callable[[Conn, T], None] | None = None,
    legacy_rows: bool = False,
) -> None:
    """The shape of a migration's test on a populated database: at revision `before`,
    `populate` writes the rows the migration must carry (and returns what the checks compare
    with); `after` is applied and `check` looks; then down to `before` again, whose catalog
    must come back exactly, and `after_down` looks at the rows that are left. With
    `legacy_rows` the database first stops at 0020 for POPULATE_0020's rows of several months,
    which 0021 makes the legacy partitions. Each step has its own connection, committed when it
    returns."""
    url = libpq_url(database)
    if legacy_rows:
        migrate.upgrade(database, "0020")
        with psycopg.connect(url) as conn:
            conn.execute(POPULATE_0020)
    migrate.upgrade(database, before)
    with psycopg.connect(url) as conn:
        kept = populate(conn)
    before_catalog = catalog(database)
    migrate.upgrade(database, after)
    with psycopg.connect(url) as conn:
        check(conn, kept)
    migrate.downgrade(database, before)
    assert catalog(database) == before_catalog
    if after_down is not None:
        with psycopg.connect(url) as conn:
            after_down(conn, kept)


def no_rows(conn: Conn) -> None:
    """Nothing to populate: the migration adds a table no row of the revision before can use."""


@pytest.fixture
def empty_database(server_url: str) -> Iterator[str]:
    name = f"herald_mig_{uuid.uuid4().hex[:10]}"
    yield create_database(server_url, name)
    drop_database(server_url, name)


@pytest.fixture
def second_empty_database(server_url: str) -> Iterator[str]:
    name = f"herald_mig_{uuid.uuid4().hex[:10]}"
    yield create_database(server_url, name)
    drop_database(server_url, name)


def test_migrations_equal_schema(empty_database: str, second_empty_database: str) -> None:
    """R-SCHEMA-17, R-PLAT: migrations applied to an empty database equal schema.py, to the catalog."""
    migrate.upgrade(empty_database)
    engine = create_engine(sqlalchemy_url(second_empty_database), poolclass=pool.NullPool)
    schema.metadata.create_all(engine)
    with engine.begin() as conn:
        # The months a migration made today (the tick's months), on the declared parents.
        now = conn.exec_driver_sql("SELECT now()").scalar_one()
        partitions.ensure(conn, partitions.ahead(now), protect=False)
    engine.dispose()

    migrated, declared = catalog(empty_database), catalog(second_empty_database)
    assert migrated == declared
    assert any(name.endswith("_p" + partitions.Month.of(now).suffix[1:]) for _, name, _ in migrated)

    engine = create_engine(sqlalchemy_url(empty_database), poolclass=pool.NullPool)
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"include_name": _not_a_partition, "include_schemas": False}
        )
        diffs = compare_metadata(context, schema.metadata)
    engine.dispose()
    assert diffs == []


def _not_a_partition(name: str | None, kind: str, parent: object) -> bool:
    """schema.py declares the partitioned parents; their months are herald.db.partitions'."""
    return not (kind == "table" and name is not None and name not in schema.metadata.tables)


def test_upgrade_downgrade_upgrade(empty_database: str) -> None:
    """R-SCHEMA-41 (no triggers to break it): up → down → up succeeds on a clean database."""
    migrate.upgrade(empty_database)
    first = catalog(empty_database)
    migrate.downgrade(empty_database, "base")
    assert catalog(empty_database) == []
    migrate.upgrade(empty_database)
    assert catalog(empty_database) == first


def _check_values(definition: str) -> set[str]:
    # Skip the JSON key in audience->>'kind'; keep only the listed values.
    return set(re.findall(r"(?<!>> )'([^']*)'::text", definition))


VOCAB_CHECKS = {
    ("person", "person_status_check"): vocabulary.PERSON_STATUSES,
    ("role", "role_scope_kind_check"): vocabulary.SCOPE_KINDS,
    ("group_membership", "group_membership_member_role_check"): vocabulary.MEMBER_ROLES,
    ("notification_event", "notification_event_category_check"): vocabulary.CATEGORIES,
    ("notification_event", "notification_event_priority_check"): vocabulary.PRIORITIES,
    ("notification_event", "notification_event_audience_kind_check"): vocabulary.AUDIENCE_KINDS,
    ("notification_event", "notification_event_channels_check"): vocabulary.CHANNELS,
    ("notification_delivery", "notification_delivery_channel_check"): vocabulary.CHANNELS,
    ("notification_delivery", "notification_delivery_status_check"): vocabulary.DELIVERY_STATUSES,
    (
        "notification_delivery",
        "notification_delivery_skipped_pair_check",
    ): vocabulary.SKIPPED_STATUSES,
    (
        "notification_channel_preference",
        "notification_channel_preference_channel_check",
    ): vocabulary.CHANNELS,
    ("notification_preference", "notification_preference_category_check"): vocabulary.CATEGORIES,
    ("notification_preference", "notification_preference_channel_check"): vocabulary.CHANNELS,
    ("notification_push_token", "notification_push_token_platform_check"): vocabulary.PLATFORMS,
    (
        "notification_push_token",
        "notification_push_token_invalidation_reason_check",
    ): vocabulary.INVALIDATION_REASONS,
    ("notification_template", "notification_template_status_check"): vocabulary.TEMPLATE_STATUSES,
    (
        "notification_delivery_attempt",
        "notification_delivery_attempt_outcome_check",
    ): vocabulary.ATTEMPT_OUTCOMES,
    ("reminder_run", "reminder_run_state_check"): vocabulary.REMINDER_RUN_STATES,
    ("reminder_schedule", "reminder_schedule_audience_kind_check"): vocabulary.AUDIENCE_KINDS,
    ("webhook_message", "webhook_message_status_check"): vocabulary.WEBHOOK_MESSAGE_STATUSES,
    (
        "undeliverable_address",
        "undeliverable_address_channel_check",
    ): vocabulary.UNDELIVERABLE_CHANNELS,
    (
        "notification_provider_account",
        "notification_provider_account_provider_check",
    ): vocabulary.ACCOUNT_PROVIDERS,
}


def test_vocabulary_checks_equal_constants(database_url: str) -> None:
    """R-SCHEMA-4, R-SCHEMA-3, R-SCHEMA-28: each CHECK's value set equals its vocabulary constant,
    and no CHECK uses LIKE (an `_` would be a wildcard)."""
    with psycopg.connect(libpq_url(database_url)) as conn:
        rows = conn.execute(
            "SELECT c.relname, k.conname, pg_get_constraintdef(k.oid) FROM pg_constraint k "
            "JOIN pg_class c ON c.oid = k.conrelid WHERE k.contype = 'c'"
        ).fetchall()
    definitions = {(table, name): definition for table, name, definition in rows}
    for key, values in VOCAB_CHECKS.items():
        assert key in definitions, key
        assert _check_values(definitions[key]) == set(values), key
    assert not [d for d in definitions.values() if " LIKE " in d.upper()]


def test_schema_shapes_the_requirements_name(database_url: str) -> None:
    """R-SCHEMA-17, R-SCHEMA-18, R-SCHEMA-20, R-SCHEMA-23, R-SCHEMA-24, R-SCHEMA-25, R-SCHEMA-29,
    R-SCHEMA-37, R-SCHEMA-6, R-SCHEMA-58: constraints, delete rules and partial indexes as stated."""
    with psycopg.connect(libpq_url(database_url)) as conn:
        cons = dict(
            conn.execute(
                "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE connamespace = 'public'::regnamespace"
            ).fetchall()
        )
        idx = dict(
            conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname='public'"
            ).fetchall()
        )
        status_default = conn.execute(
            "SELECT column_default FROM information_schema.columns "
            "WHERE table_name='notification_delivery' AND column_name='status'"
        ).fetchone()
        naive_timestamps = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema='public' AND data_type = 'timestamp without time zone'"
        ).fetchall()
    # The partition key (fixed per event, per recipient) is in every unique key (0021).
    assert (
        cons["notification_recipient_event_user_key"]
        == "UNIQUE (event_id, user_public_id_snapshot, occurred_at)"
    )
    assert "ON DELETE SET NULL" in cons["notification_recipient_user_id_fkey"]
    assert "ON DELETE SET NULL" in cons["notification_recipient_audience_role_id_fkey"]
    # Each month's delivery → recipient key, in its own partitions.
    month = partitions.Month.of(datetime.now(UTC)).suffix
    key = cons[f"notification_delivery_{month}_recipient_id_fkey"]
    assert f"REFERENCES notification_recipient_{month}(id, occurred_at) ON DELETE CASCADE" in key
    single = idx["notification_delivery_single_target_key"]
    assert "UNIQUE" in single and "(recipient_id, channel, occurred_at)" in single
    assert "provider_target_id IS NULL" in single and "replay_of_delivery_id IS NULL" in single
    multi = idx["notification_delivery_multi_target_key"]
    assert "(recipient_id, channel, provider_target_id, occurred_at)" in multi
    assert "provider_target_id IS NOT NULL" in multi and "replay_of_delivery_id IS NULL" in multi
    assert "WHERE" not in idx["notification_delivery_recipient_idx"]
    assert "WHERE is_active" in idx["notification_push_token_active_token_key"]
    assert status_default == ("'queued'::text",)
    assert naive_timestamps == []


def test_console_sessions_migration_round_trip(empty_database: str) -> None:
    """0015 adds console_session under forced row-level security with both policies, and its
    down removes the table, policies and all, leaving 0014's schema exactly."""

    def check(conn: Conn, _: None) -> None:
        row = conn.execute(
            "SELECT c.relrowsecurity, c.relforcerowsecurity, "
            "       array_agg(p.polname ORDER BY p.polname) "
            "  FROM pg_class c JOIN pg_policy p ON p.polrelid = c.oid "
            " WHERE c.relname = 'console_session' GROUP BY 1, 2"
        ).fetchone()
        assert row is not None and row[0] and row[1]
        assert row[2] == ["herald_owner_all_tenants", "herald_tenant_isolation"]

    round_trip(empty_database, "0014", "0015", populate=no_rows, check=check)


def test_unread_index_migration_on_a_populated_inbox(empty_database: str) -> None:
    """0019 rebuilds notification_recipient_unread_idx in the page's order on a database that
    holds recipients (CONCURRENTLY, then a swap of names), and its down restores 0018's exactly."""

    def populate(conn: Conn) -> None:
        conn.execute(
            """
            WITH p AS (
                INSERT INTO person (tenant_id, external_id) VALUES ('t', 'ana')
                RETURNING id, public_id
            ), e AS (
                INSERT INTO notification_event
                    (tenant_id, kind, category, priority, audience, channels, dedupe_key)
                SELECT 't', 'announcement.posted', 'announcement', 'normal',
                       '{"kind": "all_users"}', ARRAY['in_app'], md5(g::text) || md5('x' || g)
                FROM generate_series(1, 50) g
                RETURNING id, occurred_at
            )
            INSERT INTO notification_recipient
                (tenant_id, event_id, user_id, user_public_id_snapshot, occurred_at)
            SELECT 't', e.id, p.id, p.public_id, e.occurred_at FROM e, p
            """
        )

    def definition(conn: Conn) -> str:
        row = conn.execute(
            "SELECT pg_get_indexdef(i.indexrelid), i.indisvalid FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = 'notification_recipient_unread_idx'"
        ).fetchone()
        assert row is not None and row[1], row  # present and valid
        return str(row[0])

    def check(conn: Conn, _: None) -> None:
        assert "(user_id, occurred_at DESC, id DESC) WHERE (read_at IS NULL)" in definition(conn)
        assert conn.execute("SELECT count(*) FROM notification_recipient").fetchone() == (50,)

    def after_down(conn: Conn, _: None) -> None:
        assert "(user_id) WHERE (read_at IS NULL)" in definition(conn)

    round_trip(
        empty_database, "0018", "0019", populate=populate, check=check, after_down=after_down
    )


POPULATE_0020 = """
WITH p AS (
    INSERT INTO person (tenant_id, external_id) VALUES ('t', 'ana') RETURNING id, public_id
), e AS (
    INSERT INTO notification_event
        (tenant_id, kind, category, priority, audience, channels, dedupe_key, occurred_at)
    SELECT 't', 'announcement.posted', 'announcement', 'normal', '{"kind": "all_users"}',
           ARRAY['in_app', 'email'], md5(g::text) || md5('x' || g),
           now() - make_interval(days => g * 20)
      FROM generate_series(0, 5) g
    RETURNING id, occurred_at
), r AS (
    INSERT INTO notification_recipient
        (tenant_id, event_id, user_id, user_public_id_snapshot, occurred_at)
    SELECT 't', e.id, p.id, p.public_id, e.occurred_at FROM e, p
    RETURNING id, event_id
), d AS (
    INSERT INTO notification_delivery (tenant_id, event_id, recipient_id, channel, status)
    SELECT 't', r.event_id, r.id, c, 'queued' FROM r, unnest(ARRAY['in_app', 'email']) c
    RETURNING id
)
INSERT INTO notification_delivery_attempt (tenant_id, delivery_id, outcome, attempt_number)
SELECT 't', d.id, 'failed', 1 FROM d
"""

ROWS = """
SELECT (SELECT array_agg((r.id, r.occurred_at)::text ORDER BY r.id) FROM notification_recipient r),
       (SELECT array_agg((d.id, d.recipient_id, d.channel)::text ORDER BY d.id)
          FROM notification_delivery d),
       (SELECT array_agg((a.id, a.delivery_id)::text ORDER BY a.id)
          FROM notification_delivery_attempt a)
"""


def test_partitions_migration_on_a_populated_database(empty_database: str) -> None:
    """0021 on a database holding rows of several months: the old tables become the legacy
    partitions (rows, ids and keys as they were, occurred_at copied down), new rows land in this
    month's partitions with ids after the old ones and per-month keys, every partition is under
    row-level security; the down migration gives 0020's schema back with every row."""

    def populate(conn: Conn) -> Fetched:
        conn.execute(POPULATE_0020)
        return conn.execute(ROWS).fetchone()

    def check(conn: Conn, before_rows: Fetched) -> None:
        # The newest row is of this month, which the legacy partition keeps: months start after it.
        month = partitions.Month.of(datetime.now(UTC)).next()
        assert conn.execute(ROWS).fetchone() == before_rows
        where = conn.execute(
            "SELECT tableoid::regclass::text, count(*) FROM notification_delivery GROUP BY 1"
        ).fetchall()
        assert where == [("notification_delivery_legacy", 12)]
        # The copied partition key: every delivery and attempt in its recipient's month.
        assert conn.execute(
            "SELECT count(*) FROM notification_delivery d JOIN notification_recipient r "
            "ON r.id = d.recipient_id AND r.occurred_at = d.occurred_at"
        ).fetchone() == (12,)
        assert conn.execute(
            "SELECT count(*) FROM notification_delivery_attempt a JOIN notification_delivery d "
            "ON d.id = a.delivery_id AND d.occurred_at = a.occurred_at"
        ).fetchone() == (12,)
        bounds = dict(
            conn.execute(
                "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
                "JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = 'notification_recipient'::regclass"
            ).fetchall()
        )
        assert bounds["notification_recipient_legacy"] == (
            f"FOR VALUES FROM (MINVALUE) TO ('{month.start:%Y-%m-%d} 00:00:00+00')"
        )
        assert bounds["notification_recipient_default"] == "DEFAULT"
        assert f"notification_recipient_{month.suffix}" in bounds
        assert len(bounds) == 2 + partitions.MONTHS_AHEAD + 1
        unprotected = conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent::regclass::text LIKE 'notification_%' "
            "AND c.relkind = 'r' AND NOT (c.relrowsecurity AND c.relforcerowsecurity)"
        ).fetchall()
        assert unprotected == []
        # A row of next month: its month's partition, an id after every old one, its month's key.
        new = conn.execute(
            "WITH e AS (INSERT INTO notification_event "
            "  (tenant_id, kind, category, priority, audience, channels, dedupe_key, occurred_at) "
            "  VALUES ('t', 'announcement.posted', 'announcement', 'normal', "
            "  '{\"kind\": \"all_users\"}', ARRAY['email'], repeat('n', 64), %s) "
            "  RETURNING id, occurred_at), "
            "r AS (INSERT INTO notification_recipient "
            "  (tenant_id, event_id, user_id, user_public_id_snapshot, occurred_at) "
            "  SELECT 't', e.id, p.id, p.public_id, e.occurred_at FROM e, person p "
            "  RETURNING id, event_id, occurred_at) "
            "INSERT INTO notification_delivery "
            "  (tenant_id, event_id, recipient_id, channel, status, occurred_at) "
            "SELECT 't', r.event_id, r.id, 'email', 'queued', r.occurred_at FROM r "
            "RETURNING id, tableoid::regclass::text",
            (month.start,),
        ).fetchone()
        assert new is not None and new[1] == f"notification_delivery_{month.suffix}"
        assert new[0] > max(int(row.split(",")[0].strip("(")) for row in before_rows[1])
        # The month's keys: a recipient's month is its event's, a delivery's its recipient's.
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute(
                "INSERT INTO notification_recipient "
                "(tenant_id, event_id, user_public_id_snapshot, occurred_at) "
                "SELECT 't', min(id), gen_random_uuid(), %s FROM notification_event",
                (month.start,),
            )
        conn.rollback()
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute(
                "INSERT INTO notification_delivery "
                "(tenant_id, event_id, recipient_id, channel, status, occurred_at) "
                "SELECT 't', min(id), -1, 'email', 'queued', %s FROM notification_event",
                (month.start,),
            )
        conn.rollback()

    def after_down(conn: Conn, before_rows: Fetched) -> None:
        assert conn.execute(ROWS).fetchone() == before_rows

    round_trip(
        empty_database, "0020", "0021", populate=populate, check=check, after_down=after_down
    )


POPULATE_0022 = """
WITH p AS (
    INSERT INTO person (tenant_id, external_id) VALUES ('t', %(person)s) RETURNING id, public_id
), e AS (
    INSERT INTO notification_event
        (tenant_id, kind, category, priority, audience, channels, dedupe_key)
    SELECT 't', 'announcement.posted', 'announcement', 'normal', '{"kind": "all_users"}',
           ARRAY['email'], md5(%(person)s || g) || md5('x' || %(person)s || g)
      FROM generate_series(1, 20) g
    RETURNING id, public_id, occurred_at
), r AS (
    INSERT INTO notification_recipient
        (tenant_id, event_id, user_id, user_public_id_snapshot, occurred_at)
    SELECT 't', e.id, p.id, p.public_id, e.occurred_at FROM e, p
    RETURNING id, event_id, public_id, occurred_at
), d AS (
    INSERT INTO notification_delivery (tenant_id, event_id, recipient_id, channel, occurred_at)
    SELECT 't', r.event_id, r.id, 'email', r.occurred_at FROM r
    RETURNING public_id
)
SELECT 'event', public_id FROM e UNION ALL SELECT 'recipient', public_id FROM r
UNION ALL SELECT 'delivery', public_id FROM d
"""


def _ids_by_table(conn: Conn, person: str) -> dict[str, list[uuid.UUID]]:
    rows = conn.execute(POPULATE_0022, {"person": person}).fetchall()
    for table in ("dead_letter", "webhook_message"):
        # Each table's default, evaluated as an INSERT would (the two need rows of their own
        # to reference; the default alone is what changed).
        default = conn.execute(
            "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d "
            "JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum "
            "WHERE d.adrelid = %s::regclass AND a.attname = 'public_id'",
            (table,),
        ).fetchone()
        assert default is not None
        made = conn.execute(f"SELECT {default[0]} FROM generate_series(1, 20)").fetchall()
        rows += [(table, value) for (value,) in made]
    ids: dict[str, list[uuid.UUID]] = {}
    for table, value in rows:
        ids.setdefault(table, []).append(value)
    return ids


def test_time_ordered_public_ids_migration(empty_database: str) -> None:
    """0022: after it, the public ids of events, recipients, deliveries, dead letters and webhook
    messages are version 7 — their first 48 bits this moment's Unix milliseconds, the RFC 9562
    variant kept, all distinct — on the partitions too; rows made before keep their version-4
    ids; a person's id stays random; down restores gen_random_uuid() and 0021's catalog."""

    def populate(conn: Conn) -> dict[str, list[uuid.UUID]]:
        before = _ids_by_table(conn, "ana")
        assert {u.version for ids in before.values() for u in ids} == {4}
        return before

    def check(conn: Conn, before: dict[str, list[uuid.UUID]]) -> None:
        started = int(datetime.now(UTC).timestamp() * 1000)
        after = _ids_by_table(conn, "ben")
        ended = int(datetime.now(UTC).timestamp() * 1000)
        assert set(after) == {"event", "recipient", "delivery", "dead_letter", "webhook_message"}
        for table, ids in after.items():
            assert len(set(ids)) == len(ids) == 20, table
            for made in ids:
                assert made.version == 7 and made.variant == uuid.RFC_4122, (table, made)
                assert started - 1 <= made.int >> 80 <= ended + 1, (table, made)
        kept = conn.execute(
            "SELECT count(*) FROM notification_delivery WHERE public_id = ANY(%s)",
            (before["delivery"],),
        ).fetchone()
        person = conn.execute("SELECT public_id FROM person WHERE external_id = 'ben'").fetchone()
        partition_defaults = conn.execute(
            "SELECT DISTINCT pg_get_expr(d.adbin, d.adrelid) FROM pg_inherits i "
            "JOIN pg_attribute a ON a.attrelid = i.inhrelid AND a.attname = 'public_id' "
            "JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
        ).fetchall()
        assert kept == (20,)
        assert person is not None and person[0].version == 4
        assert len(partition_defaults) == 1 and "clock_timestamp()" in partition_defaults[0][0]

    def after_down(conn: Conn, _: dict[str, list[uuid.UUID]]) -> None:
        again = _ids_by_table(conn, "cy")
        assert {u.version for ids in again.values() for u in ids} == {4}

    round_trip(
        empty_database, "0021", "0022", populate=populate, check=check, after_down=after_down
    )


ATTEMPT_KEYS = """
SELECT c.relname, k.conname FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
 WHERE c.relname LIKE 'notification_delivery_attempt%' AND k.contype = 'f' ORDER BY 1
"""


def test_attempt_key_migration_on_a_populated_database(empty_database: str) -> None:
    """0023: every attempt partition loses its key to the delivery (the months, the default and a
    populated database's legacy partition alike) and keeps its rows, while each delivery keeps
    its key to the recipient; a delete of deliveries with their attempts in one statement (the
    shape of retention's) still runs; down puts each key back, to the delivery partition of the
    same month, and 0022's catalog with it."""

    def populate(conn: Conn) -> tuple[set[str], list[tuple[Any, ...]]]:
        conn.execute(POPULATE_0022, {"person": "ben"})
        conn.execute(
            "INSERT INTO notification_delivery_attempt (tenant_id, delivery_id, outcome, "
            "attempt_number, occurred_at) SELECT d.tenant_id, d.id, 'sent', 1, d.occurred_at "
            "FROM notification_delivery d WHERE NOT EXISTS (SELECT 1 FROM "
            "notification_delivery_attempt a WHERE a.delivery_id = d.id)"
        )
        keys = conn.execute(ATTEMPT_KEYS).fetchall()
        rows = conn.execute(
            "SELECT tableoid::regclass::text, count(*) FROM notification_delivery_attempt "
            "GROUP BY 1 ORDER BY 1"
        ).fetchall()
        # One key a partition at 0022: the legacy one, the default and each month made ahead.
        parts = {relation for relation, _ in keys}
        assert {f"notification_delivery_attempt_{s}" for s in ("legacy", "default")} <= parts
        assert len(keys) == len(parts) >= 2 + partitions.MONTHS_AHEAD + 1
        assert sum(count for _, count in rows) == 12 + 20
        return parts, rows

    def check(conn: Conn, before: tuple[set[str], list[tuple[Any, ...]]]) -> None:
        parts, rows = before
        assert conn.execute(ATTEMPT_KEYS).fetchall() == []
        assert (
            conn.execute(
                "SELECT tableoid::regclass::text, count(*) FROM notification_delivery_attempt "
                "GROUP BY 1 ORDER BY 1"
            ).fetchall()
            == rows
        )
        # The delivery's own month key is still there.
        assert conn.execute(
            "SELECT count(*) FROM pg_constraint WHERE contype = 'f' "
            "AND conname LIKE 'notification_delivery_%_recipient_id_fkey'"
        ).fetchone() == (len(parts),)
        # Retention's bounded delete shape: the attempts and their deliveries in one statement.
        deleted = conn.execute(
            "WITH doomed AS (SELECT id FROM notification_delivery ORDER BY id LIMIT 5), "
            "a AS (DELETE FROM notification_delivery_attempt WHERE delivery_id IN "
            "(SELECT id FROM doomed) RETURNING 1), d AS (DELETE FROM notification_delivery "
            "WHERE id IN (SELECT id FROM doomed) RETURNING 1) "
            "SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM d)"
        ).fetchone()
        assert deleted == (5, 5)
        conn.rollback()
        assert partitions.MONTH_KEYS == {
            "notification_delivery": ("recipient_id", "notification_recipient")
        }

    def after_down(conn: Conn, _: tuple[set[str], list[tuple[Any, ...]]]) -> None:
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute(
                "INSERT INTO notification_delivery_attempt (tenant_id, delivery_id, outcome, "
                "attempt_number, occurred_at) SELECT 't', -1, 'sent', 1, now()"
            )

    round_trip(
        empty_database,
        "0022",
        "0023",
        legacy_rows=True,
        populate=populate,
        check=check,
        after_down=after_down,
    )


PERSON_INDEXES = """
SELECT c.relname, x.indisvalid FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
 WHERE c.relname LIKE 'notification_delivery_person_idx%' ORDER BY 1
"""


def test_person_history_migration_on_a_populated_database(empty_database: str) -> None:
    """0025 on a database holding deliveries in the legacy partition and this month's: each
    delivery gets its recipient's person (a recipient orphaned by erasure leaves it NULL), and
    notification_delivery_person_idx is valid on the parent and built on every partition under
    the parent's name; down drops both and gives back 0024's catalog."""

    def populate(conn: Conn) -> set[str]:
        conn.execute(POPULATE_0022, {"person": "ben"})
        conn.execute(POPULATE_0022, {"person": "erased"})
        conn.execute(
            "UPDATE notification_recipient SET user_id = NULL WHERE user_id = "
            "(SELECT id FROM person WHERE external_id = 'erased')"
        )
        return {
            row[0]
            for row in conn.execute(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = 'notification_delivery'::regclass"
            )
        }

    def check(conn: Conn, parts: set[str]) -> None:
        copied = conn.execute(
            "SELECT d.user_id IS NOT DISTINCT FROM r.user_id, r.user_id IS NULL, count(*) "
            "FROM notification_delivery d JOIN notification_recipient r "
            "ON r.id = d.recipient_id AND r.occurred_at = d.occurred_at GROUP BY 1, 2 ORDER BY 2"
        ).fetchall()
        assert copied == [(True, False, 12 + 20), (True, True, 20)]
        assert "notification_delivery_legacy" in parts
        indexes = conn.execute(PERSON_INDEXES).fetchall()
        assert indexes == sorted(
            [("notification_delivery_person_idx", True)]
            + [
                (part.replace("notification_delivery", "notification_delivery_person_idx"), True)
                for part in parts
            ]
        )

    def after_down(conn: Conn, _: set[str]) -> None:
        assert conn.execute(PERSON_INDEXES).fetchall() == []

    round_trip(
        empty_database,
        "0024",
        "0025",
        legacy_rows=True,
        populate=populate,
        check=check,
        after_down=after_down,
    )


def test_attempt_provider_migration_keeps_the_attempts(empty_database: str) -> None:
    """0028 on a database holding attempts: they keep every value and read NULL for provider and
    passed_over (written before failover existed); each attempt partition has both columns; down
    gives back 0027's catalog with the attempts still there."""

    def populate(conn: Conn) -> None:
        conn.execute(POPULATE_0022, {"person": "ada"})
        conn.execute(
            "INSERT INTO notification_delivery_attempt (tenant_id, delivery_id, occurred_at, "
            "outcome, attempt_number, error_code) SELECT tenant_id, id, occurred_at, 'failed', 1, "
            "'EMAIL_TRANSPORT' FROM notification_delivery"
        )

    def check(conn: Conn, _: None) -> None:
        kept = conn.execute(
            "SELECT error_code, provider, passed_over, count(*) FROM notification_delivery_attempt "
            "GROUP BY 1, 2, 3"
        ).fetchall()
        assert kept == [("EMAIL_TRANSPORT", None, None, 20)]
        partitioned = conn.execute(
            "SELECT count(*) FILTER (WHERE a.attname = 'provider'), "
            "count(*) FILTER (WHERE a.attname = 'passed_over'), count(DISTINCT c.oid) "
            "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_attribute a ON a.attrelid = c.oid AND NOT a.attisdropped "
            "WHERE i.inhparent = 'notification_delivery_attempt'::regclass"
        ).fetchone()
        assert partitioned is not None and partitioned[0] == partitioned[1] == partitioned[2] > 0

    def after_down(conn: Conn, _: None) -> None:
        count = conn.execute("SELECT count(*) FROM notification_delivery_attempt").fetchone()
        assert count == (20,)

    round_trip(
        empty_database, "0027", "0028", populate=populate, check=check, after_down=after_down
    )


def test_webpush_devices_migration_on_a_populated_database(empty_database: str) -> None:
    """0029 on a database holding phones' and FCM web tokens: they stay as they were and the
    checks validate over them; a webpush device needs both keys and no other platform may carry
    them; down deletes the webpush devices (no earlier release could send them) and gives back
    the earlier catalog."""
    insert_token = (
        "INSERT INTO notification_push_token (tenant_id, person_id, token, platform) "
        "VALUES ('t1', (SELECT id FROM person WHERE external_id = 'ana'), %s, %s)"
    )
    keyed = (
        "INSERT INTO notification_push_token "
        "(tenant_id, person_id, token, platform, webpush_p256dh, webpush_auth) "
        "VALUES ('t1', (SELECT id FROM person WHERE external_id = 'ana'), %s, %s, %s, %s)"
    )

    def populate(conn: Conn) -> None:
        conn.execute("INSERT INTO person (tenant_id, external_id) VALUES ('t1', 'ana')")
        conn.execute(insert_token, ("phone-token", "android"))
        conn.execute(insert_token, ("fcm-web-token", "web"))

    def check(conn: Conn, _: None) -> None:
        assert conn.execute(
            "SELECT token, platform, webpush_p256dh, webpush_auth FROM notification_push_token "
            "ORDER BY id"
        ).fetchall() == [
            ("phone-token", "android", None, None),
            ("fcm-web-token", "web", None, None),
        ]
        conn.execute(keyed, ("https://push.example/1", "webpush", "BKey", "auth"))
        for row in [
            ("https://push.example/2", "webpush", None, "auth"),
            ("https://push.example/3", "webpush", "BKey", None),
            ("phone-2", "android", "BKey", "auth"),
        ]:
            with pytest.raises(psycopg.errors.CheckViolation), conn.transaction():
                conn.execute(keyed, row)

    def after_down(conn: Conn, _: None) -> None:
        assert conn.execute("SELECT token FROM notification_push_token ORDER BY id").fetchall() == [
            ("phone-token",),
            ("fcm-web-token",),
        ]

    round_trip(
        empty_database, "0028", "0029", populate=populate, check=check, after_down=after_down
    )


POPULATE_0030 = """
WITH p AS (
    UPDATE person SET slack_id = 'U0123456789', teams_webhook_url = 'https://t.example/hook'
     WHERE external_id = 'ana' RETURNING id, public_id
), e AS (
    INSERT INTO notification_event
        (tenant_id, kind, category, priority, audience, channels, dedupe_key)
    VALUES ('t', 'staff.notice', 'announcement', 'normal', '{"kind": "all_users"}',
            ARRAY['email', 'slack'], md5('staff-1') || md5('1')),
           ('t', 'staff.notice', 'announcement', 'normal', '{"kind": "all_users"}',
            ARRAY['teams'], md5('staff-2') || md5('2'))
    RETURNING id, occurred_at
), r AS (
    INSERT INTO notification_recipient
        (tenant_id, event_id, user_id, user_public_id_snapshot, occurred_at)
    SELECT 't', e.id, p.id, p.public_id, e.occurred_at FROM e, p
    RETURNING id, event_id, occurred_at
), d AS (
    INSERT INTO notification_delivery (tenant_id, event_id, recipient_id, channel, occurred_at)
    SELECT 't', r.event_id, r.id, c, r.occurred_at FROM r, unnest(ARRAY['slack', 'teams']) c
    RETURNING id, occurred_at
), a AS (
    INSERT INTO notification_delivery_attempt
        (tenant_id, delivery_id, outcome, attempt_number, occurred_at)
    SELECT 't', d.id, 'failed', 1, d.occurred_at FROM d
)
INSERT INTO notification_channel_preference (tenant_id, person_id, channel, enabled)
SELECT 't', p.id, c, false FROM p, unnest(ARRAY['slack', 'teams']) c
"""

STAFF_ROWS = """
SELECT (SELECT count(*) FROM notification_delivery WHERE channel IN ('slack', 'teams')),
       (SELECT count(*) FROM notification_channel_preference),
       (SELECT array_agg(array_to_string(channels, ',') ORDER BY dedupe_key)
          FROM notification_event WHERE kind = 'staff.notice'),
       (SELECT count(*) FROM notification_delivery)
"""


def test_staff_channels_migration_on_a_populated_database(empty_database: str) -> None:
    """0030 on a database holding deliveries: every channel check takes slack and teams (an
    event, a delivery, its attempt and a preference on them go in), the person's destination
    columns arrive with their flags on, and the rows already there are untouched; down removes
    what only the new channels held (an event keeps its other channels, or the inbox) and gives
    back 0029's catalog."""

    def kept_rows(conn: Conn) -> Fetched:
        return conn.execute(ROWS).fetchone()

    def check(conn: Conn, kept: Fetched) -> None:
        assert conn.execute(ROWS).fetchone() == kept
        conn.execute(POPULATE_0030)
        assert conn.execute(
            "SELECT slack_id, slack_can_write, teams_can_write FROM person"
        ).fetchall() == [("U0123456789", True, True)]
        assert conn.execute(STAFF_ROWS).fetchone() == (4, 2, ["email,slack", "teams"], 12 + 4)
        with pytest.raises(psycopg.errors.CheckViolation), conn.transaction():
            conn.execute(
                "INSERT INTO notification_channel_preference (tenant_id, person_id, channel, "
                "enabled) SELECT 't', id, 'fax', true FROM person"
            )

    def after_down(conn: Conn, kept: Fetched) -> None:
        assert conn.execute(STAFF_ROWS).fetchone() == (0, 0, ["email", "in_app"], 12)
        # The old deliveries and attempts as they were (the staff events keep their recipients).
        assert conn.execute(ROWS).fetchone()[1:] == kept[1:]

    round_trip(
        empty_database,
        "0029",
        "0030",
        legacy_rows=True,
        populate=kept_rows,
        check=check,
        after_down=after_down,
    )


POPULATE_0031 = """
WITH p AS (
    SELECT id, public_id, tenant_id FROM person WHERE external_id = 'ana'
), e AS (
    INSERT INTO notification_event
        (tenant_id, kind, category, priority, audience, channels, dedupe_key)
    VALUES ('t', 'fee.reminder', 'finance', 'normal', '{"kind": "all_users"}',
            ARRAY['email', 'whatsapp'], md5('wa-1') || md5('1')),
           ('t', 'fee.reminder', 'finance', 'normal', '{"kind": "all_users"}',
            ARRAY['whatsapp'], md5('wa-2') || md5('2'))
    RETURNING id, occurred_at
), r AS (
    INSERT INTO notification_recipient
        (tenant_id, event_id, user_id, user_public_id_snapshot, occurred_at)
    SELECT 't', e.id, p.id, p.public_id, e.occurred_at FROM e, p
    RETURNING id, event_id, occurred_at
), d AS (
    INSERT INTO notification_delivery (tenant_id, event_id, recipient_id, channel, occurred_at)
    SELECT 't', r.event_id, r.id, 'whatsapp', r.occurred_at FROM r
    RETURNING id, occurred_at
), a AS (
    INSERT INTO notification_delivery_attempt
        (tenant_id, delivery_id, outcome, attempt_number, occurred_at)
    SELECT 't', d.id, 'failed', 1, d.occurred_at FROM d
), u AS (
    INSERT INTO undeliverable_address (tenant_id, channel, address_hash, reason)
    VALUES ('t', 'whatsapp', repeat('a', 64), 'WHATSAPP_UNREACHABLE')
)
INSERT INTO notification_channel_preference (tenant_id, person_id, channel, enabled)
SELECT 't', p.id, 'whatsapp', false FROM p
"""

WHATSAPP_ROWS = """
SELECT (SELECT count(*) FROM notification_delivery WHERE channel = 'whatsapp'),
       (SELECT count(*) FROM notification_channel_preference WHERE channel = 'whatsapp'),
       (SELECT count(*) FROM undeliverable_address WHERE channel = 'whatsapp'),
       (SELECT array_agg(array_to_string(channels, ',') ORDER BY array_to_string(channels, ','))
          FROM notification_event WHERE kind = 'fee.reminder'),
       (SELECT count(*) FROM notification_delivery)
"""


def test_whatsapp_migration_on_a_populated_database(empty_database: str) -> None:
    """0031 on a database holding deliveries: every channel check takes whatsapp (an event, a
    delivery, its attempt, a preference and an undeliverable mark on it go in), the rows already
    there are untouched; down removes what only WhatsApp held (an event keeps its other
    channels, or the inbox) and gives back the catalog before it."""

    def populate(conn: Conn) -> Fetched:
        kept = conn.execute(ROWS).fetchone()
        # Before 0031 the checks refuse the channel.
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(POPULATE_0031)
        return kept

    def check(conn: Conn, kept: Fetched) -> None:
        assert conn.execute(ROWS).fetchone() == kept
        conn.execute(POPULATE_0031)
        assert conn.execute(WHATSAPP_ROWS).fetchone() == (
            2,
            1,
            1,
            ["email,whatsapp", "whatsapp"],
            12 + 2,
        )
        with pytest.raises(psycopg.errors.CheckViolation), conn.transaction():
            conn.execute(
                "INSERT INTO undeliverable_address (tenant_id, channel, address_hash, reason) "
                "VALUES ('t', 'slack', repeat('b', 64), 'x')"
            )

    def after_down(conn: Conn, kept: Fetched) -> None:
        assert conn.execute(WHATSAPP_ROWS).fetchone() == (0, 0, 0, ["email", "in_app"], 12)
        assert conn.execute(ROWS).fetchone()[1:] == kept[1:]

    round_trip(
        empty_database,
        "0030",
        "0031",
        legacy_rows=True,
        populate=populate,
        check=check,
        after_down=after_down,
    )


QUEUE_STATE = """
SELECT d.id, d.status, q.delivery_id IS NOT NULL, q.claimed_at, q.lease_expires_at,
       q.next_attempt_at = d.next_attempt_at, q.channel = d.channel AND q.tenant_id = d.tenant_id
       AND q.occurred_at = d.occurred_at
  FROM notification_delivery d
  LEFT JOIN notification_delivery_queue q ON q.delivery_id = d.id
 ORDER BY d.id
"""

# 12,000 queued push deliveries of one recipient (one target each), all due at the same instant:
# more than one of the migration's batches, their cursor crossing tied due times.
POPULATE_PUSH = """
INSERT INTO notification_delivery
       (tenant_id, event_id, recipient_id, channel, provider_target_id, next_attempt_at, occurred_at)
SELECT r.tenant_id, r.event_id, r.id, 'push', g, now() - interval '1 minute', r.occurred_at
  FROM generate_series(1, 12000) g,
       (SELECT * FROM notification_recipient ORDER BY id DESC LIMIT 1) r
"""


def test_queue_migration_on_a_populated_database(empty_database: str) -> None:
    """0026 and 0027 on a live database's queue: every queued delivery (the legacy partition's
    and this month's, more than one batch of them with tied due times) gets its queue row, due
    when it was; a processing one becomes queued with its claim and lease on its queue row (so
    it still reads `processing`); failed, sent and dead ones get none. Down puts the claims back
    on the deliveries and gives back 0025's catalog."""

    def states(conn: Conn) -> dict[int, tuple[Any, ...]]:
        return {
            row[0]: row[1:]
            for row in conn.execute(
                "SELECT id, status, claimed_at, lease_expires_at, next_attempt_at "
                "FROM notification_delivery"
            )
        }

    def populate(conn: Conn) -> dict[int, tuple[Any, ...]]:
        conn.execute(POPULATE_0022, {"person": "ben"})
        conn.execute(POPULATE_PUSH)
        conn.execute(
            "UPDATE notification_delivery SET status = 'processing', claimed_at = now(), "
            "lease_expires_at = now() + interval '5 minutes' WHERE id % 7 = 1"
        )
        conn.execute(
            "UPDATE notification_delivery SET status = 'failed', failed_at = now(), attempts = 1, "
            "failure_count = 1 WHERE id % 7 = 2"
        )
        conn.execute(
            "UPDATE notification_delivery SET status = 'sent', sent_at = now(), attempts = 1 "
            "WHERE id % 7 = 3 AND channel = 'email'"
        )
        before = states(conn)
        statuses = {state[0] for state in before.values()}
        assert {"queued", "processing", "failed", "sent"} <= statuses
        assert sum(state[0] == "queued" for state in before.values()) > 5_000
        return before

    def check(conn: Conn, before: dict[int, tuple[Any, ...]]) -> None:
        after = {row[0]: row[1:] for row in conn.execute(QUEUE_STATE)}
        assert after.keys() == before.keys()
        for delivery_id, (status, claimed_at, lease, _) in before.items():
            now_status, queued, q_claimed, q_lease, same_due, same_row = after[delivery_id]
            if status == "queued":
                assert (now_status, queued, q_claimed, same_due, same_row) == (
                    "queued",
                    True,
                    None,
                    True,
                    True,
                ), delivery_id
            elif status == "processing":
                assert (now_status, queued, q_claimed, q_lease, same_row) == (
                    "queued",
                    True,
                    claimed_at,
                    lease,
                    True,
                ), delivery_id
            else:
                assert (now_status, queued) == (status, False), delivery_id

    def after_down(conn: Conn, before: dict[int, tuple[Any, ...]]) -> None:
        assert states(conn) == before

    round_trip(
        empty_database,
        "0025",
        "0027",
        legacy_rows=True,
        populate=populate,
        check=check,
        after_down=after_down,
    )


def test_provider_accounts_migration_round_trip(empty_database: str) -> None:
    """0032 adds notification_provider_account under forced row-level security: one account per
    (tenant, provider), a provider outside the list refused, another tenant's row invisible to
    herald_app; down drops it and gives back the catalog before it."""

    def check(conn: Conn, _: None) -> None:
        conn.execute(
            "INSERT INTO notification_provider_account (tenant_id, provider, settings, "
            "secret_ciphertext, updated_by) VALUES ('a', 'smtp', '{\"host\": \"m.example\"}', "
            "'\\x00', 'test'), ('b', 'smtp', '{}', NULL, 'test')"
        )
        assert conn.execute(
            "SELECT tenant_id, version FROM notification_provider_account ORDER BY 1"
        ).fetchall() == [("a", 1), ("b", 1)]
        for bad in ("('a', 'smtp', 'test')", "('a', 'fax', 'test')"):
            with pytest.raises(psycopg.errors.IntegrityError), conn.transaction():
                conn.execute(
                    "INSERT INTO notification_provider_account (tenant_id, provider, updated_by) "
                    f"VALUES {bad}"
                )
        conn.execute("SET ROLE herald_app")
        conn.execute("SELECT set_config('herald.tenant_id', 'a', false)")
        assert conn.execute("SELECT tenant_id FROM notification_provider_account").fetchall() == [
            ("a",)
        ]

    round_trip(empty_database, "0031", "0032", populate=no_rows, check=check)
    migrate.upgrade(empty_database)


def test_local_time_and_quiet_hours_migration(empty_database: str) -> None:
    """0033 on a database holding events and a preference set: they read NULL for the new
    columns; an event takes a local time (and date) but not with scheduledFor, a set takes
    quiet hours as a pair with start and end apart; down gives back the catalog before it with the
    rows still there."""
    event = (
        "INSERT INTO notification_event (tenant_id, kind, category, priority, audience, "
        "channels, dedupe_key, deliver_local_time, deliver_local_date, scheduled_for) "
        "VALUES ('t', 'k', 'announcement', 'normal', '{\"kind\": \"all_users\"}', "
        "ARRAY['sms'], md5(%s) || md5('x'), %s, %s, %s)"
    )

    def populate(conn: Conn) -> Fetched:
        conn.execute(
            "INSERT INTO notification_preference_set (tenant_id, person_id, version) "
            "SELECT tenant_id, id, 1 FROM person ORDER BY id LIMIT 1"
        )
        return conn.execute(ROWS).fetchone()

    def check(conn: Conn, kept: Fetched) -> None:
        assert conn.execute(ROWS).fetchone() == kept
        assert conn.execute(
            "SELECT quiet_hours_start, quiet_hours_end, quiet_hours_timezone "
            "FROM notification_preference_set"
        ).fetchall() == [(None, None, None)]
        conn.execute(event, ("a", "09:00", "2026-12-08", None))
        conn.execute(event, ("b", "09:00", None, None))
        conn.execute(
            "UPDATE notification_preference_set SET quiet_hours_start = '21:00', "
            "quiet_hours_end = '07:00', quiet_hours_timezone = 'Asia/Kathmandu'"
        )
        for bad in [("c", None, "2026-12-08", None), ("d", "09:00", None, datetime.now(UTC))]:
            with pytest.raises(psycopg.errors.CheckViolation), conn.transaction():
                conn.execute(event, bad)
        for start, end in [("21:00", None), ("07:00", "07:00")]:
            with pytest.raises(psycopg.errors.CheckViolation), conn.transaction():
                conn.execute(
                    "UPDATE notification_preference_set SET quiet_hours_start = %s, "
                    "quiet_hours_end = %s",
                    (start, end),
                )
        conn.execute("DELETE FROM notification_event WHERE deliver_local_time IS NOT NULL")

    def after_down(conn: Conn, kept: Fetched) -> None:
        assert conn.execute(ROWS).fetchone() == kept

    round_trip(
        empty_database,
        "0032",
        "0033",
        legacy_rows=True,
        populate=populate,
        check=check,
        after_down=after_down,
    )


def test_escalation_steps_migration_round_trip(empty_database: str) -> None:
    """0034 adds the escalation step table under RLS, with its partial due index and checks; a
    step row can be written and a bad one is refused; down drops it and gives back the catalog."""
    insert_step = (
        "INSERT INTO notification_escalation_step (tenant_id, event_id, recipient_id, occurred_at, "
        "category, suppressible, step_index, channel, due_at, state, decided_at) "
        "VALUES ('t1', 1, 1, now(), 'announcement', true, %s, %s, now(), %s, %s)"
    )

    def check(conn: Conn, _: None) -> None:
        conn.execute(insert_step, (1, "email", "pending", None))
        for bad in [
            (2, "in_app", "pending", None),  # in-app is never a later step
            (2, "sms", "sent", None),  # decided without a decision time
            (1, "sms", "pending", None),  # the recipient's step 1 exists
            (0, "sms", "pending", None),
        ]:
            with pytest.raises(psycopg.errors.IntegrityError), conn.transaction():
                conn.execute(insert_step, bad)
        plan = conn.execute(
            "SELECT indexdef FROM pg_indexes "
            "WHERE indexname = 'notification_escalation_step_due_idx'"
        ).fetchone()
        assert plan is not None and "WHERE (state = 'pending'::text)" in plan[0]
        forced = conn.execute(
            "SELECT relrowsecurity, relforcerowsecurity FROM pg_class "
            "WHERE relname = 'notification_escalation_step'"
        ).fetchone()
        assert forced == (True, True)
        override = (
            "INSERT INTO notification_escalation_override (tenant_id, kind, delays, version, "
            "updated_by) VALUES ('t1', %s, %s, 1, 'person:x')"
        )
        conn.execute(override, ("announcement.urgent", [600, 3600]))
        conn.execute(override, ("other.kind", None))  # reverted: the code's plan
        for delays in ([0, 60], [60, 2592001], []):
            with pytest.raises(psycopg.errors.CheckViolation), conn.transaction():
                conn.execute(override, ("third.kind", delays))
        conn.execute(
            "INSERT INTO notification_escalation_override_version (tenant_id, kind, version, "
            "delays, actor) VALUES ('t1', 'announcement.urgent', 1, '{600,3600}', 'person:x')"
        )

    round_trip(empty_database, "0033", "0034", populate=no_rows, check=check)
