"""The template-override admin over HTTP, and overrides on the send path.

Operators are seeded as a host would set them up: a role with permissions in the directory, a
person holding it, a JWT naming it as the active role; or an API key with the `admin` scope.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from httpx import AsyncClient, Response
from sqlalchemy import func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald import vocabulary
from herald.admin.templates import queries as template_queries
from herald.audit.service import module_of, record_audit
from herald.auth.service import Operator, create_api_key, sign_token
from herald.config import Settings
from herald.db import schema as s
from herald.errors import TemplateBodyBlank
from herald.fanout.worker import fan_out_next_event
from herald.kinds import Registry
from herald.rendering import render as render_module
from herald.sending.service import SendInput, asend
from tests import seed

BASE = "/v1/admin/templates"
TEMPLATE_PERMISSIONS = [p for p in vocabulary.PERMISSIONS if p.startswith("NotificationTemplate_")]
NEW = {
    "kind": "announcement.posted",
    "channel": "in_app",
    "locale": "en",
    "title": "Notice: {{title}}",
    "body": "{{message}} (posted for {{name}})",
}


@dataclass(frozen=True)
class Operators:
    """Bearer headers for each kind of caller in one tenant."""

    admin_key: dict[str, str]  # API key with the `admin` scope: a superadmin of the tenant
    editor: dict[str, str]  # every NotificationTemplate_* permission, not superadmin (R-SEC-4)
    reader: dict[str, str]  # NotificationTemplate_READ only
    clerk: dict[str, str]  # an operator role without any template permission
    no_role: dict[str, str]  # the editor's person, with no active role in the token
    dismissed: dict[str, str]  # names the editor role, which this person no longer holds


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


async def role_with(engine: AsyncEngine, tenant: str, code: str, permissions: list[str]) -> int:
    async with engine.begin() as conn:
        role_id = await seed.role(conn, tenant, code, "staff")
        await conn.execute(
            update(s.role).where(s.role.c.id == role_id).values(permissions=permissions)
        )
    return role_id


async def operators(engine: AsyncEngine, settings: Settings, tenant: str) -> Operators:
    editor_role = await role_with(engine, tenant, "template-editor", TEMPLATE_PERMISSIONS)
    reader_role = await role_with(engine, tenant, "template-reader", ["NotificationTemplate_READ"])
    clerk_role = await role_with(
        engine, tenant, "clerk", ["NotificationHistory_READ", "NotificationFailure_READ"]
    )
    async with engine.begin() as conn:
        await seed.person(conn, tenant, "editor", roles=[editor_role])
        await seed.person(conn, tenant, "reader", roles=[reader_role])
        await seed.person(conn, tenant, "clerk", roles=[clerk_role])
        await seed.person(conn, tenant, "former-editor", roles=[clerk_role])
        key = await create_api_key(conn, tenant_id=tenant, scopes=["admin"])

    def token(subject: str, role: str | None) -> dict[str, str]:
        return bearer(sign_token(settings, tenant_id=tenant, subject=subject, role=role))

    return Operators(
        admin_key=bearer(key),
        editor=token("editor", "template-editor"),
        reader=token("reader", "template-reader"),
        clerk=token("clerk", "clerk"),
        no_role=token("editor", None),
        dismissed=token("former-editor", "template-editor"),
    )


async def create(client: AsyncClient, headers: dict[str, str], **changes: Any) -> dict[str, Any]:
    response = await client.post(BASE, json={**NEW, **changes}, headers=headers)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def error_code(response: Response) -> str:
    code: str = response.json()["error"]["code"]
    return code


async def audit_rows(engine: AsyncEngine, tenant: str) -> list[dict[str, Any]]:
    a = s.audit_record
    async with engine.connect() as conn:
        rows = await conn.execute(select(a).where(a.c.tenant_id == tenant).order_by(a.c.id))
        return [dict(row._mapping) for row in rows]


async def version_rows(engine: AsyncEngine, tenant: str) -> list[dict[str, Any]]:
    v = s.notification_template_version
    async with engine.connect() as conn:
        rows = await conn.execute(select(v).where(v.c.tenant_id == tenant).order_by(v.c.id))
        return [dict(row._mapping) for row in rows]


async def count(engine: AsyncEngine, table: Any, tenant: str) -> int:
    async with engine.connect() as conn:
        return int(
            (
                await conn.execute(
                    select(func.count()).select_from(table).where(table.c.tenant_id == tenant)
                )
            ).scalar_one()
        )


# ---------------------------------------------------------------------------------------------
# Create, update, publish, archive, delete


async def test_create_is_a_versioned_audited_draft(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-ADMIN-1, R-RENDER-43, R-RENDER-40, R-ADMIN-7, R-ADMIN-8, R-SEC-18: an override is created
    as a draft at version 1 with its first version row and a `create` audit entry naming the
    operator and the created values."""
    ops = await operators(engine, settings, tenant)
    created = await create(client, ops.editor)

    assert created["status"] == "draft"
    assert created["version"] == 1
    assert (created["title"], created["body"]) == (NEW["title"], NEW["body"])
    assert created["createdBy"] == created["updatedBy"] == "person:editor"

    versions = await version_rows(engine, tenant)
    assert [(v["version"], v["status"], v["body"]) for v in versions] == [(1, "draft", NEW["body"])]

    [entry] = await audit_rows(engine, tenant)
    assert (entry["action"], entry["entity_type"], entry["entity_id"]) == (
        "create",
        "notification_template",
        created["id"],
    )
    assert module_of(entry["entity_type"]) == "NotificationTemplate"
    assert (entry["actor_kind"], entry["actor_id"]) == ("person", "editor")
    assert entry["changes"] == {
        "kind": "announcement.posted",
        "channel": "in_app",
        "locale": "en",
        "status": "draft",
        "title": NEW["title"],
        "body": NEW["body"],
        "version": 1,
    }

    fetched = await client.get(f"{BASE}/{created['id']}", headers=ops.reader)
    assert fetched.status_code == 200
    assert fetched.json() == created


