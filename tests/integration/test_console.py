"""The operator console over HTTP (the ASGI app, real PostgreSQL): sign-in and its session,
CSRF, the security headers, and each screen with the operator's own permissions.

The browser-level checks (htmx, the live preview, the replay's result appearing) are in
tests/e2e/test_console_browser.py.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.fernet import Fernet
from httpx import AsyncClient, Response
from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald import vocabulary
from herald.channels.base import ProviderOutcome
from herald.config import Settings
from herald.console import sessions
from herald.db import schema as s
from herald.directory import service as directory
from herald.feed import service as feed
from herald.maintenance import retention
from herald.secrets.vault import TableVault
from tests import seed
from tests.integration.test_admin_history import (
    FAILURE_READ,
    FAILURE_UPDATE,
    HISTORY_READ,
    fanned_out_event,
    operator_headers,
)
from tests.integration.test_delivery import ScriptedProvider, deliver, email_delivery
from tests.integration.test_fanout import school

TEMPLATE_PERMISSIONS = (
    "NotificationTemplate_READ",
    "NotificationTemplate_CREATE",
    "NotificationTemplate_UPDATE",
)
CSRF_FIELD = re.compile(r'name="csrf" value="([^"]+)"')


async def operator_token(
    engine: AsyncEngine, settings: Settings, tenant: str, permissions: Sequence[str], **kw: Any
) -> str:
    headers = await operator_headers(engine, settings, tenant, permissions, **kw)
    return headers["Authorization"].removeprefix("Bearer ")


async def sign_in(client: AsyncClient, token: str) -> str:
    """Sign in through the form as a browser does; returns the session's CSRF token."""
    page = await client.get("/console/sign-in")
    assert page.status_code == 200
    [csrf] = CSRF_FIELD.findall(page.text)
    answer = await client.post("/console/session", data={"csrf": csrf, "token": token})
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/console/history"
    history = await client.get("/console/history")
    assert history.status_code == 200, history.text
    [session_csrf] = set(CSRF_FIELD.findall(history.text))
    return session_csrf


def assert_secure_page(answer: Response) -> None:
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self';" in policy and "unsafe-inline" not in policy
    assert "unsafe-eval" not in policy
    assert "<script>" not in answer.text and " on" + "click=" not in answer.text
    assert answer.headers["x-frame-options"] == "DENY"


async def test_sign_in_cookie_csrf_and_sign_out(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """The JWT becomes a session: an HttpOnly, SameSite=Strict cookie whose token is stored only
    as its hash; every page carries the CSP; a form without the CSRF token is refused; sign-out
    deletes the session, so the old cookie signs nobody in."""
    token = await operator_token(engine, settings, tenant, [HISTORY_READ])
    page = await client.get("/console/sign-in")
    [csrf] = CSRF_FIELD.findall(page.text)
    answer = await client.post("/console/session", data={"csrf": csrf, "token": token})
    assert answer.status_code == 303
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{sessions.SESSION_COOKIE}=")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
    session_token = client.cookies.get(sessions.SESSION_COOKIE)
    assert session_token
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(s.console_session.c.token_hash).where(
                    s.console_session.c.tenant_id == tenant
                )
            )
        ).all()
    assert [row.token_hash for row in rows] == [sessions.token_hash(session_token)]

    history = await client.get("/console/history")
    assert history.status_code == 200
    assert_secure_page(history)
    session_csrf = sessions.csrf_for(session_token)
    assert session_csrf in history.text

    refused = await client.post("/console/sign-out", data={})
    assert refused.status_code == 403
    refused = await client.post("/console/sign-out", data={"csrf": "0" * 64})
    assert refused.status_code == 403
    assert (await client.get("/console/history")).status_code == 200

    out = await client.post("/console/sign-out", data={"csrf": session_csrf})
    assert out.status_code == 303 and out.headers["location"] == "/console/sign-in"
    client.cookies.set(sessions.SESSION_COOKIE, session_token, path="/console")
    again = await client.get("/console/history")
    assert again.status_code == 303 and again.headers["location"] == "/console/sign-in"
    async with engine.connect() as conn:
        left = await conn.execute(
            select(func.count()).where(s.console_session.c.tenant_id == tenant)
        )
        assert left.scalar_one() == 0


