"""Migrations produce exactly db/schema.py, and every migration's down reverses its up."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, pool

from herald import vocabulary
from herald.db import migrate, schema
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
    engine.dispose()

    migrated, declared = catalog(empty_database), catalog(second_empty_database)
    assert migrated == declared

    engine = create_engine(sqlalchemy_url(empty_database), poolclass=pool.NullPool)
    with engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn), schema.metadata)
    engine.dispose()
    assert diffs == []


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
    assert (
        cons["notification_recipient_event_user_key"]
        == "UNIQUE (event_id, user_public_id_snapshot)"
    )
    assert "ON DELETE SET NULL" in cons["notification_recipient_user_id_fkey"]
    assert "ON DELETE SET NULL" in cons["notification_recipient_audience_role_id_fkey"]
    assert "ON DELETE CASCADE" in cons["notification_delivery_recipient_id_fkey"]
    single = idx["notification_delivery_single_target_key"]
    assert "UNIQUE" in single and "(recipient_id, channel)" in single
    assert "provider_target_id IS NULL" in single and "replay_of_delivery_id IS NULL" in single
    multi = idx["notification_delivery_multi_target_key"]
    assert "(recipient_id, channel, provider_target_id)" in multi
    assert "provider_target_id IS NOT NULL" in multi and "replay_of_delivery_id IS NULL" in multi
    assert "WHERE" not in idx["notification_delivery_recipient_idx"]
    assert "WHERE is_active" in idx["notification_push_token_active_token_key"]
    assert status_default == ("'queued'::text",)
    assert naive_timestamps == []


def test_console_sessions_migration_round_trip(empty_database: str) -> None:
    """0015 adds console_session under forced row-level security with both policies, and its
    down removes the table, policies and all, leaving 0014's schema exactly."""
    migrate.upgrade(empty_database, "0014")
    before = catalog(empty_database)
    migrate.upgrade(empty_database, "0015")
    with psycopg.connect(libpq_url(empty_database)) as conn:
        row = conn.execute(
            "SELECT c.relrowsecurity, c.relforcerowsecurity, "
            "       array_agg(p.polname ORDER BY p.polname) "
            "  FROM pg_class c JOIN pg_policy p ON p.polrelid = c.oid "
            " WHERE c.relname = 'console_session' GROUP BY 1, 2"
        ).fetchone()
    assert row is not None and row[0] and row[1]
    assert row[2] == ["herald_owner_all_tenants", "herald_tenant_isolation"]
    migrate.downgrade(empty_database, "0014")
    assert catalog(empty_database) == before


def test_unread_index_migration_on_a_populated_inbox(empty_database: str) -> None:
    """0019 rebuilds notification_recipient_unread_idx in the page's order on a database that
    holds recipients (CONCURRENTLY, then a swap of names), and its down restores 0018's exactly."""
    migrate.upgrade(empty_database, "0018")
    before = catalog(empty_database)
    with psycopg.connect(libpq_url(empty_database)) as conn:
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
    migrate.upgrade(empty_database, "0019")

    def definition() -> str:
        with psycopg.connect(libpq_url(empty_database)) as conn:
            row = conn.execute(
                "SELECT pg_get_indexdef(i.indexrelid), i.indisvalid FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE c.relname = 'notification_recipient_unread_idx'"
            ).fetchone()
        assert row is not None and row[1], row  # present and valid
        return str(row[0])

    assert "(user_id, occurred_at DESC, id DESC) WHERE (read_at IS NULL)" in definition()
    with psycopg.connect(libpq_url(empty_database)) as conn:
        assert conn.execute("SELECT count(*) FROM notification_recipient").fetchone() == (50,)
    migrate.downgrade(empty_database, "0018")
    assert "(user_id) WHERE (read_at IS NULL)" in definition()
    assert catalog(empty_database) == before