async def test_update_increments_the_version_and_audits_each_field(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-ADMIN-5, R-ADMIN-6, R-ADMIN-8, R-SCHEMA-41, R-RENDER-40: an update with the version the
    client read answers version + 1, appends a version row, and audits every changed field with
    its before and after value under resource type notification_template."""
    ops = await operators(engine, settings, tenant)
    created = await create(client, ops.editor)

    response = await client.put(
        f"{BASE}/{created['id']}",
        json={"version": 1, "title": "Changed: {{title}}", "body": NEW["body"]},
        headers=ops.editor,
    )
    assert response.status_code == 200, response.text
    updated = response.json()
    assert updated["version"] == 2
    assert updated["title"] == "Changed: {{title}}"
    assert updated["status"] == "draft"

    versions = await version_rows(engine, tenant)
    assert [(v["version"], v["title"]) for v in versions] == [
        (1, NEW["title"]),
        (2, "Changed: {{title}}"),
    ]
    entry = (await audit_rows(engine, tenant))[-1]
    assert (entry["action"], entry["entity_type"], entry["entity_id"]) == (
        "update",
        "notification_template",
        created["id"],
    )
    assert module_of(entry["entity_type"]) == "NotificationTemplate"
    # The body did not change, so it is not listed; the version always does.
    assert entry["changes"] == {
        "title": {"before": NEW["title"], "after": "Changed: {{title}}"},
        "version": {"before": 1, "after": 2},
    }


async def test_a_stale_version_is_a_409_and_changes_nothing(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-ADMIN-5, R-SEC-17: update, publish, archive and delete carrying a version the row has
    moved past answer 409 NOTIFICATION_TEMPLATE_VERSION_CONFLICT and write nothing."""
    ops = await operators(engine, settings, tenant)
    created = await create(client, ops.editor)
    url = f"{BASE}/{created['id']}"
    first = await client.put(url, json={"version": 1, **_wording("first")}, headers=ops.editor)
    assert first.status_code == 200
    audits, versions = (
        len(await audit_rows(engine, tenant)),
        len(await version_rows(engine, tenant)),
    )

    stale = [
        await client.put(url, json={"version": 1, **_wording("second")}, headers=ops.editor),
        await client.post(f"{url}/publish", json={"version": 1}, headers=ops.editor),
        await client.post(f"{url}/archive", json={"version": 1}, headers=ops.editor),
        await client.delete(url, params={"version": 1}, headers=ops.editor),
    ]
    for response in stale:
        assert response.status_code == 409, response.text
        assert error_code(response) == "NOTIFICATION_TEMPLATE_VERSION_CONFLICT"

    current = (await client.get(url, headers=ops.editor)).json()
    assert (current["version"], current["body"], current["status"]) == (2, "first", "draft")
    assert len(await audit_rows(engine, tenant)) == audits
    assert len(await version_rows(engine, tenant)) == versions


async def test_the_update_statement_itself_compares_the_version(
    engine: AsyncEngine, tenant: str
) -> None:
    """R-ADMIN-5, R-SCHEMA-41: the compare-and-set is in the UPDATE (`WHERE version = :read`),
    not only in a read before it: a stale expected version matches zero rows, a current one
    increments the version in the same statement."""
    async with engine.begin() as conn:
        row = await template_queries.insert_override(
            conn, tenant, kind="fee.due", channel="sms", locale="en", title=None,
            body="Due: {{amount}}", actor="test",
        )  # fmt: skip
        assert row is not None
        stale = await template_queries.compare_and_set(
            conn, tenant, row["id"], expected_version=7, changes={"body": "x"}, actor="test"
        )
        assert stale is None
        fresh = await template_queries.compare_and_set(
            conn, tenant, row["id"], expected_version=1, changes={"body": "y"}, actor="test"
        )
        assert fresh is not None
        assert (fresh["version"], fresh["body"]) == (2, "y")


async def test_concurrent_updates_of_one_version_let_exactly_one_win(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-ADMIN-5: two editors who both read version 1 and save at the same moment: one succeeds,
    the other gets the version conflict from the UPDATE's own compare; the row moves to version 2
    exactly once. A row lock held by the test makes both requests pass their read and wait at the
    UPDATE together, so the race is forced rather than hoped for."""
    ops = await operators(engine, settings, tenant)
    created = await create(client, ops.editor)
    url = f"{BASE}/{created['id']}"
    t = s.notification_template
    async with engine.connect() as locker:
        lock = await locker.begin()
        await locker.execute(
            select(t.c.id).where(t.c.public_id == uuid.UUID(created["id"])).with_for_update()
        )
        racers = [
            asyncio.create_task(
                client.put(url, json={"version": 1, **_wording("from A")}, headers=ops.editor)
            ),
            asyncio.create_task(
                client.put(url, json={"version": 1, **_wording("from B")}, headers=ops.admin_key)
            ),
        ]
        await _until_waiting_on_locks(engine, 2)
        await lock.rollback()
    responses = await asyncio.gather(*racers)
    assert sorted(r.status_code for r in responses) == [200, 409]
    assert error_code(next(r for r in responses if r.status_code == 409)) == (
        "NOTIFICATION_TEMPLATE_VERSION_CONFLICT"
    )
    assert (await client.get(url, headers=ops.editor)).json()["version"] == 2
    assert [v["version"] for v in await version_rows(engine, tenant)] == [1, 2]


async def _until_waiting_on_locks(engine: AsyncEngine, sessions: int) -> None:
    """Wait until `sessions` backends of this database are blocked on a lock (a condition, not a
    duration: the bound only stops a broken test from hanging)."""
    query = text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    for _ in range(1_000):
        async with engine.connect() as conn:
            if (await conn.execute(query)).scalar_one() >= sessions:
                return
        await asyncio.sleep(0.01)
    pytest.fail(f"{sessions} sessions never waited on the row lock")


async def test_no_trigger_maintains_the_template_table(engine: AsyncEngine) -> None:
    """R-SCHEMA-41: the version is the application's; no trigger touches notification_template."""
    async with engine.connect() as conn:
        triggers = (
            await conn.execute(
                text(
                    "SELECT tgname FROM pg_trigger "
                    "WHERE tgrelid = 'notification_template'::regclass AND NOT tgisinternal"
                )
            )
        ).all()
    assert triggers == []


async def test_publish_and_archive_are_versioned_audited_transitions(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-RENDER-40, R-RENDER-43, R-RENDER-44, R-SEC-18: publish and archive each move the version,
    append a version row and write an audit entry with the status before and after; a repeated
    transition is a 409 status conflict, and an archived override can be published again."""
    ops = await operators(engine, settings, tenant)
    created = await create(client, ops.editor)
    url = f"{BASE}/{created['id']}"

    published = await client.post(f"{url}/publish", json={"version": 1}, headers=ops.editor)
    assert published.status_code == 200, published.text
    assert (published.json()["status"], published.json()["version"]) == ("published", 2)
    again = await client.post(f"{url}/publish", json={"version": 2}, headers=ops.editor)
    assert again.status_code == 409
    assert error_code(again) == "NOTIFICATION_TEMPLATE_STATUS_CONFLICT"

    archived = await client.post(f"{url}/archive", json={"version": 2}, headers=ops.editor)
    assert (archived.json()["status"], archived.json()["version"]) == ("archived", 3)
    again = await client.post(f"{url}/archive", json={"version": 3}, headers=ops.editor)
    assert error_code(again) == "NOTIFICATION_TEMPLATE_STATUS_CONFLICT"

    republished = await client.post(f"{url}/publish", json={"version": 3}, headers=ops.editor)
    assert (republished.json()["status"], republished.json()["version"]) == ("published", 4)

    assert [(v["version"], v["status"]) for v in await version_rows(engine, tenant)] == [
        (1, "draft"),
        (2, "published"),
        (3, "archived"),
        (4, "published"),
    ]
    entries = await audit_rows(engine, tenant)
    assert [e["action"] for e in entries] == ["create", "publish", "archive", "publish"]
    assert entries[1]["changes"] == {
        "status": {"before": "draft", "after": "published"},
        "version": {"before": 1, "after": 2},
    }
    assert entries[2]["changes"]["status"] == {"before": "published", "after": "archived"}


async def test_version_rows_are_never_modified(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-RENDER-40: later changes append rows; the earlier rows keep exactly what they recorded."""
    ops = await operators(engine, settings, tenant)
    created = await create(client, ops.editor)
    url = f"{BASE}/{created['id']}"
    before = await version_rows(engine, tenant)
    await client.put(url, json={"version": 1, **_wording("v2")}, headers=ops.editor)
    await client.post(f"{url}/publish", json={"version": 2}, headers=ops.editor)
    after = await version_rows(engine, tenant)
    assert after[:1] == before
    assert len(after) == 3


async def test_delete_removes_the_override_keeps_its_history_and_is_audited(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-ADMIN-7, R-RENDER-40: delete answers 204, the override is gone (404 after), its version
    rows stay as history, and a `delete` audit entry records what was removed."""
    ops = await operators(engine, settings, tenant)
    created = await create(client, ops.editor)
    url = f"{BASE}/{created['id']}"

    response = await client.delete(url, params={"version": 1}, headers=ops.editor)
    assert response.status_code == 204
    assert (await client.get(url, headers=ops.editor)).status_code == 404
    assert await count(engine, s.notification_template, tenant) == 0

    [kept] = await version_rows(engine, tenant)
    assert (kept["template_id"], kept["version"], kept["body"]) == (None, 1, NEW["body"])
    entry = (await audit_rows(engine, tenant))[-1]
    assert (entry["action"], entry["entity_id"]) == ("delete", created["id"])
    assert entry["changes"]["body"] == NEW["body"]
    assert entry["changes"]["version"] == 1

    # The (kind, channel, locale) is free again.
    await create(client, ops.editor)


async def test_an_api_key_operator_is_recorded_as_such(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-SEC-18: the audit actor is the operator: an API key is recorded as `api_key` with its id."""
    ops = await operators(engine, settings, tenant)
    created = await create(client, ops.admin_key)
    [entry] = await audit_rows(engine, tenant)
    assert entry["actor_kind"] == "api_key"
    assert created["createdBy"] == f"api_key:{entry['actor_id']}"
    uuid.UUID(entry["actor_id"])  # the key's public id, never the key


# ---------------------------------------------------------------------------------------------
# Validation at save


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"body": "Hello {{teacherName}}"}, "NOTIFICATION_TEMPLATE_PLACEHOLDER_UNKNOWN"),
        ({"title": "{{secretRef}}"}, "NOTIFICATION_TEMPLATE_PLACEHOLDER_UNKNOWN"),
        ({"body": "{{a.b}}"}, "NOTIFICATION_TEMPLATE_PLACEHOLDER_MALFORMED"),
        ({"body": "{{ message() }}"}, "NOTIFICATION_TEMPLATE_PLACEHOLDER_MALFORMED"),
        ({"body": "{{}}"}, "NOTIFICATION_TEMPLATE_PLACEHOLDER_MALFORMED"),
        ({"body": "{{message"}, "NOTIFICATION_TEMPLATE_PLACEHOLDER_MALFORMED"),
        ({"body": ""}, "NOTIFICATION_TEMPLATE_BODY_BLANK"),
        ({"body": "    "}, "NOTIFICATION_TEMPLATE_BODY_BLANK"),
        ({"body": " \n\t "}, "NOTIFICATION_TEMPLATE_BODY_BLANK"),
        ({"title": None}, "NOTIFICATION_TEMPLATE_TITLE_REQUIRED"),
        ({"title": "   "}, "NOTIFICATION_TEMPLATE_TITLE_REQUIRED"),
        ({"channel": "sms", "body": "{{message}}"}, "NOTIFICATION_TEMPLATE_TITLE_NOT_ALLOWED"),
        ({"kind": "no.such.kind"}, "NOTIFICATION_TEMPLATE_NOT_FOUND"),
        ({"kind": "fee.due", "channel": "push"}, "NOTIFICATION_CHANNEL_UNKNOWN"),
        (
            {
                "channel": "telegram",
                "title": None,
                "body": '<a href="https://x.test">{{title}}</a>',
            },
            "TELEGRAM_TEMPLATE_INVALID",
        ),
        (
            {"channel": "telegram", "title": None, "body": "<b>{{title}}"},
            "TELEGRAM_TEMPLATE_INVALID",
        ),
        (
            {"kind": "auth.otp", "channel": "sms", "title": None, "body": "Sign in now"},
            "NOTIFICATION_TEMPLATE_PLACEHOLDER_REQUIRED",
        ),
    ],
)
async def test_invalid_wording_is_a_400_and_writes_nothing(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    changes: dict[str, Any],
    code: str,
) -> None:
    """R-RENDER-8, R-SCHEMA-42, R-RENDER-29, R-RENDER-30, R-RENDER-31, R-RENDER-32, R-RENDER-33, R-RENDER-34, R-SEC-13: an override may use only the kind's
    declared variables as flat placeholders, has a non-blank body, a title where the channel shows
    one, valid Telegram markup, and keeps the secret a security message exists to carry; anything
    else is a 400 with its code (never a 500) and leaves no row, version or audit entry."""
    ops = await operators(engine, settings, tenant)
    response = await client.post(BASE, json={**NEW, **changes}, headers=ops.editor)
    assert response.status_code == 400, response.text
    assert error_code(response) == code
    assert await count(engine, s.notification_template, tenant) == 0
    assert await count(engine, s.notification_template_version, tenant) == 0
    assert await count(engine, s.audit_record, tenant) == 0


