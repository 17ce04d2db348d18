"""Tenants kept apart by PostgreSQL: row-level security, forced, on every tenant table.

These tests do not go through Herald's queries (which also name the tenant); they connect as the
role herald_app with one tenant set and write SQL by hand, so a forgotten predicate anywhere in
Herald could not show another tenant's row either.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from herald import followups
from herald.console import sessions as console_sessions
from herald.db import migrate, tenancy
from herald.db.engine import libpq_url
from herald.feed import service as feed
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.sending.service import SendInput, asend
from tests import seed
from tests.conftest import create_database, drop_database
from tests.integration.test_fanout import run_to_completion


def tenant_tables(conn: psycopg.Connection[tuple[str]]) -> list[str]:
    return [row[0] for row in conn.execute(tenancy.tenant_tables_sql())]


def test_every_tenant_table_is_under_forced_row_level_security(database_url: str) -> None:
    """Issue 9, R-SEC-1, DESIGN §5.2 Tenancy: every table with tenant_id (and the parent-scoped
    read-state table) has RLS enabled and forced, and the herald_app policy; a new table that
    forgets tenancy.protect() in its migration fails here."""
    with psycopg.connect(libpq_url(database_url)) as conn:
        tables = tenancy.protected_tables(tenant_tables(conn))
        assert len(tables) >= 20
        rows = conn.execute(
            "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, "
            "       array_agg(p.polname ORDER BY p.polname) FILTER (WHERE p.polname IS NOT NULL) "
            "  FROM pg_class c LEFT JOIN pg_policy p ON p.polrelid = c.oid "
            " WHERE c.relname = ANY(%s) AND c.relnamespace = current_schema()::regnamespace "
            " GROUP BY 1, 2, 3",
            (tables,),
        ).fetchall()
    found = {name: (enabled, forced, policies) for name, enabled, forced, policies in rows}
    assert set(found) == set(tables)
    for table, (enabled, forced, policies) in found.items():
        assert enabled and forced, table
        assert policies == sorted([tenancy.OWNER_POLICY, tenancy.TENANT_POLICY]), table
    role = _role(database_url)
    assert role == (False, False, False)  # herald_app: NOLOGIN, not superuser, no BYPASSRLS


def _role(database_url: str) -> tuple[bool, bool, bool]:
    with psycopg.connect(libpq_url(database_url)) as conn:
        row = conn.execute(
            "SELECT rolcanlogin, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = %s",
            (tenancy.APP_ROLE,),
        ).fetchone()
    assert row is not None
    return (bool(row[0]), bool(row[1]), bool(row[2]))


async def _populate(engine: AsyncEngine, tenant: str) -> None:
    """Rows for `tenant` in as many tables as the ordinary paths write."""
    async with engine.begin() as conn:
        teacher = await seed.role(conn, tenant, "teacher", "staff")
        people = [await seed.person(conn, tenant, f"u{i}", roles=[teacher]) for i in range(3)]
        group_id = await seed.group(conn, tenant, "class-7a")
        await seed.member(conn, tenant, group_id, people[0].id)
        await seed.guardian(conn, tenant, people[0].id, people[1].id)
        await seed.push_token(conn, tenant, people[1].id, f"tok-{tenant}")
        await asend(
            conn,
            SendInput(
                tenant_id=tenant,
                kind="announcement.posted",
                audience={"kind": "all_users"},
                channels=["in_app", "email"],
                variables={"title": "Sports day", "message": "Friday"},
            ),
            registry=SAMPLE_REGISTRY,
        )
        # An escalating kind: its fan-out writes escalation steps (docs/escalation.md).
        await asend(
            conn,
            SendInput(
                tenant_id=tenant,
                kind="announcement.urgent",
                audience={"kind": "all_users"},
                channels=["in_app", "email"],
                variables={"title": "Closed", "message": "Rain"},
            ),
            registry=SAMPLE_REGISTRY,
        )
        # A tenant's escalation delays, with their first version (herald.admin.kinds).
        await conn.execute(
            text(
                "INSERT INTO notification_escalation_override (tenant_id, kind, delays, version, "
                "updated_by) VALUES (:t, 'announcement.urgent', '{600,3600}', 1, 'person:x')"
            ),
            {"t": tenant},
        )
        await conn.execute(
            text(
                "INSERT INTO notification_escalation_override_version (tenant_id, kind, version, "
                "delays, actor) VALUES (:t, 'announcement.urgent', 1, '{600,3600}', 'person:x')"
            ),
            {"t": tenant},
        )
        notice = await feed.publish(
            conn,
            tenant_id=tenant,
            kind="ops.notice",
            title="Backup done",
            permission_code="NotificationHistory_READ",
        )
        await conn.execute(
            text(
                "INSERT INTO feed_notification_read (notification_id, user_id) "
                "SELECT id, :person FROM feed_notification WHERE public_id = :notice"
            ),
            {"person": people[2].id, "notice": notice},
        )
        await followups.aarm(
            conn,
            tenant,
            "absence:1",
            kind="attendance.event",
            reminder_kind="attendance.reminder",
            audience={"kind": "guardians_of_users", "userIds": [people[0].external_id]},
            variables={"studentName": "A", "date": "2026-09-01", "eventType": "absent"},
            registry=SAMPLE_REGISTRY,
        )
    async with engine.begin() as conn:
        await console_sessions.start(
            conn,
            tenant_id=tenant,
            person_id=people[0].id,
            role_code="teacher",
            expires_at=datetime.now(UTC) + timedelta(hours=1),
        )
        # A provider account of the tenant's own (herald.admin.providers).
        await conn.execute(
            text(
                "INSERT INTO notification_provider_account (tenant_id, provider, settings, "
                "updated_by) VALUES (:t, 'smtp', '{\"host\": \"mail.example.com\"}', 'test')"
            ),
            {"t": tenant},
        )
    await run_to_completion(engine, tenant)
    async with engine.begin() as conn:
        # A Twilio receipt kept for a send of this tenant (its delivery now carries the message
        # id), and one kept for a send nobody has recorded: that one is no tenant's.
        sid = f"SM{uuid.uuid4().hex}"
        await conn.execute(
            text(
                "UPDATE notification_delivery SET channel = 'sms', provider_message_id = :sid "
                "WHERE id = (SELECT min(id) FROM notification_delivery "
                "            WHERE tenant_id = :tenant AND channel = 'email')"
            ),
            {"sid": sid, "tenant": tenant},
        )
        for message_id in (sid, f"SM{uuid.uuid4().hex}"):
            await conn.execute(
                text(
                    "INSERT INTO pending_receipt (provider, channel, provider_message_id, status, "
                    "provider_status) VALUES ('twilio', 'sms', :sid, 'delivered', 'delivered')"
                ),
                {"sid": message_id},
            )


# How the hand-written check reads a parent-scoped table's tenant: through its parent (a LEFT
# JOIN, so a row herald_app can see without a parent of its tenant shows as None and fails).
PARENT_TENANT_SQL = {
    "feed_notification_read": "SELECT f.tenant_id FROM feed_notification_read r "
    "LEFT JOIN feed_notification f ON f.id = r.notification_id",
    "pending_receipt": "SELECT d.tenant_id FROM pending_receipt r "
    "LEFT JOIN notification_delivery d ON d.provider_message_id = r.provider_message_id "
    "AND d.channel = r.channel",
}


@pytest.fixture
def two_tenants() -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    return f"a-{suffix}", f"b-{suffix}"


async def test_herald_app_sees_and_writes_only_its_own_tenant(
    engine: AsyncEngine, database_url: str, two_tenants: tuple[str, str]
) -> None:
    """Issue 9, R-SEC-1: connected as herald_app with tenant A set, a hand-written SELECT on every
    tenant table returns no row of tenant B (and does return A's); an INSERT or UPDATE that would
    put a row in tenant B is refused; with no tenant set, nothing is visible at all."""
    a, b = two_tenants
    await _populate(engine, a)
    await _populate(engine, b)
    with psycopg.connect(libpq_url(database_url)) as conn:
        tables = tenancy.protected_tables(tenant_tables(conn))
        conn.execute(f"SET ROLE {tenancy.APP_ROLE}")
        conn.execute("SELECT set_config(%s, %s, false)", (tenancy.TENANT_SETTING, a))
        seen: dict[str, int] = {}
        for table in tables:
            if table in tenancy.PARENT_SCOPED:
                rows = conn.execute(sql.SQL(PARENT_TENANT_SQL[table])).fetchall()
            else:
                rows = conn.execute(
                    sql.SQL("SELECT tenant_id FROM {}").format(sql.Identifier(table))
                ).fetchall()
            tenants = {row[0] for row in rows}
            assert tenants <= {a}, (table, tenants)
            seen[table] = len(rows)
        # The test does see tenant A's rows in these, so it would have seen B's.
        for table in (
            "person",
            "role",
            "person_role",
            "person_group",
            "group_membership",
            "guardianship",
            "notification_push_token",
            "notification_event",
            "notification_recipient",
            "notification_delivery",
            "notification_delivery_queue",
            "notification_escalation_step",
            "notification_escalation_override",
            "notification_escalation_override_version",
            "feed_notification",
            "feed_notification_read",
            "followup",
            "console_session",
            "pending_receipt",
            "notification_provider_account",
        ):
            assert seen.get(table, 0) > 0, (table, seen)

        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                "INSERT INTO person (tenant_id, external_id, full_name) VALUES (%s, 'x', 'X')",
                (b,),
            )
        conn.rollback()
        conn.execute(f"SET ROLE {tenancy.APP_ROLE}")
        conn.execute("SELECT set_config(%s, %s, false)", (tenancy.TENANT_SETTING, a))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("UPDATE person SET tenant_id = %s WHERE tenant_id = %s", (b, a))
        conn.rollback()
        # B's rows cannot even be addressed: an UPDATE by B's tenant id touches nothing.
        conn.execute(f"SET ROLE {tenancy.APP_ROLE}")
        conn.execute("SELECT set_config(%s, %s, false)", (tenancy.TENANT_SETTING, a))
        touched = conn.execute(
            "UPDATE person SET full_name = 'stolen' WHERE tenant_id = %s", (b,)
        ).rowcount
        assert touched == 0
        conn.rollback()

        conn.execute(f"SET ROLE {tenancy.APP_ROLE}")  # no tenant at all: nothing
        conn.execute("SELECT set_config(%s, '', false)", (tenancy.TENANT_SETTING,))
        for table in (
            "person",
            "notification_event",
            "notification_delivery",
            "notification_delivery_queue",
            "pending_receipt",
        ):
            count = conn.execute(
                sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
            ).fetchone()
            assert count == (0,), table


async def test_enter_tenant_lasts_one_transaction(engine: AsyncEngine, tenant: str) -> None:
    """Issue 9: the tenant and the role are transaction-local (SET LOCAL): a pooled connection
    never carries one request's tenant to the next."""
    async with engine.begin() as conn:
        await seed.person(conn, tenant, "u1")
    async with engine.connect() as conn:
        async with conn.begin():
            await tenancy.enter_tenant(conn, tenant)
            inside = (
                await conn.execute(text("SELECT current_user, current_setting('herald.tenant_id')"))
            ).one()
        after = (
            await conn.execute(
                text("SELECT current_user, current_setting('herald.tenant_id', true)")
            )
        ).one()
    assert tuple(inside) == (tenancy.APP_ROLE, tenant)
    assert after[0] != tenancy.APP_ROLE and after[1] in (None, "")


@pytest.fixture
def owner_role(server_url: str) -> Iterator[str]:
    """A login role that is not a superuser but owns its database and may create roles."""
    name = f"herald_owner_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(libpq_url(server_url), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEROLE").format(sql.Identifier(name)))
    yield name
    with psycopg.connect(libpq_url(server_url), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def test_migrate_as_a_non_superuser_owner(server_url: str, owner_role: str) -> None:
    """Issue 9: `herald migrate` as a schema owner that is not a superuser. Where it may not join
    herald_app it stops, changing nothing, and prints the exact SQL for a database administrator;
    once that ran, the migration completes, and herald_app is held to one tenant there too."""
    name = f"herald_test_owner_{uuid.uuid4().hex[:8]}"
    admin_url = create_database(server_url, name)
    try:
        with psycopg.connect(libpq_url(admin_url), autocommit=True) as conn:
            conn.execute(
                sql.SQL("ALTER DATABASE {} OWNER TO {}").format(
                    sql.Identifier(name), sql.Identifier(owner_role)
                )
            )
            conn.execute(
                sql.SQL("ALTER SCHEMA public OWNER TO {}").format(sql.Identifier(owner_role))
            )
        owner_url = make_url(admin_url).set(username=owner_role).render_as_string(False)
        try:
            migrate.upgrade(owner_url)
        except tenancy.RoleSetupRefused as refused:
            # PostgreSQL 16 and later: CREATEROLE alone may not grant an existing role.
            expected = f'GRANT {tenancy.APP_ROLE} TO "{owner_role}"'
            assert expected in refused.message, refused.message
            with psycopg.connect(libpq_url(admin_url), autocommit=True) as conn:
                assert conn.execute("SELECT to_regclass('notification_event')").fetchone() == (
                    None,
                )  # nothing was half-made
                conn.execute(expected)
            migrate.upgrade(owner_url)
        with psycopg.connect(libpq_url(owner_url)) as conn:
            conn.execute(
                "INSERT INTO person (tenant_id, external_id, full_name) "
                "VALUES ('t1', 'p', 'P'), ('t2', 'p', 'P')"
            )
            assert conn.execute("SELECT count(*) FROM person").fetchone() == (2,)  # owner: all
            conn.execute(f"SET ROLE {tenancy.APP_ROLE}")
            conn.execute("SELECT set_config(%s, 't1', false)", (tenancy.TENANT_SETTING,))
            assert conn.execute("SELECT tenant_id FROM person").fetchall() == [("t1",)]
            conn.rollback()
    finally:
        drop_database(server_url, name)
