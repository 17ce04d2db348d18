"""The console's provider-accounts screen (issue 46 item 4): the tenant's accounts with their
secrets shown only as set, a form to set and clear them, and the permission rules."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from cryptography.fernet import Fernet
from httpx import ASGITransport, AsyncClient
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.api.app import create_app
from herald.config import Settings
from herald.db import schema as s
from herald.kinds import Registry
from tests.integration.test_admin_history import HISTORY_READ
from tests.integration.test_console import assert_secure_page, operator_token, sign_in

READ, WRITE = "NotificationProvider_READ", "NotificationProvider_WRITE"


@pytest.fixture
async def console_client(
    settings: Settings, engine: AsyncEngine, registry: Registry
) -> AsyncIterator[AsyncClient]:
    configured = settings.model_copy(
        update={"vault_key": Fernet.generate_key().decode(), "webhook_allow_loopback": True}
    )
    app = create_app(configured, engine, registry)
    async with AsyncClient(transport=ASGITransport(app=app), base_url="http://herald.test") as c:
        yield c


async def stored(engine: AsyncEngine, tenant: str) -> list[tuple[str, dict[str, object], bool]]:
    a = s.notification_provider_account
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(a.c.provider, a.c.settings, a.c.secret_ciphertext)
            .where(a.c.tenant_id == tenant)
            .order_by(a.c.provider)
        )
        return [(r.provider, dict(r.settings), r.secret_ciphertext is not None) for r in rows]


async def test_set_mask_and_clear_an_account_from_the_console(
    console_client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """An operator with both permissions sets the SMTP account (the password never shown back,
    only "set"), keeps the password when saving with it empty, sees a refusal in place with
    nothing stored, and clears the account."""
    token = await operator_token(engine, settings, tenant, [HISTORY_READ, READ, WRITE])
    csrf = await sign_in(console_client, token)
    page = await console_client.get("/console/providers")
    assert page.status_code == 200, page.text
    assert_secure_page(page)
    assert 'href="/console/providers"' in page.text
    assert "Save smtp" in page.text and "· deployment's settings" in page.text

    password = f"pw-{uuid.uuid4().hex}"
    saved = await console_client.post(
        "/console/providers/smtp",
        data={
            "csrf": csrf,
            "host": "127.0.0.1",
            "port": "2525",
            "username": "school",
            "password": password,
            "from": "School <office@school.example>",
            "starttls": "false",
        },
    )
    assert saved.status_code == 303, saved.text
    shown = await console_client.get("/console/providers")
    assert password not in shown.text
    assert "set ••••" in shown.text and "overridden, version 1" in shown.text
    assert 'value="2525"' in shown.text
    assert await stored(engine, tenant) == [
        (
            "smtp",
            {
                "host": "127.0.0.1",
                "port": 2525,
                "username": "school",
                "from_address": "School <office@school.example>",
                "starttls": False,
            },
            True,
        )
    ]

    # Saved again with the password left empty: kept.
    again = await console_client.post(
        "/console/providers/smtp",
        data={"csrf": csrf, "host": "127.0.0.1", "port": "2526", "starttls": "false"},
    )
    assert again.status_code == 303
    assert (await stored(engine, tenant))[0][2] is True

    refused = await console_client.post(
        "/console/providers/smtp", data={"csrf": csrf, "host": "not a host", "password": password}
    )
    assert refused.status_code == 422
    assert "must be a host name" in refused.text and password not in refused.text
    assert (await stored(engine, tenant))[0][1]["port"] == 2526

    without_csrf = await console_client.post("/console/providers/smtp/clear", data={})
    assert without_csrf.status_code == 403
    cleared = await console_client.post("/console/providers/smtp/clear", data={"csrf": csrf})
    assert cleared.status_code == 303
    assert await stored(engine, tenant) == []


async def test_readers_see_no_forms_and_others_no_screen(
    console_client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """READ alone shows the accounts without forms (a post is 404); without READ the screen and
    its link are absent (404)."""
    writer = await operator_token(engine, settings, tenant, [HISTORY_READ, READ, WRITE])
    csrf = await sign_in(console_client, writer)
    await console_client.post(
        "/console/providers/slack", data={"csrf": csrf, "botToken": "xoxb-1234567890-abcdef"}
    )
    console_client.cookies.clear()

    reader = await operator_token(engine, settings, tenant, [HISTORY_READ, READ])
    csrf = await sign_in(console_client, reader)
    page = await console_client.get("/console/providers")
    assert page.status_code == 200
    assert "Save slack" not in page.text and "set ••••" in page.text
    assert "xoxb-1234567890-abcdef" not in page.text
    post = await console_client.post(
        "/console/providers/slack", data={"csrf": csrf, "botToken": "xoxb-9999999999-zzzzzz"}
    )
    assert post.status_code == 404
    console_client.cookies.clear()

    clerk = await operator_token(engine, settings, tenant, [HISTORY_READ])
    await sign_in(console_client, clerk)
    history = await console_client.get("/console/history")
    assert 'href="/console/providers"' not in history.text
    assert (await console_client.get("/console/providers")).status_code == 404