async def test_the_unknown_placeholder_error_names_it(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-RENDER-8: the 400 names the undeclared placeholder, and an update is checked the same."""
    ops = await operators(engine, settings, tenant)
    created = await create(client, ops.editor)
    response = await client.put(
        f"{BASE}/{created['id']}",
        json={"version": 1, "title": "{{title}}", "body": "{{teacherName}} says {{message}}"},
        headers=ops.editor,
    )
    assert response.status_code == 400
    assert error_code(response) == "NOTIFICATION_TEMPLATE_PLACEHOLDER_UNKNOWN"
    assert "teacherName" in response.json()["error"]["message"]
    assert (await client.get(f"{BASE}/{created['id']}", headers=ops.editor)).json()["version"] == 1


@pytest.mark.parametrize(
    "changes",
    [
        {"channel": "telegram", "title": None, "body": "<b>{{title}}</b>\n{{message}}"},
        {"channel": "sms", "title": None, "body": "{{title}}: {{message}}"},
        {"channel": "sms", "title": "", "body": "{{title}}: {{message}}"},
        {"kind": "auth.otp", "channel": "sms", "title": None, "body": "Code: {{code}}"},
        {"locale": "ne-NP"},
    ],
)
async def test_valid_wording_on_each_channel_is_accepted(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    changes: dict[str, Any],
) -> None:
    """R-RENDER-29, R-RENDER-8: allowed Telegram tags, body-only channels, a security kind that
    keeps its code, and a regional locale are all accepted."""
    ops = await operators(engine, settings, tenant)
    created = await create(client, ops.editor, **changes)
    assert created["body"] == changes.get("body", NEW["body"])
    if changes.get("channel") in ("sms", "telegram"):
        assert created["title"] is None


async def test_unknown_fields_and_malformed_bodies_are_refused(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-SEC-13: strict request schemas: an unknown field, a missing version or a NUL byte is
    refused before anything runs."""
    ops = await operators(engine, settings, tenant)
    extra = await client.post(BASE, json={**NEW, "status": "published"}, headers=ops.editor)
    assert extra.status_code == 422
    nul = await client.post(BASE, json={**NEW, "body": "a\x00b"}, headers=ops.editor)
    assert nul.status_code == 422
    created = await create(client, ops.editor)
    no_version = await client.put(f"{BASE}/{created['id']}", json=_wording("x"), headers=ops.editor)
    assert no_version.status_code == 422
    assert await count(engine, s.notification_template_version, tenant) == 1


async def test_a_duplicate_override_is_a_409(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-ADMIN-1: one override per (kind, channel, locale); a second create is a 409."""
    ops = await operators(engine, settings, tenant)
    await create(client, ops.editor)
    response = await client.post(BASE, json=NEW, headers=ops.editor)
    assert response.status_code == 409
    assert error_code(response) == "NOTIFICATION_TEMPLATE_OVERRIDE_EXISTS"


async def test_the_body_check_is_translated_where_the_sql_runs(
    engine: AsyncEngine, tenant: str
) -> None:
    """R-SCHEMA-42: a writer that skips the service's check still gets a coded 400 for an
    all-space body, not a driver error; a tab-only body passes the table's CHECK."""
    with pytest.raises(TemplateBodyBlank):
        async with engine.begin() as conn:
            await template_queries.insert_override(
                conn, tenant, kind="fee.due", channel="sms", locale="en", title=None,
                body="   ", actor="test",
            )  # fmt: skip
    async with engine.begin() as conn:
        row = await template_queries.insert_override(
            conn, tenant, kind="fee.due", channel="sms", locale="en", title=None,
            body="\t", actor="test",
        )  # fmt: skip
    assert row is not None


async def test_publish_checks_the_wording_again(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-RENDER-27, R-RENDER-8: a draft written around the API with an undeclared placeholder
    cannot be published (400); it can still be archived."""
    ops = await operators(engine, settings, tenant)
    created = await create(client, ops.editor)
    async with engine.begin() as conn:
        await conn.execute(
            update(s.notification_template)
            .where(s.notification_template.c.public_id == uuid.UUID(created["id"]))
            .values(body="{{teacherName}}")
        )
    url = f"{BASE}/{created['id']}"
    response = await client.post(f"{url}/publish", json={"version": 1}, headers=ops.editor)
    assert response.status_code == 400
    assert error_code(response) == "NOTIFICATION_TEMPLATE_PLACEHOLDER_UNKNOWN"
    archived = await client.post(f"{url}/archive", json={"version": 1}, headers=ops.editor)
    assert archived.status_code == 200


# ---------------------------------------------------------------------------------------------
# Lists


async def test_the_list_is_paged_in_a_stable_order(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-ADMIN-9, R-ADMIN-10: bounded pages in (kind, channel, locale, id) order; following the
    cursor visits every override exactly once; filters narrow the list."""
    ops = await operators(engine, settings, tenant)
    made = [
        ("fee.due", "sms", "en", None, "Due: {{amount}}"),
        ("announcement.posted", "sms", "ne", None, "{{message}}"),
        ("announcement.posted", "in_app", "ne", "{{title}}", "{{message}}"),
        ("announcement.posted", "in_app", "en", "{{title}}", "{{message}}"),
        ("fee.due", "email", "en", "Fee", "Due: {{amount}}"),
    ]
    for kind, channel, locale, title, body in made:
        await create(
            client, ops.editor, kind=kind, channel=channel, locale=locale, title=title, body=body
        )

    seen: list[tuple[str, str, str]] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        response = await client.get(BASE, params=params, headers=ops.reader)
        assert response.status_code == 200, response.text
        page = response.json()
        assert len(page["items"]) <= 2
        seen += [(i["kind"], i["channel"], i["locale"]) for i in page["items"]]
        pages += 1
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == sorted((k, c, loc) for k, c, loc, _, _ in made)

    only_fee = await client.get(BASE, params={"kind": "fee.due"}, headers=ops.reader)
    assert [i["channel"] for i in only_fee.json()["items"]] == ["email", "sms"]
    in_app = await client.get(
        BASE, params={"channel": "in_app", "locale": "ne"}, headers=ops.reader
    )
    assert [(i["kind"], i["locale"]) for i in in_app.json()["items"]] == [
        ("announcement.posted", "ne")
    ]
    drafts = await client.get(BASE, params={"status": "published"}, headers=ops.reader)
    assert drafts.json()["items"] == []


@pytest.mark.parametrize(
    ("path", "params", "code"),
    [
        (BASE, {"pagination": "false"}, "PAGINATION_REQUIRED"),
        (f"{BASE}/kinds", {"pagination": "false"}, "PAGINATION_REQUIRED"),
        (BASE, {"limit": "0"}, "REQUEST_MALFORMED"),
        (BASE, {"limit": "101"}, "REQUEST_MALFORMED"),
        (BASE, {"limit": "all"}, "REQUEST_MALFORMED"),
        (BASE, {"cursor": "not-a-cursor"}, "CURSOR_INVALID"),
        (BASE, {"cursor": "WyJrIiwiYSJd"}, "CURSOR_INVALID"),  # a kinds-list cursor
        (f"{BASE}/kinds", {"cursor": "WyJ0IiwiYSIsImIiLCJjIiwxXQ"}, "CURSOR_INVALID"),
        (BASE, {"channel": "fax"}, "REQUEST_MALFORMED"),
        (BASE, {"status": "live"}, "REQUEST_MALFORMED"),
    ],
)
async def test_list_parameters_are_checked(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    path: str,
    params: dict[str, str],
    code: str,
) -> None:
    """R-ADMIN-9: every list refuses pagination=false and unbounded or malformed paging with a 400;
    a cursor is only accepted by the list that issued it."""
    ops = await operators(engine, settings, tenant)
    response = await client.get(path, params=params, headers=ops.admin_key)
    assert response.status_code == (422 if code == "REQUEST_MALFORMED" else 400), response.text
    assert error_code(response) == code


async def test_versions_are_listed_newest_first_in_pages(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-RENDER-40, R-ADMIN-9, R-ADMIN-10: an override's version history, newest first, paged."""
    ops = await operators(engine, settings, tenant)
    created = await create(client, ops.editor)
    url = f"{BASE}/{created['id']}"
    for version in (1, 2):
        await client.put(
            url, json={"version": version, **_wording(f"v{version + 1}")}, headers=ops.editor
        )
    await client.post(f"{url}/publish", json={"version": 3}, headers=ops.editor)

    first = (await client.get(f"{url}/versions", params={"limit": 3}, headers=ops.reader)).json()
    assert [(i["version"], i["status"]) for i in first["items"]] == [
        (4, "published"),
        (3, "draft"),
        (2, "draft"),
    ]
    rest = (
        await client.get(
            f"{url}/versions",
            params={"limit": 3, "cursor": first["nextCursor"]},
            headers=ops.reader,
        )
    ).json()
    assert [i["version"] for i in rest["items"]] == [1]
    assert rest["nextCursor"] is None
    refused = await client.get(
        f"{url}/versions", params={"pagination": "false"}, headers=ops.reader
    )
    assert error_code(refused) == "PAGINATION_REQUIRED"


async def test_the_kinds_listing_shows_the_registry_and_the_overrides(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    registry: Registry,
) -> None:
    """R-RENDER-1, R-ADMIN-9: registry kinds in name order, in pages, each with its variables and
    samples (secrets masked), its shipped wording per channel and locale, and this tenant's
    override, if any, for each (channel, locale)."""
    ops = await operators(engine, settings, tenant)
    created = await create(client, ops.editor)

    names: list[str] = []
    items: dict[str, dict[str, Any]] = {}
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 5, **({"cursor": cursor} if cursor else {})}
        page = (await client.get(f"{BASE}/kinds", params=params, headers=ops.reader)).json()
        names += [i["kind"] for i in page["items"]]
        items.update({i["kind"]: i for i in page["items"]})
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert names == sorted(k.name for k in registry)

    announcement = items["announcement.posted"]
    assert {v["name"]: (v["source"], v["sample"]) for v in announcement["variables"]} == {
        "title": ("event", "Sports day moved"),
        "message": ("event", "It is now on Friday."),
        "name": ("recipient", "Sita Sharma"),
    }
    in_app = next(c for c in announcement["channels"] if c["channel"] == "in_app")
    assert in_app["titleRequired"] is True
    by_locale = {loc["locale"]: loc for loc in in_app["locales"]}
    assert by_locale["en"]["registry"] == {"title": "{{title}}", "body": "{{message}}"}
    assert by_locale["en"]["override"] == {"id": created["id"], "status": "draft", "version": 1}
    assert by_locale["ne"]["override"] is None

    otp = {v["name"]: v for v in items["auth.otp"]["variables"]}
    assert (otp["code"]["source"], otp["code"]["sample"]) == ("secret", "••••••")


# ---------------------------------------------------------------------------------------------
# Permissions


async def test_a_clerk_without_the_permission_sees_nothing(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-SEC-3, R-SEC-7, R-SEC-16: an operator whose active role lacks the NotificationTemplate
    permissions gets 404 on every id-addressed route and every mutation, and empty lists; so does
    a token with no active role and one naming a role the person no longer holds."""
    ops = await operators(engine, settings, tenant)
    created = await create(client, ops.editor)
    url = f"{BASE}/{created['id']}"
    for headers in (ops.clerk, ops.no_role, ops.dismissed):
        calls = [
            await client.get(url, headers=headers),
            await client.get(f"{url}/versions", headers=headers),
            await client.put(url, json={"version": 1, **_wording("x")}, headers=headers),
            await client.post(f"{url}/publish", json={"version": 1}, headers=headers),
            await client.post(f"{url}/archive", json={"version": 1}, headers=headers),
            await client.delete(url, headers=headers),
            await client.post(BASE, json={**NEW, "locale": "ne"}, headers=headers),
            await client.post(f"{BASE}/preview", json=NEW, headers=headers),
        ]
        assert [r.status_code for r in calls] == [404] * len(calls)
        for listing in (BASE, f"{BASE}/kinds"):
            response = await client.get(listing, headers=headers)
            assert response.status_code == 200
            assert response.json() == {"items": [], "nextCursor": None}

    current = (await client.get(url, headers=ops.editor)).json()
    assert current == created
    assert await count(engine, s.notification_template, tenant) == 1
    assert [e["action"] for e in await audit_rows(engine, tenant)] == ["create"]


async def test_each_verb_needs_its_own_permission(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-SEC-3, R-SEC-16: READ lets an operator list, read and preview, but not create, update,
    publish, archive or delete (404 for each)."""
    ops = await operators(engine, settings, tenant)
    created = await create(client, ops.editor)
    url = f"{BASE}/{created['id']}"
    assert (await client.get(url, headers=ops.reader)).status_code == 200
    assert len((await client.get(BASE, headers=ops.reader)).json()["items"]) == 1
    assert (await client.post(f"{BASE}/preview", json=NEW, headers=ops.reader)).status_code == 200
    refused = [
        await client.post(BASE, json={**NEW, "locale": "ne"}, headers=ops.reader),
        await client.put(url, json={"version": 1, **_wording("x")}, headers=ops.reader),
        await client.post(f"{url}/publish", json={"version": 1}, headers=ops.reader),
        await client.post(f"{url}/archive", json={"version": 1}, headers=ops.reader),
        await client.delete(url, headers=ops.reader),
    ]
    assert [r.status_code for r in refused] == [404] * len(refused)


async def test_another_tenants_override_is_not_there(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-SEC-7: a superadmin of another tenant gets 404 for this tenant's override id, on reads
    and writes alike, and does not see it in lists."""
    ops = await operators(engine, settings, tenant)
    created = await create(client, ops.editor)
    other_tenant = f"{tenant}-other"
    async with engine.begin() as conn:
        other = bearer(await create_api_key(conn, tenant_id=other_tenant, scopes=["admin"]))
    url = f"{BASE}/{created['id']}"
    calls = [
        await client.get(url, headers=other),
        await client.put(url, json={"version": 1, **_wording("x")}, headers=other),
        await client.post(f"{url}/publish", json={"version": 1}, headers=other),
        await client.delete(url, headers=other),
        await client.get(f"{url}/versions", headers=other),
    ]
    assert [r.status_code for r in calls] == [404] * len(calls)
    assert error_code(calls[0]) == "NOTIFICATION_TEMPLATE_OVERRIDE_NOT_FOUND"
    assert (await client.get(BASE, headers=other)).json()["items"] == []
    assert (await client.get(f"{BASE}/not-a-uuid", headers=ops.editor)).status_code == 404


async def test_credentials_without_admin_access_are_refused(
    client: AsyncClient, engine: AsyncEngine, tenant: str
) -> None:
    """R-SEC-1, R-SEC-2: no credential is 401; an API key without the admin scope is refused."""
    assert (await client.get(BASE)).status_code == 401
    async with engine.begin() as conn:
        key = await create_api_key(conn, tenant_id=tenant, scopes=["events:write"])
    response = await client.get(BASE, headers=bearer(key))
    assert response.status_code == 403


# ---------------------------------------------------------------------------------------------
# Preview


async def test_preview_renders_samples_and_sends_nothing(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-RENDER-41, R-RENDER-42: a preview renders the wording with the kind's sample values and
    an invented recipient, and creates no event, recipient, delivery, override, version or audit
    row."""
    ops = await operators(engine, settings, tenant)
    response = await client.post(f"{BASE}/preview", json=NEW, headers=ops.reader)
    assert response.status_code == 200, response.text
    shown = response.json()
    assert shown["source"] == "draft"
    assert shown["title"] == "Notice: Sports day moved"
    assert shown["body"] == "It is now on Friday. (posted for Sita Sharma)"
    assert shown["templateVersion"] is None
    for table in (
        s.notification_event,
        s.notification_recipient,
        s.notification_delivery,
        s.notification_template,
        s.notification_template_version,
        s.audit_record,
    ):
        assert await count(engine, table, tenant) == 0, table.name


async def test_preview_masks_secrets_and_escapes_email_html(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-RENDER-41, R-RENDER-11: a secret variable is previewed with a masked stand-in, never a
    plausible value; the email preview's HTML body escapes the values."""
    ops = await operators(engine, settings, tenant)
    otp = await client.post(
        f"{BASE}/preview",
        json={"kind": "auth.otp", "channel": "sms", "locale": "en", "body": "Code {{code}}"},
        headers=ops.reader,
    )
    assert otp.json()["body"] == "Code ••••••"
    assert otp.json()["variables"]["code"] == "••••••"

    email = await client.post(
        f"{BASE}/preview",
        json={
            "kind": "assignment.published",
            "channel": "email",
            "locale": "en",
            "title": "{{subject}}",
            "body": "<p>{{title}} & {{name}}</p>",
        },
        headers=ops.reader,
    )
    assert email.status_code == 200, email.text
    assert email.json()["bodyHtml"] == "<p>Fractions worksheet & Sita Sharma</p>"


async def test_preview_without_wording_shows_what_recipients_get(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-RENDER-4, R-RENDER-43: without a body the preview shows the registry wording while the
    override is a draft, and the override once it is published."""
    ops = await operators(engine, settings, tenant)
    request = {"kind": "announcement.posted", "channel": "in_app", "locale": "en"}
    created = await create(client, ops.editor)

    draft_only = (await client.post(f"{BASE}/preview", json=request, headers=ops.reader)).json()
    assert (draft_only["source"], draft_only["title"]) == ("registry", "Sports day moved")

    await client.post(f"{BASE}/{created['id']}/publish", json={"version": 1}, headers=ops.editor)
    live = (await client.post(f"{BASE}/preview", json=request, headers=ops.reader)).json()
    assert (live["source"], live["templateVersion"]) == ("override", 2)
    assert live["title"] == "Notice: Sports day moved"


async def test_preview_checks_wording_like_a_save(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-RENDER-8: previewing an undeclared placeholder is the same 400 a save gives."""
    ops = await operators(engine, settings, tenant)
    response = await client.post(
        f"{BASE}/preview", json={**NEW, "body": "{{teacherName}}"}, headers=ops.reader
    )
    assert response.status_code == 400
    assert error_code(response) == "NOTIFICATION_TEMPLATE_PLACEHOLDER_UNKNOWN"


# ---------------------------------------------------------------------------------------------
# The send path


async def _announce(
    engine: AsyncEngine, tenant: str, registry: Registry, prefix: str = "p"
) -> uuid.UUID:
    """An in-app announcement to three new people, fanned out to completion."""
    async with engine.begin() as conn:
        people = [
            await seed.person(conn, tenant, f"{prefix}{i}", full_name=f"Parent {i}")
            for i in (0, 1, 2)
        ]
        result = await asend(
            conn,
            SendInput(
                tenant_id=tenant,
                kind="announcement.posted",
                audience={"kind": "users", "userIds": [p.external_id for p in people]},
                channels=["in_app"],
                variables={"title": "Sports day moved", "message": "It is now on Friday."},
            ),
            registry=registry,
        )
    assert result is not None
    while await fan_out_next_event(engine, registry, batch_size=100, tenant_id=tenant):
        pass
    return result.id


async def _in_app_deliveries(engine: AsyncEngine, event_id: uuid.UUID) -> list[dict[str, Any]]:
    e, r, d = s.notification_event, s.notification_recipient, s.notification_delivery
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(
                d.c.status,
                d.c.rendered_title,
                d.c.rendered_body,
                d.c.template_version,
                d.c.rendered_hash,
            )
            .select_from(e.join(r, r.c.event_id == e.c.id).join(d, d.c.recipient_id == r.c.id))
            .where(e.c.public_id == event_id, d.c.channel == "in_app")
            .order_by(d.c.id)
        )
        return [dict(row._mapping) for row in rows]


async def test_a_published_override_is_used_and_its_version_recorded(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    registry: Registry,
) -> None:
    """R-RENDER-1, R-RENDER-4, R-RENDER-43: a published override replaces the registry wording at
    fan-out and each delivery records the override's version and a hash of what was rendered; a
    draft is never used."""
    ops = await operators(engine, settings, tenant)
    created = await create(client, ops.editor)
    draft_event = await _announce(engine, tenant, registry, "draft-")
    drafted = await _in_app_deliveries(engine, draft_event)
    assert {(d["rendered_title"], d["template_version"]) for d in drafted} == {
        ("Sports day moved", None)
    }

    await client.post(f"{BASE}/{created['id']}/publish", json={"version": 1}, headers=ops.editor)
    event_id = await _announce(engine, tenant, registry, "live-")
    rows = await _in_app_deliveries(engine, event_id)
    assert len(rows) == 3
    for row in rows:
        assert row["status"] == "delivered"
        assert row["rendered_title"] == "Notice: Sports day moved"
        assert row["rendered_body"].startswith("It is now on Friday. (posted for Parent ")
        assert row["template_version"] == 2
        assert row["rendered_hash"] is not None and len(row["rendered_hash"]) == 64


async def test_a_broken_override_falls_through_to_the_registry_logged_once(
    engine: AsyncEngine,
    tenant: str,
    registry: Registry,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R-RENDER-5, R-RENDER-27, R-RENDER-14, R-RENDER-16: a published override stored around the
    API (as a migration or careless writer might) with an undeclared placeholder never reaches a
    recipient: every in-app delivery gets the registry wording, with no template version, and the
    failure is logged once for its kind:channel:locale, not once per recipient."""
    # A fresh warn-once set, so an earlier test in this process cannot have used up the log line.
    monkeypatch.setattr(render_module, "_warned", set())
    async with engine.begin() as conn:
        await conn.execute(
            insert(s.notification_template).values(
                tenant_id=tenant,
                kind="announcement.posted",
                channel="in_app",
                locale="en",
                status="published",
                title="{{title}}",
                body="{{teacherName}} says: {{message}}",
                version=5,
            )
        )
    caplog.set_level(logging.WARNING, logger="herald.rendering.render")
    event_id = await _announce(engine, tenant, registry)

    rows = await _in_app_deliveries(engine, event_id)
    assert len(rows) == 3
    for row in rows:
        assert row["status"] == "delivered"
        assert (row["rendered_title"], row["rendered_body"]) == (
            "Sports day moved",
            "It is now on Friday.",
        )
        assert row["template_version"] is None
        assert "{{" not in row["rendered_body"]
    warnings = [
        r for r in caplog.records if "announcement.posted:in_app:en override" in r.getMessage()
    ]
    assert len(warnings) == 1
    assert "v5" in warnings[0].getMessage()


# ---------------------------------------------------------------------------------------------
# The audit service itself


async def test_record_audit_writes_one_json_safe_row(engine: AsyncEngine, tenant: str) -> None:
    """R-SEC-18, R-ADMIN-6: record_audit appends one row with the operator as actor and the
    changes as JSON (uuids and timestamps as strings), inside the caller's transaction: a
    rolled-back mutation leaves no audit row."""
    operator = Operator(
        tenant_id=tenant,
        actor_kind="person",
        actor_id="ops-1",
        person_id=None,
        permissions=frozenset(),
        superadmin=False,
    )
    some_id = uuid.uuid4()
    async with engine.begin() as conn:
        await record_audit(
            conn, operator, "update", "notification_template", str(some_id),
            {"ref": {"before": some_id, "after": None}},
        )  # fmt: skip
    with pytest.raises(RuntimeError):
        async with engine.begin() as conn:
            await record_audit(conn, operator, "delete", "notification_template", "x", {})
            raise RuntimeError("the mutation failed")
    [row] = await audit_rows(engine, tenant)
    assert (row["actor_kind"], row["actor_id"], row["action"]) == ("person", "ops-1", "update")
    assert row["changes"] == {"ref": {"before": str(some_id), "after": None}}


def _wording(body: str) -> dict[str, str]:
    return {"title": "{{title}}", "body": body}
