"""The broadcast draft's audience picker in the console (the ASGI app, real PostgreSQL): the live
count's endpoint (POST /console/broadcasts/audience-reach) counts what the picker names with the
fan-out's resolution, refuses a bad spec exactly as the draft would, follows the console's 404
rules, stores nothing; the no-script Preview re-renders the form with the count.

The browser (the debounced count updating as a group is picked) is in
tests/e2e/test_console_browser.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from httpx import ASGITransport, AsyncClient, Response
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from herald import vocabulary
from herald.api.app import create_app
from herald.auth import service as auth
from herald.config import Settings
from herald.db import schema as s
from herald.db import tenancy
from herald.scheduling.broadcasts import service as broadcasts
from tests import seed
from tests.integration.test_console import operator_token, sign_in
from tests.integration.test_fanout import school

REACH = "/console/broadcasts/audience-reach"
JSON = {"Accept": "application/json"}
Form = dict[str, str | list[str]]


@pytest.fixture
async def on(settings: Settings, engine: AsyncEngine, registry: Any) -> AsyncIterator[AsyncClient]:
    app = create_app(settings.model_copy(update={"feature_broadcasts": True}), engine, registry)
    async with AsyncClient(transport=ASGITransport(app=app), base_url="http://herald.test") as c:
        yield c


async def _directory(engine: AsyncEngine, tenant: str) -> None:
    """class-7a: three pupils (s0..s2) with a guardian each (g0..g2, g0's locale Nepali) and a
    teacher (t0, a member but not a student); class-7b: one pupil (s9) and her guardian (g9)."""
    await school(engine, tenant, students=3)
    async with engine.begin() as conn:
        [guardian_role] = (
            await conn.execute(
                select(s.role.c.id).where(s.role.c.tenant_id == tenant, s.role.c.code == "guardian")
            )
        ).scalars()
        [student_role] = (
            await conn.execute(
                select(s.role.c.id).where(s.role.c.tenant_id == tenant, s.role.c.code == "student")
            )
        ).scalars()
        other = await seed.group(conn, tenant, "class-7b")
        pupil = await seed.person(conn, tenant, "s9", roles=[student_role])
        parent = await seed.person(conn, tenant, "g9", roles=[guardian_role])
        await seed.member(conn, tenant, other, pupil.id)
        await seed.guardian(conn, tenant, pupil.id, parent.id)


async def _stored(engine: AsyncEngine, tenant: str) -> tuple[int, int]:
    async with engine.connect() as conn:
        drafts = (
            await conn.execute(
                select(func.count())
                .select_from(s.broadcast)
                .where(s.broadcast.c.tenant_id == tenant)
            )
        ).scalar_one()
        audits = (
            await conn.execute(
                select(func.count())
                .select_from(s.audit_record)
                .where(s.audit_record.c.tenant_id == tenant)
            )
        ).scalar_one()
    return int(drafts), int(audits)


async def _reach(client: AsyncClient, csrf: str, form: Form) -> Response:
    return await client.post(REACH, data={"csrf": csrf, **form}, headers=JSON)


async def _signed_in(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    permissions: Sequence[str],
) -> str:
    return await sign_in(client, await operator_token(engine, settings, tenant, permissions))


async def test_the_reach_counts_roles_groups_guardians_and_unions(
    on: AsyncClient, engine: AsyncEngine, settings: Settings, registry: Any, tenant: str
) -> None:
    """R-BCAST-16 before the draft is saved: each picker kind counts the people the fan-out
    would reach (students of a group, not its teacher; guardians; the union without doubles),
    the same count the saved draft's audience preview gives, and nothing is stored."""
    await _directory(engine, tenant)
    # Another tenant with a class of the same id: never counted, never listed.
    elsewhere = f"{tenant}-x"
    await school(engine, elsewhere, students=5)
    csrf = await _signed_in(on, engine, settings, tenant, vocabulary.BROADCAST_PERMISSIONS)
    before = await _stored(engine, tenant)

    cases: list[tuple[Form, int, dict[str, Any]]] = [
        (
            {"audienceKind": "group", "audienceGroups": "class-7a"},
            3,
            {"kind": "group", "groupIds": ["class-7a"]},
        ),
        (
            {
                "audienceKind": "guardians_of_group",
                "audienceGuardianGroups": ["class-7b", "class-7a"],
            },
            4,
            {"kind": "guardians_of_group", "groupIds": ["class-7a", "class-7b"]},
        ),
        (
            {"audienceKind": "role", "audienceRoles": "guardian"},
            4,
            {"kind": "role", "roles": ["guardian"]},
        ),
        (
            {"audienceKind": "users", "audiencePeople": "s0, g9\nnobody-here"},
            2,
            {"kind": "users", "userIds": ["g9", "nobody-here", "s0"]},
        ),
        (
            # The teacher, 7B's pupil, 7A's guardians, and s0 and s9 by name (s9 once).
            {
                "audienceKind": "compound",
                "audienceRoles": "teacher",
                "audienceGroups": "class-7b",
                "audienceGuardianGroups": "class-7a",
                "audiencePeople": "s0 s9",
                # Lists of the other kinds are ignored by a single kind, used by the union.
                "audience": "not read",
            },
            6,
            {
                "kind": "compound",
                "any": [
                    {"kind": "role", "roles": ["teacher"]},
                    {"kind": "group", "groupIds": ["class-7b"]},
                    {"kind": "guardians_of_group", "groupIds": ["class-7a"]},
                    {"kind": "users", "userIds": ["s0", "s9"]},
                ],
            },
        ),
        (
            {"audienceKind": "json", "audience": '{"kind": "segment", "locales": ["ne"]}'},
            1,
            {"kind": "segment", "locales": ["ne"]},
        ),
        (
            {"audienceKind": "group", "audienceGroups": "class-7a", "audienceRoles": "guardian"},
            3,
            {"kind": "group", "groupIds": ["class-7a"]},
        ),
    ]
    for form, count, spec in cases:
        answer = await _reach(on, csrf, form)
        assert answer.status_code == 200, (form, answer.text)
        body = answer.json()
        assert (body["count"], body["audience"]) == (count, spec), form
        assert len(body["sample"]) == count
    assert await _stored(engine, tenant) == before

    # The same count as a saved draft's audience preview (the fan-out's resolution).
    author = auth.Operator(
        tenant_id=tenant,
        actor_kind="api_key",
        actor_id="test",
        person_id=None,
        permissions=frozenset(vocabulary.BROADCAST_PERMISSIONS),
        superadmin=False,
    )
    async with engine.begin() as conn:
        await tenancy.enter_tenant(conn, tenant)
        draft = await broadcasts.create_broadcast(
            conn,
            author,
            registry,
            {
                "title": "Union",
                "kind": "announcement.posted",
                "audience": cases[4][2],
                "variables": {"title": "t", "message": "m"},
            },
        )
        preview = await broadcasts.audience_preview(conn, author, str(draft.id))
    assert preview.count == 6

    page = await on.get("/console/broadcasts/new")
    assert page.status_code == 200
    assert 'value="class-7b"' in page.text and 'value="teacher"' in page.text
    assert page.text.count('value="class-7a"') == 2  # its students, its guardians: one tenant's


async def test_a_bad_spec_is_refused_as_the_draft_refuses_it(
    on: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """Each bad audience answers 400 NOTIFICATION_BROADCAST_INVALID with the message saving the
    draft would show; the no-script Preview shows the count, or the code and message, and the
    form comes back filled; nothing is stored by any of it."""
    await _directory(engine, tenant)
    csrf = await _signed_in(on, engine, settings, tenant, vocabulary.BROADCAST_PERMISSIONS)
    before = await _stored(engine, tenant)
    bad: list[Form] = [
        {"audienceKind": "json", "audience": "{not json"},
        {"audienceKind": "json", "audience": '{"kind": "everyone"}'},
        {"audienceKind": "json", "audience": '["all_users"]'},
        {"audienceKind": "json", "audience": ""},
        {"audienceKind": "compound"},  # nothing chosen: a union of nobody
        {"audienceKind": "users", "audiencePeople": " ".join(f"p{i}" for i in range(501))},
        {"audienceKind": "segments"},
    ]
    draft = {
        "title": "Refused",
        "kind": "announcement.posted",
        "variables": '{"title": "t", "message": "m"}',
    }
    for form in bad:
        answer = await _reach(on, csrf, form)
        assert answer.status_code == 400, (form, answer.text)
        error = answer.json()["error"]
        assert error["code"] == "NOTIFICATION_BROADCAST_INVALID", error
        assert error["message"].startswith("audience: "), error
        saved = await on.post("/console/broadcasts", data={"csrf": csrf, **draft, **form})
        assert saved.status_code == 400, form
        assert error["message"].replace('"', "&#34;").replace("'", "&#39;") in saved.text
        shown = await on.post(
            "/console/broadcasts", data={"csrf": csrf, **draft, **form, "intent": "preview"}
        )
        assert shown.status_code == 400
        assert "NOTIFICATION_BROADCAST_INVALID: audience: " in shown.text

    preview = await on.post(
        "/console/broadcasts",
        data={
            "csrf": csrf,
            **draft,
            "channels": ["in_app", "sms"],
            "audienceKind": "guardians_of_group",
            "audienceGuardianGroups": "class-7b",
            "intent": "preview",
        },
    )
    assert preview.status_code == 200, preview.text
    assert "This reaches 1 person." in preview.text
    assert 'value="Refused"' in preview.text
    assert 'value="in_app" checked' in preview.text and 'value="sms" checked' in preview.text
    assert 'value="email" checked' not in preview.text
    assert '<option value="guardians_of_group" selected>' in preview.text
    assert await _stored(engine, tenant) == before

    # The same form saved: the draft holds what the picker named.
    saved = await on.post(
        "/console/broadcasts",
        data={
            "csrf": csrf,
            **draft,
            "audienceKind": "guardians_of_group",
            "audienceGuardianGroups": "class-7b",
            "intent": "save",
        },
    )
    assert saved.status_code == 303, saved.text
    async with engine.connect() as conn:
        [stored] = (
            await conn.execute(
                select(s.broadcast.c.audience).where(s.broadcast.c.tenant_id == tenant)
            )
        ).scalars()
    assert stored == {"kind": "guardians_of_group", "groupIds": ["class-7b"]}


async def test_the_reach_follows_the_consoles_permission_rules(
    on: AsyncClient,
    settings: Settings,
    engine: AsyncEngine,
    registry: Any,
    tenant: str,
) -> None:
    """Without NotificationBroadcast_CREATE (reading only) the picker and its count are 404, as
    the draft form is; with the feature off, 404; without the form's CSRF token, 403; without a
    session, the sign-in page."""
    await _directory(engine, tenant)
    form: Form = {"audienceKind": "group", "audienceGroups": "class-7a"}
    reader = await _signed_in(on, engine, settings, tenant, ["NotificationBroadcast_READ"])
    refused = await _reach(on, reader, form)
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "NOTIFICATION_BROADCAST_NOT_FOUND"
    assert (await on.get("/console/broadcasts/new")).status_code == 404
    previewed = await on.post(
        "/console/broadcasts", data={"csrf": reader, **form, "intent": "preview"}
    )
    assert previewed.status_code == 404

    author = await _signed_in(on, engine, settings, tenant, vocabulary.BROADCAST_PERMISSIONS)
    assert (await _reach(on, author, form)).status_code == 200
    no_csrf = await on.post(REACH, data=form, headers=JSON)
    assert no_csrf.status_code == 403

    off = create_app(settings.model_copy(update={"feature_broadcasts": False}), engine, registry)
    async with AsyncClient(transport=ASGITransport(app=off), base_url="http://herald.test") as c:
        csrf = await sign_in(
            c, await operator_token(engine, settings, tenant, vocabulary.BROADCAST_PERMISSIONS)
        )
        assert (await _reach(c, csrf, form)).status_code == 404
    async with AsyncClient(transport=ASGITransport(app=off), base_url="http://herald.test") as c:
        anonymous = await c.post(REACH, data=form, headers=JSON)
        assert anonymous.status_code == 303
        assert anonymous.headers["location"] == "/console/sign-in"