async def test_sign_in_refusals(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """Sign-in without the form's double-submit token is refused (login CSRF); a bad or expired
    token and an API key are refused with a page, and no session is made; a Bearer header
    (which no foreign page can send) works without the form token."""
    token = await operator_token(engine, settings, tenant, [HISTORY_READ])
    assert (await client.post("/console/session", data={"token": token})).status_code == 403
    page = await client.get("/console/sign-in")
    [csrf] = CSRF_FIELD.findall(page.text)
    bad = await client.post("/console/session", data={"csrf": csrf, "token": "not-a-jwt"})
    assert bad.status_code == 401 and "not valid" in bad.text
    key = await client.post("/console/session", data={"csrf": csrf, "token": "hk_abc"})
    assert key.status_code == 401
    assert client.cookies.get(sessions.SESSION_COOKIE) is None
    assert (await client.get("/console/history")).status_code == 303

    bearer = await client.post("/console/session", headers={"Authorization": f"Bearer {token}"})
    assert bearer.status_code == 303
    assert (await client.get("/console/history")).status_code == 200
    # Signing in again replaces the browser's session instead of leaving the old one alive.
    first = client.cookies[sessions.SESSION_COOKIE]
    again = await client.post("/console/session", headers={"Authorization": f"Bearer {token}"})
    assert again.status_code == 303 and client.cookies[sessions.SESSION_COOKIE] != first
    async with engine.connect() as conn:
        hashes = (
            await conn.execute(
                select(s.console_session.c.token_hash).where(
                    s.console_session.c.tenant_id == tenant
                )
            )
        ).scalars()
        assert list(hashes) == [sessions.token_hash(client.cookies[sessions.SESSION_COOKIE])]


async def test_history_and_trace_drill_down(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """History lists the event with its counts by status; the event page links each delivery to
    the trace; the trace page reads the preference reason. No name, address or content appears
    in any of the pages."""
    await school(engine, tenant, students=2)
    async with engine.connect() as conn:
        person_id = (
            await conn.execute(
                select(s.person.c.id).where(
                    s.person.c.tenant_id == tenant, s.person.c.external_id == "g0"
                )
            )
        ).scalar_one()
    async with engine.begin() as conn:
        await conn.execute(
            insert(s.notification_preference).values(
                tenant_id=tenant,
                person_id=person_id,
                category="announcement",
                channel="email",
                enabled=False,
            )
        )
    event_id = await fanned_out_event(
        engine, tenant, variables={"title": "Secret title words", "message": "Body words here"}
    )
    await sign_in(client, await operator_token(engine, settings, tenant, [HISTORY_READ]))

    history = await client.get("/console/history")
    assert f"/console/events/{event_id}" in history.text
    assert "skipped_preference" in history.text
    event_page = await client.get(f"/console/events/{event_id}?status=skipped_preference")
    assert event_page.status_code == 200
    # History's own reason (it reads no person, so not which rule).
    assert "Switched off by their preferences for email." in event_page.text
    [delivery] = re.findall(r'href="/console/deliveries/([0-9a-f-]+)"', event_page.text)
    why = await client.get(f"/console/deliveries/{delivery}")
    assert why.status_code == 303
    assert why.headers["location"].endswith(f"/console/events/{event_id}/people/g0")
    trace = await client.get(why.headers["location"])
    assert trace.status_code == 200
    assert "email off for announcement" in trace.text
    assert "as their preferences stand now" in trace.text
    person = await client.get("/console/people", params={"externalId": "g0"})
    assert person.status_code == 200 and "email off for announcement" in person.text
    for page in (history, event_page, trace, person):
        assert_secure_page(page)
        for forbidden in ("Parent 0", "g0@example.com", "Secret title words", "Body words"):
            assert forbidden not in page.text

    missing = await client.get(f"/console/events/{event_id}/people/nobody")
    assert missing.status_code == 404
    assert (await client.get(f"/console/events/{uuid.uuid4()}")).status_code == 404


async def test_dead_letters_absent_without_failure_permission(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """An operator without NotificationFailure_* has no dead-letter link, and its URLs are 404 —
    the list and the replay alike."""
    await sign_in(client, await operator_token(engine, settings, tenant, [HISTORY_READ]))
    history = await client.get("/console/history")
    assert "/console/dead-letters" not in history.text
    assert (await client.get("/console/dead-letters")).status_code == 404
    csrf = sessions.csrf_for(client.cookies[sessions.SESSION_COOKIE])
    replay = await client.post(f"/console/dead-letters/{uuid.uuid4()}/replay", data={"csrf": csrf})
    assert replay.status_code == 404


async def test_replay_from_the_console(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str, tmp_path: Any
) -> None:
    """A delivery dies in the real pipeline; the operator replays it from the console (htmx) and
    gets the new delivery's state in the answer; without the CSRF token the replay is refused."""
    vault = TableVault(engine, Fernet.generate_key())
    delivery_settings = settings.model_copy(update={"max_attempts": 3, "data_dir": tmp_path})
    await email_delivery(engine, tenant)
    refusing = ScriptedProvider("email", ProviderOutcome.failure("EMAIL_REJECTED", retryable=False))
    await deliver(engine, refusing, vault, delivery_settings, tenant)()
    await sign_in(
        client,
        await operator_token(
            engine, settings, tenant, [FAILURE_READ, FAILURE_UPDATE, HISTORY_READ]
        ),
    )
    listed = await client.get("/console/dead-letters")
    assert listed.status_code == 200 and "EMAIL_REJECTED" in listed.text
    [letter] = re.findall(r'action="/console/dead-letters/([0-9a-f-]+)/replay"', listed.text)

    refused = await client.post(f"/console/dead-letters/{letter}/replay", data={})
    assert refused.status_code == 403
    csrf = sessions.csrf_for(client.cookies[sessions.SESSION_COOKIE])
    replayed = await client.post(
        f"/console/dead-letters/{letter}/replay",
        headers={"HX-Request": "true", "X-CSRF-Token": csrf},
    )
    assert replayed.status_code == 200, replayed.text
    [new_id] = re.findall(r"/console/deliveries/([0-9a-f-]+)/status", replayed.text)
    status = await client.get(f"/console/deliveries/{new_id}/status")
    assert 'data-status="queued"' in status.text
    # Still in flight: the fragment polls itself until the delivery settles.
    assert 'hx-trigger="every 2s"' in status.text
    after = await client.get("/console/dead-letters")
    assert "Replayed" in after.text and f"/console/deliveries/{new_id}/status" in after.text


async def test_template_override_edit_preview_publish(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """Create an override from the registry wording, preview an edit live (nothing written),
    save, publish, archive; the version history shows each version's changed fields."""
    await sign_in(client, await operator_token(engine, settings, tenant, TEMPLATE_PERMISSIONS))
    csrf = sessions.csrf_for(client.cookies[sessions.SESSION_COOKIE])
    listing = await client.get("/console/templates")
    assert listing.status_code == 200 and "announcement.posted" in listing.text
    new = await client.get(
        "/console/templates/new",
        params={"kind": "announcement.posted", "channel": "email", "locale": "en"},
    )
    assert new.status_code == 200 and "Registry wording" in new.text
    form = {
        "csrf": csrf,
        "kind": "announcement.posted",
        "channel": "email",
        "locale": "en",
        "title": "{{title}} (school)",
        "body": "Hello {{name}}: {{message}}",
    }
    preview = await client.post("/console/templates/preview", data=form)
    assert preview.status_code == 200 and "(school)" in preview.text
    broken = await client.post("/console/templates/preview", data={**form, "body": "{{nope}}"})
    assert 'role="alert"' in broken.text
    assert (
        await client.post("/console/templates/preview", data={**form, "csrf": ""})
    ).status_code == 403

    created = await client.post("/console/templates", data=form)
    assert created.status_code == 303
    location = created.headers["location"]
    page = await client.get(location)
    assert "draft" in page.text
    saved = await client.post(
        location,
        data={**form, "version": "1", "action": "save", "body": "Hi {{name}}: {{message}}"},
    )
    assert saved.status_code == 303
    published = await client.post(
        location, data={"csrf": csrf, "version": "2", "action": "publish"}
    )
    assert published.status_code == 303
    page = await client.get(location)
    assert 'id="override-status">published' in page.text
    # The history comes from the audit records: publish, the wording's update, the create.
    summaries = re.findall(r"<summary>(\w+) ·", page.text)
    assert summaries == ["publish", "update", "create"]
    assert "-Hello {{name}}: {{message}}" in page.text
    assert "+Hi {{name}}: {{message}}" in page.text
    assert "draft → published" in page.text
    stale = await client.post(location, data={"csrf": csrf, "version": "1", "action": "archive"})
    assert stale.status_code == 409


async def test_feed_badge_and_outcomes(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """The operations feed's unread badge counts what the operator's role may see and clears
    when read; the outcome aggregate counts deliveries per channel and hour; queue depth shows."""
    await school(engine, tenant, students=2)
    await fanned_out_event(engine, tenant)
    async with engine.begin() as conn:
        await feed.publish(
            conn,
            tenant_id=tenant,
            kind="ops.notice",
            title="Backup done",
            permission_code=HISTORY_READ,
        )
        await feed.publish(
            conn,
            tenant_id=tenant,
            kind="ops.notice",
            title="Hidden from clerks",
            permission_code="Superadmin_ONLY",
        )
    await sign_in(client, await operator_token(engine, settings, tenant, [HISTORY_READ]))
    badge = await client.get("/console/feed/badge")
    assert '<span class="badge" aria-label="1 unread">1</span>' in badge.text
    page = await client.get("/console/feed")
    assert "Backup done" in page.text and "Hidden from clerks" not in page.text
    csrf = sessions.csrf_for(client.cookies[sessions.SESSION_COOKIE])
    assert (await client.post("/console/feed/read-all", data={"csrf": csrf})).status_code == 303
    assert "badge" not in (await client.get("/console/feed/badge")).text

    data = (await client.get("/console/outcomes/data")).json()
    assert len(data["hours"]) == 24
    by_channel = {c["channel"]: c["counts"] for c in data["channels"]}
    assert sum(by_channel["in_app"]["delivered"]) == 2
    assert sum(by_channel["email"]["in_flight"]) == 2
    outcomes = await client.get("/console/outcomes")
    assert outcomes.status_code == 200 and "Queue depth" in outcomes.text
    assert (await client.get("/console/outcomes/data", params={"hours": 0})).status_code == 400


async def test_sessions_expire_are_pruned_and_erased_with_the_person(
    engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """Retention deletes expired sessions and keeps live ones; erasing the person deletes theirs;
    an expired session is not found."""
    await operator_token(engine, settings, tenant, [HISTORY_READ], code="clerk")
    async with engine.begin() as conn:
        person_id = (
            await conn.execute(
                select(s.person.c.id).where(
                    s.person.c.tenant_id == tenant, s.person.c.external_id == "op-clerk"
                )
            )
        ).scalar_one()
        now = datetime.now(UTC)
        live = await sessions.start(
            conn,
            tenant_id=tenant,
            person_id=person_id,
            role_code="clerk",
            expires_at=now + timedelta(hours=1),
        )
        old = await sessions.start(
            conn,
            tenant_id=tenant,
            person_id=person_id,
            role_code="clerk",
            expires_at=now + timedelta(hours=1),
        )
        await conn.execute(
            update(s.console_session)
            .where(s.console_session.c.token_hash == sessions.token_hash(old))
            .values(created_at=now - timedelta(hours=3), expires_at=now - timedelta(hours=1))
        )
        assert await sessions.find(conn, old) is None
        assert await sessions.find(conn, live) is not None
    report = await retention.prune_console_sessions(engine, settings)
    assert report.console_sessions >= 1
    async with engine.begin() as conn:
        hashes = {
            row.token_hash
            for row in await conn.execute(
                select(s.console_session.c.token_hash).where(
                    s.console_session.c.tenant_id == tenant
                )
            )
        }
        assert hashes == {sessions.token_hash(live)}
        await directory.erase_person(conn, tenant, "op-clerk")
        left = await conn.execute(
            select(func.count()).where(s.console_session.c.tenant_id == tenant)
        )
        assert left.scalar_one() == 0


@pytest.mark.parametrize("path", ["/console/history", "/console/people", "/console/feed"])
async def test_pages_need_a_session(client: AsyncClient, path: str) -> None:
    answer = await client.get(path)
    assert answer.status_code == 303 and answer.headers["location"] == "/console/sign-in"
    htmx = await client.get(path, headers={"HX-Request": "true"})
    assert htmx.status_code == 401 and htmx.headers["hx-redirect"] == "/console/sign-in"


async def test_broadcast_draft_approval_by_a_second_person_and_cancel(
    settings: Settings, engine: AsyncEngine, registry: Any, tenant: str
) -> None:
    """The broadcast screens (feature on): one operator drafts, the page refuses them their own
    approval; a second operator approves the version they read; the draft's author cancels it.
    With the feature off the screen is absent and 404."""
    from httpx import ASGITransport

    from herald.api.app import create_app

    on = settings.model_copy(update={"feature_broadcasts": True, "feature_reminders": True})
    permissions = list(vocabulary.BROADCAST_PERMISSIONS)
    author_token = await operator_token(engine, settings, tenant, permissions, code="principal")
    approver_token = await operator_token(engine, settings, tenant, permissions, code="deputy")
    async with engine.begin() as conn:
        await seed.person(conn, tenant, "parent-1")
    app = create_app(on, engine, registry)
    transport = ASGITransport(app=app)
    async with (
        AsyncClient(transport=transport, base_url="http://herald.test") as author,
        AsyncClient(transport=transport, base_url="http://herald.test") as approver,
    ):
        author_csrf = await sign_in(author, author_token)
        assert "/console/broadcasts" in (await author.get("/console/history")).text
        created = await author.post(
            "/console/broadcasts",
            data={
                "csrf": author_csrf,
                "title": "Closed tomorrow",
                "kind": "announcement.posted",
                "audience": '{"kind": "all_users"}',
                "variables": '{"title": "Closed", "message": "The school is closed."}',
                "channels": ["in_app"],
            },
        )
        assert created.status_code == 303, created.text
        location = created.headers["location"]
        page = await author.get(location)
        assert "draft" in page.text and "approved by someone other than its author" in page.text
        assert "/approve" not in page.text
        listing = await author.get("/console/broadcasts")
        assert "Closed tomorrow" in listing.text

        approver_csrf = await sign_in(approver, approver_token)
        approved = await approver.post(
            f"{location}/approve", data={"csrf": approver_csrf, "version": "1"}
        )
        assert approved.status_code == 303
        progress = await approver.get(f"{location}/progress")
        assert "approved" in progress.text and 'hx-trigger="every 3s"' in progress.text
        again = await approver.post(
            f"{location}/approve", data={"csrf": approver_csrf, "version": "1"}
        )
        assert again.status_code == 409

        cancelled = await author.post(f"{location}/cancel", data={"csrf": author_csrf})
        assert cancelled.status_code == 303
        assert 'id="broadcast-state">cancelled' in (await author.get(location)).text
        reminders = await author.get("/console/reminders")
        assert reminders.status_code == 404  # no NotificationReminder_READ

    off = create_app(settings.model_copy(update={"feature_broadcasts": False}), engine, registry)
    async with AsyncClient(transport=ASGITransport(app=off), base_url="http://herald.test") as c:
        await sign_in(c, author_token)
        assert "/console/broadcasts" not in (await c.get("/console/history")).text
        assert (await c.get("/console/broadcasts")).status_code == 404


async def test_reminders_with_their_next_occurrences(
    settings: Settings, engine: AsyncEngine, registry: Any, tenant: str
) -> None:
    from httpx import ASGITransport

    from herald.api.app import create_app
    from tests.integration.reminder_helpers import REMINDER_PERMISSIONS, body

    on = settings.model_copy(update={"feature_reminders": True})
    headers = await operator_headers(engine, settings, tenant, REMINDER_PERMISSIONS)
    app = create_app(on, engine, registry)
    async with AsyncClient(transport=ASGITransport(app=app), base_url="http://herald.test") as c:
        made = await c.post("/v1/admin/reminders", headers=headers, json=body())
        assert made.status_code == 201, made.text
        await sign_in(c, headers["Authorization"].removeprefix("Bearer "))
        page = await c.get("/console/reminders")
        assert page.status_code == 200
        assert "Homework time" in page.text and "07:30 Asia/Kathmandu" in page.text
        assert page.text.count("<time ") == 3
