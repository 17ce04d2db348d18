"""The reminder admin over HTTP (`/v1/admin/reminders`, DESIGN.md §5.2)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from httpx import AsyncClient, Response
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.audit.service import module_of
from herald.config import Settings
from herald.db import schema as s
from tests.integration.reminder_helpers import BASE, body, operators, schedule_rows


def code(response: Response) -> str:
    value: str = response.json()["error"]["code"]
    return value


async def create(client: AsyncClient, headers: dict[str, str], **changes: Any) -> dict[str, Any]:
    response = await client.post(BASE, json=body(**changes), headers=headers)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def test_create_read_list_update_delete_with_audit(
    reminders_client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-REMIND-18, R-ADMIN-6, R-ADMIN-7: the schedule's lifecycle, each change audited with
    per-field before/after; nextRunAt is the next occurrence in UTC."""
    ops = await operators(engine, settings, tenant)
    created = await create(reminders_client, ops.editor)
    assert created["version"] == 1
    assert created["localTime"] == "07:30" and created["weekdays"] == [1, 2, 3, 4, 5]
    next_run = datetime.fromisoformat(created["nextRunAt"])
    assert created["nextRunAt"].endswith("Z")
    assert next_run > datetime.now(UTC)
    local = next_run.astimezone(ZoneInfo("Asia/Kathmandu"))
    assert (local.hour, local.minute) == (7, 30) and local.isoweekday() <= 5

    read = await reminders_client.get(f"{BASE}/{created['id']}", headers=ops.reader)
    assert read.status_code == 200 and read.json() == created
    listed = await reminders_client.get(BASE, headers=ops.reader)
    assert [item["id"] for item in listed.json()["items"]] == [created["id"]]

    changed = body(localTime="18:00", weekdays=[6, 7], version=1)
    updated = await reminders_client.put(
        f"{BASE}/{created['id']}", json=changed, headers=ops.editor
    )
    assert updated.status_code == 200, updated.text
    assert updated.json()["version"] == 2 and updated.json()["weekdays"] == [6, 7]

    disabled = await reminders_client.put(
        f"{BASE}/{created['id']}", json=body(enabled=False, version=2), headers=ops.editor
    )
    assert disabled.json()["nextRunAt"] is None

    gone = await reminders_client.delete(f"{BASE}/{created['id']}", headers=ops.editor)
    assert gone.status_code == 204
    assert (
        await reminders_client.get(f"{BASE}/{created['id']}", headers=ops.editor)
    ).status_code == 404

    a = s.audit_record
    async with engine.connect() as conn:
        audits = (
            await conn.execute(
                select(a.c.action, a.c.entity_type, a.c.changes)
                .where(a.c.tenant_id == tenant)
                .order_by(a.c.id)
            )
        ).all()
    assert [row.action for row in audits] == ["create", "update", "update", "delete"]
    assert {row.entity_type for row in audits} == {"reminder_schedule"}
    assert module_of("reminder_schedule") == "NotificationReminder"
    assert audits[1].changes["local_time"] == {"before": "07:30", "after": "18:00"}


async def test_stale_version_is_a_409_and_changes_nothing(
    reminders_client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-REMIND-18, R-ADMIN-5: an update with the version read before another writer's change
    answers 409 NOTIFICATION_REMINDER_VERSION_CONFLICT; so does a stale delete."""
    ops = await operators(engine, settings, tenant)
    created = await create(reminders_client, ops.editor)
    url = f"{BASE}/{created['id']}"
    first = await reminders_client.put(url, json=body(name="First", version=1), headers=ops.editor)
    assert first.status_code == 200
    stale = await reminders_client.put(url, json=body(name="Second", version=1), headers=ops.editor)
    assert stale.status_code == 409 and code(stale) == "NOTIFICATION_REMINDER_VERSION_CONFLICT"
    stale_delete = await reminders_client.delete(f"{url}?version=1", headers=ops.editor)
    assert stale_delete.status_code == 409
    assert [row["name"] for row in await schedule_rows(engine, tenant)] == ["First"]


BAD_INPUTS: list[tuple[str, dict[str, Any]]] = [
    ("timezone", {"timezone": "Mars/Olympus"}),
    ("timezone", {"timezone": "localtime"}),
    ("localTime", {"localTime": "24:00"}),
    ("localTime", {"localTime": "7:5"}),
    ("localTime", {"localTime": 730}),
    ("weekdays", {"weekdays": []}),
    ("weekdays", {"weekdays": [0]}),
    ("weekdays", {"weekdays": [8]}),
    ("weekdays", {"weekdays": [1, 1]}),
    ("weekdays", {"weekdays": ["1"]}),
    ("weekdays", {"weekdays": [True]}),
    ("audience", {"audience": {"kind": "everyone"}}),
    ("audience", {"audience": {"kind": "segment", "seenWithinDays": 0}}),
    ("audience", {"audience": {"kind": "segment", "seenWithinDays": 366}}),
    ("audience", {"audience": {"kind": "segment", "statuses": ["deleted"]}}),
    ("audience", {"audience": {"kind": "segment", "language": ["en"]}}),
    ("audience", {"audience": {"kind": "users", "userIds": [f"u{n}" for n in range(501)]}}),
    ("kind", {"kind": "no.such.kind"}),
    ("kind", {"kind": "auth.otp"}),
    ("variables", {"variables": {"title": "x", "message": "y", "colour": "red"}}),
    ("variables", {"variables": {"title": "x"}}),
    ("channels", {"channels": ["sms"]}),
    ("name", {"name": ""}),
    ("enabled", {"enabled": "yes"}),
    ("color", {"color": "red"}),
]


@pytest.mark.parametrize(("field", "change"), BAD_INPUTS)
async def test_every_bad_field_is_a_400_naming_it_and_nothing_is_stored(
    reminders_client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    field: str,
    change: dict[str, Any],
) -> None:
    """R-REMIND-1, R-REMIND-2, R-REMIND-3, R-REMIND-8, R-REMIND-9, R-REMIND-12: each invalid
    field answers 400 NOTIFICATION_REMINDER_INVALID with the field's name, on create and on
    update, never a 500, and writes nothing (no row, no audit)."""
    ops = await operators(engine, settings, tenant)
    answer = await reminders_client.post(BASE, json=body(**change), headers=ops.editor)
    assert answer.status_code == 400, answer.text
    assert code(answer) == "NOTIFICATION_REMINDER_INVALID"
    assert answer.json()["error"]["message"].startswith(f"{field}:"), answer.text
    assert await schedule_rows(engine, tenant) == []

    created = await create(reminders_client, ops.editor)
    again = await reminders_client.put(
        f"{BASE}/{created['id']}", json=body(**change, version=1), headers=ops.editor
    )
    assert again.status_code == 400 and code(again) == "NOTIFICATION_REMINDER_INVALID"
    assert [row["version"] for row in await schedule_rows(engine, tenant)] == [1]


async def test_malformed_bodies_are_400_too(
    reminders_client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-REMIND-18: a missing field, a body that is not an object, or none at all: 400 naming it."""
    ops = await operators(engine, settings, tenant)
    missing = body()
    del missing["weekdays"]
    answer = await reminders_client.post(BASE, json=missing, headers=ops.editor)
    assert answer.status_code == 400 and answer.json()["error"]["message"].startswith("weekdays:")
    for payload in ([1, 2], "text", None):
        answer = await reminders_client.post(BASE, json=payload, headers=ops.editor)
        assert answer.status_code == 400 and code(answer) == "NOTIFICATION_REMINDER_INVALID"
    no_version = await reminders_client.put(
        f"{BASE}/{(await create(reminders_client, ops.editor))['id']}",
        json=body(),
        headers=ops.editor,
    )
    assert no_version.status_code == 400
    assert no_version.json()["error"]["message"].startswith("version:")


async def test_segment_audience_is_the_seed_closed_rules(
    reminders_client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-REMIND-8, R-REMIND-9, R-REMIND-10, R-REMIND-11, R-REMIND-12: statuses, locales,
    countries and seenWithinDays 1..365 are accepted (normalised as the send path does)."""
    ops = await operators(engine, settings, tenant)
    audience = {
        "kind": "segment",
        "statuses": ["limited", "active"],
        "locales": ["ne", "en"],
        "countries": ["np"],
        "seenWithinDays": 365,
    }
    created = await create(reminders_client, ops.editor, audience=audience)
    assert created["audience"] == {
        "kind": "segment",
        "statuses": ["active", "limited"],
        "locales": ["en", "ne"],
        "countries": ["NP"],
        "seenWithinDays": 365,
    }


async def test_permissions_are_checked_and_hidden_as_404(
    reminders_client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-SEC-7, R-SEC-16: without NotificationReminder_* an id route answers 404 (never 403), a
    list is empty, a reader cannot write; an API key with `admin` acts as superadmin; another
    tenant's id is 404."""
    ops = await operators(engine, settings, tenant)
    created = await create(reminders_client, ops.admin_key)
    url = f"{BASE}/{created['id']}"
    assert (await reminders_client.get(url, headers=ops.clerk)).status_code == 404
    assert (await reminders_client.get(BASE, headers=ops.clerk)).json()["items"] == []
    assert (await reminders_client.post(BASE, json=body(), headers=ops.reader)).status_code == 404
    put = await reminders_client.put(url, json=body(version=1), headers=ops.reader)
    assert put.status_code == 404 and code(put) == "NOTIFICATION_REMINDER_NOT_FOUND"
    assert (await reminders_client.delete(url, headers=ops.reader)).status_code == 404
    assert (await reminders_client.get(f"{url}/runs", headers=ops.clerk)).status_code == 404
    assert (await reminders_client.get(url, headers=ops.reader)).status_code == 200
    others = await operators(engine, settings, f"{tenant}-other")
    assert (await reminders_client.get(url, headers=others.admin_key)).status_code == 404
    assert (await reminders_client.get(BASE, headers={})).status_code == 401


async def test_flag_off_answers_404_feature_disabled(
    client: AsyncClient,
    reminders_client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
) -> None:
    """R-REMIND-16: with HERALD_FEATURE_REMINDERS off (the default) every reminder route
    answers 404 NOTIFICATION_FEATURE_DISABLED; a stored schedule is kept."""
    assert settings.feature_reminders is False
    ops = await operators(engine, settings, tenant)
    created = await create(reminders_client, ops.editor)
    url = f"{BASE}/{created['id']}"
    for method, path, payload in (
        ("GET", BASE, None),
        ("POST", BASE, body()),
        ("GET", url, None),
        ("PUT", url, body(version=1)),
        ("DELETE", url, None),
        ("GET", f"{url}/occurrences", None),
        ("GET", f"{url}/runs", None),
    ):
        answer = await client.request(method, path, json=payload, headers=ops.editor)
        assert answer.status_code == 404, (method, path)
        assert code(answer) == "NOTIFICATION_FEATURE_DISABLED"
    assert len(await schedule_rows(engine, tenant)) == 1


async def test_occurrence_preview_is_pure_and_follows_the_clock_rules(
    reminders_client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-REMIND-4: the preview for London 01:30 across both 2027 changes: 01:30 UTC (02:30
    BST) on 28 March, 00:30 UTC once on 31 October; it writes nothing."""
    ops = await operators(engine, settings, tenant)
    created = await create(
        reminders_client,
        ops.editor,
        timezone="Europe/London",
        localTime="01:30",
        weekdays=[7],
    )
    url = f"{BASE}/{created['id']}/occurrences"
    spring = await reminders_client.get(
        url, params={"after": "2027-03-20T12:00:00Z", "count": "2"}, headers=ops.reader
    )
    assert spring.status_code == 200, spring.text
    assert spring.json()["items"] == [
        {"at": "2027-03-21T01:30:00Z", "localAt": "2027-03-21T01:30:00+00:00"},
        {"at": "2027-03-28T01:30:00Z", "localAt": "2027-03-28T02:30:00+01:00"},
    ]
    autumn = await reminders_client.get(
        url, params={"after": "2027-10-30T00:00:00+00:00", "count": "2"}, headers=ops.reader
    )
    assert [item["at"] for item in autumn.json()["items"]] == [
        "2027-10-31T00:30:00Z",
        "2027-11-07T01:30:00Z",
    ]
    # The count's range is in the published schema (a 422 REQUEST_MALFORMED like any query
    # parameter outside its schema); an instant without its offset is the reminder's own rule.
    for params, status, expected in (
        ({"count": "0"}, 422, "REQUEST_MALFORMED"),
        ({"count": "51"}, 422, "REQUEST_MALFORMED"),
        ({"after": "2027-01-01T00:00:00"}, 400, "NOTIFICATION_REMINDER_INVALID"),
        ({"after": "yesterday"}, 400, "NOTIFICATION_REMINDER_INVALID"),
    ):
        bad = await reminders_client.get(url, params=params, headers=ops.reader)
        assert (bad.status_code, code(bad)) == (status, expected), (params, bad.text)
    assert [row["version"] for row in await schedule_rows(engine, tenant)] == [1]


async def test_list_pages_with_a_cursor(
    reminders_client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-ADMIN-9, R-ADMIN-10: lists are paged by an opaque cursor; a foreign cursor is a 400."""
    ops = await operators(engine, settings, tenant)
    ids = [(await create(reminders_client, ops.editor, name=f"r{n}"))["id"] for n in range(3)]
    first = (await reminders_client.get(BASE, params={"limit": "2"}, headers=ops.reader)).json()
    second = (
        await reminders_client.get(
            BASE, params={"limit": "2", "cursor": first["nextCursor"]}, headers=ops.reader
        )
    ).json()
    assert [i["id"] for i in first["items"] + second["items"]] == ids
    assert second["nextCursor"] is None
    bad = await reminders_client.get(BASE, params={"cursor": "bm9wZQ"}, headers=ops.reader)
    assert bad.status_code == 400
