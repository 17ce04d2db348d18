"""A tenant's own provider accounts (issue 46, item 4): the admin API, and the send path.

Each tenant's email goes through its own SMTP server (aiosmtpd) when it holds an account, and
through the deployment's otherwise; a change reaches the next delivery through the worker's
LISTEN connection, without a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import email
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from httpx import ASGITransport, AsyncClient, Response
from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.api.app import create_app
from herald.auth.service import create_api_key, sign_token
from herald.channels.accounts import NOTIFY_CHANNEL
from herald.channels.smtp import SmtpEmailProvider
from herald.config import Settings
from herald.db import pooler
from herald.db import schema as s
from herald.delivery.accounts import TenantProviders
from herald.delivery.worker import deliver_batch
from herald.kinds import Registry
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.maintenance.service import run_tick
from herald.runtime.worker import _listen
from herald.secrets.vault import Vault
from tests import seed
from tests.integration.test_fanout import run_to_completion, send_event
from tests.integration.test_secrets import tables_containing
from tests.providers.servers import SmtpTestServer, smtp_server

BASE = "/v1/admin/providers"
DEFAULT_FROM = "Herald District <no-reply@district.example>"


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def error_code(response: Response) -> str:
    code: str = response.json()["error"]["code"]
    return code


@pytest.fixture
def default_smtp() -> Iterator[SmtpTestServer]:
    with smtp_server() as server:
        yield server


@pytest.fixture
def accounts_settings(settings: Settings, tmp_path: Path, default_smtp: SmtpTestServer) -> Settings:
    """The deployment: email through its own SMTP server; loopback hosts allowed (the tests'
    servers listen on 127.0.0.1), and a vault key of its own."""
    return settings.model_copy(
        update={
            "smtp_host": default_smtp.host,
            "smtp_port": default_smtp.port,
            "smtp_starttls": False,
            "email_from": DEFAULT_FROM,
            "webhook_allow_loopback": True,
            "data_dir": tmp_path,
            "vault_key": Fernet.generate_key().decode(),
            "provider_connect_timeout_seconds": 1.0,
            "provider_read_timeout_seconds": 2.0,
        }
    )


@pytest.fixture
async def http(
    accounts_settings: Settings, engine: AsyncEngine, registry: Registry
) -> AsyncIterator[AsyncClient]:
    app = create_app(accounts_settings, engine, registry)
    async with AsyncClient(transport=ASGITransport(app=app), base_url="http://herald.test") as c:
        yield c


async def admin_key(engine: AsyncEngine, tenant: str) -> dict[str, str]:
    async with engine.begin() as conn:
        return bearer(await create_api_key(conn, tenant_id=tenant, scopes=["admin"]))


async def parent(engine: AsyncEngine, tenant: str, address: str) -> None:
    async with engine.begin() as conn:
        group_id = await seed.group(conn, tenant, "class-7a")
        pupil = await seed.person(conn, tenant, "s0", full_name="Pupil")
        guardian = await seed.person(conn, tenant, "g0", full_name="Parent", email=address)
        await seed.member(conn, tenant, group_id, pupil.id)
        await seed.guardian(conn, tenant, pupil.id, guardian.id)


async def queue_email(engine: AsyncEngine, tenant: str) -> None:
    # Different words each time: the same announcement twice is one event (its dedupe key).
    variables = {"title": f"Notice {uuid.uuid4().hex[:6]}", "message": "See you on Friday."}
    await send_event(engine, tenant, channels=["email"], variables=variables)
    await run_to_completion(engine, tenant)


async def statuses(engine: AsyncEngine, tenant: str) -> list[str]:
    d = s.notification_delivery
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(d.c.status)
            .where(d.c.tenant_id == tenant, d.c.channel == "email")
            .order_by(d.c.id)
        )
        return [row.status for row in rows]


async def deliver(
    engine: AsyncEngine,
    provider: Any,
    vault: Vault,
    settings: Settings,
    tenant: str,
    accounts: TenantProviders | None,
) -> int:
    return await deliver_batch(
        engine,
        "email",
        provider,
        registry=SAMPLE_REGISTRY,
        vault=vault,
        settings=settings,
        tenant_id=tenant,
        accounts=accounts,
    )


def senders(server: SmtpTestServer) -> list[tuple[str, str]]:
    """(From header, first recipient) of each message the server accepted."""
    found = []
    for message in server.handler.received:
        parsed = email.message_from_bytes(message.content)
        found.append((str(parsed["From"]), message.rcpt_tos[0]))
    return found


@contextlib.asynccontextmanager
async def listening(
    settings: Settings, engine: AsyncEngine, accounts: TenantProviders
) -> AsyncIterator[None]:
    """The worker's LISTEN connection, wired to the cache as `herald worker` wires it."""
    stop = asyncio.Event()
    url = pooler.session_url(settings.database_session_url, engine)
    task = asyncio.create_task(_listen(url, {NOTIFY_CHANNEL: accounts.notified}, stop))
    # _listen wakes every listener once it is connected: from then on a NOTIFY is heard.
    await asyncio.wait_for(accounts.changed.wait(), timeout=30)
    accounts.changed.clear()
    try:
        yield
    finally:
        stop.set()
        await task


async def test_each_tenant_sends_through_its_own_smtp_and_a_change_needs_no_restart(
    http: AsyncClient,
    engine: AsyncEngine,
    accounts_settings: Settings,
    vault: Vault,
    default_smtp: SmtpTestServer,
) -> None:
    """Issue 46 item 4: tenant A's SMTP settings send A's email through A's server (with A's login
    and sender), tenant B's through the deployment's; a change of A's settings (a new server)
    is used by the next delivery, with the same worker objects — the change's NOTIFY marks the
    cache stale, no restart, no wait for the periodic refresh."""
    a, b = f"a-{uuid.uuid4().hex[:10]}", f"b-{uuid.uuid4().hex[:10]}"
    await parent(engine, a, "parent@school-a.example")
    await parent(engine, b, "parent@school-b.example")
    default = SmtpEmailProvider(accounts_settings)
    accounts = TenantProviders(accounts_settings, {"email": default})
    password = f"a-pass-{uuid.uuid4().hex}"
    with (
        smtp_server(credentials=("school-a", password)) as school_a,
        smtp_server() as school_a_new,
    ):
        async with listening(accounts_settings, engine, accounts):
            headers = await admin_key(engine, a)
            put = await http.put(
                f"{BASE}/smtp",
                json={
                    "settings": {
                        "host": school_a.host,
                        "port": school_a.port,
                        "username": "school-a",
                        "password": password,
                        "from": "School A <office@school-a.example>",
                        "starttls": False,
                    }
                },
                headers=headers,
            )
            assert put.status_code == 200, put.text
            assert password not in put.text
            await asyncio.wait_for(accounts.changed.wait(), timeout=30)
            accounts.changed.clear()

            await queue_email(engine, a)
            await queue_email(engine, b)
            assert await deliver(engine, default, vault, accounts_settings, a, accounts) == 1
            assert await deliver(engine, default, vault, accounts_settings, b, accounts) == 1
            assert senders(school_a) == [
                ("School A <office@school-a.example>", "parent@school-a.example")
            ]
            assert school_a.handler.logins == ["school-a"]
            assert senders(default_smtp) == [(DEFAULT_FROM, "parent@school-b.example")]

            # A moves to another server (and drops its login): the next delivery goes there.
            version = put.json()["version"]
            moved = await http.put(
                f"{BASE}/smtp",
                json={
                    "settings": {
                        "host": school_a_new.host,
                        "port": school_a_new.port,
                        "password": None,
                        "from": "School A <office@school-a.example>",
                        "starttls": False,
                    },
                    "version": version,
                },
                headers=headers,
            )
            assert moved.status_code == 200, moved.text
            assert moved.json()["version"] == version + 1
            await asyncio.wait_for(accounts.changed.wait(), timeout=30)

            await queue_email(engine, a)
            assert await deliver(engine, default, vault, accounts_settings, a, accounts) == 1
            assert len(school_a.handler.received) == 1
            assert senders(school_a_new) == [
                ("School A <office@school-a.example>", "parent@school-a.example")
            ]

            # Cleared: A is back on the deployment's server.
            gone = await http.delete(f"{BASE}/smtp", headers=headers)
            assert gone.status_code == 204, gone.text
            await asyncio.wait_for(accounts.changed.wait(), timeout=30)
            await queue_email(engine, a)
            assert await deliver(engine, default, vault, accounts_settings, a, accounts) == 1
            assert senders(default_smtp)[-1] == (DEFAULT_FROM, "parent@school-a.example")
    assert await statuses(engine, a) == ["sent", "sent", "sent"]
    await accounts.aclose()
    await default.aclose()


async def test_the_periodic_refresh_catches_a_change_whose_notice_was_missed(
    http: AsyncClient, engine: AsyncEngine, accounts_settings: Settings, tenant: str
) -> None:
    """Without a LISTEN connection, the versions are re-read once REFRESH_SECONDS pass (here a
    clock the test moves), and only the changed tenant's provider is rebuilt."""
    now = [0.0]
    default = SmtpEmailProvider(accounts_settings)
    accounts = TenantProviders(accounts_settings, {"email": default}, clock=lambda: now[0])
    await accounts.refresh(engine)
    assert accounts.provider_for(tenant, "email") is default
    headers = await admin_key(engine, tenant)
    with smtp_server() as own:
        put = await http.put(
            f"{BASE}/smtp",
            json={"settings": {"host": own.host, "port": own.port, "starttls": False}},
            headers=headers,
        )
        assert put.status_code == 200, put.text
        await accounts.refresh(engine)  # not due yet: still the default
        assert accounts.provider_for(tenant, "email") is default
        now[0] += accounts.refresh_seconds
        await accounts.refresh(engine)
        mine = accounts.provider_for(tenant, "email")
        assert mine is not default and mine.is_configured()
        assert accounts.provider_for(tenant, "email") is mine  # cached
        assert accounts.provider_for(f"other-{tenant}", "email") is default
    await accounts.aclose()
    await default.aclose()


async def test_backfill_redrives_a_channel_only_the_tenants_account_configures(
    http: AsyncClient,
    engine: AsyncEngine,
    accounts_settings: Settings,
    vault: Vault,
) -> None:
    """Issue 46: email unconfigured for the deployment, configured by tenant A's account: A's
    skipped_unconfigured email is re-driven by backfill and delivered through A's server; B's
    stays skipped."""
    unconfigured = accounts_settings.model_copy(update={"smtp_host": None})
    a, b = f"a-{uuid.uuid4().hex[:10]}", f"b-{uuid.uuid4().hex[:10]}"
    for tenant in (a, b):
        await parent(engine, tenant, f"parent@{tenant}.example")
        await queue_email(engine, tenant)
    default = SmtpEmailProvider(unconfigured)
    accounts = TenantProviders(unconfigured, {"email": default}, refresh_seconds=0)
    for tenant in (a, b):
        await deliver(engine, default, vault, unconfigured, tenant, accounts)
        assert await statuses(engine, tenant) == ["skipped_unconfigured"]
    with smtp_server() as school_a:
        put = await http.put(
            f"{BASE}/smtp",
            json={"settings": {"host": school_a.host, "port": school_a.port, "starttls": False}},
            headers=await admin_key(engine, a),
        )
        assert put.status_code == 200, put.text
        await accounts.refresh(engine)
        assert (a, "email") in accounts.configured_pairs()
        assert not [pair for pair in accounts.configured_pairs() if pair[0] == b]
        report = await run_tick(
            engine, unconfigured, backfill_channels=[], backfill_tenants=[(a, "email")]
        )
        assert report.backfilled == 1
        assert await statuses(engine, a) == ["queued"]
        assert await deliver(engine, default, vault, unconfigured, a, accounts) == 1
        assert await statuses(engine, a) == ["sent"]
        assert [to for _, to in senders(school_a)] == [f"parent@{a}.example"]
    assert await statuses(engine, b) == ["skipped_unconfigured"]
    await accounts.aclose()
    await default.aclose()


async def test_secrets_are_write_only_masked_and_encrypted(
    http: AsyncClient, engine: AsyncEngine, tenant: str
) -> None:
    """A secret field is answered only as set (masked), kept when a later PUT leaves it out,
    cleared by null, stored only encrypted, and audited as set or not, never its value."""
    headers = await admin_key(engine, tenant)
    key = f"re_{uuid.uuid4().hex}"
    put = await http.put(
        f"{BASE}/resend",
        json={"settings": {"apiKey": key, "from": "School <office@school.example>"}},
        headers=headers,
    )
    assert put.status_code == 200, put.text
    body = put.json()
    assert body["provider"] == "resend" and body["channel"] == "email"
    assert body["settings"] == {"from": "School <office@school.example>"}
    assert body["secrets"] == {"apiKey": {"set": True, "masked": "••••"}}
    assert body["version"] == 1 and body["updatedBy"].startswith("api_key:")

    kept = await http.put(
        f"{BASE}/resend", json={"settings": {"from": "Other <o@school.example>"}}, headers=headers
    )
    assert kept.json()["secrets"]["apiKey"]["set"] is True and kept.json()["version"] == 2
    listed = await http.get(BASE, headers=headers)
    assert [item["provider"] for item in listed.json()["items"]] == ["resend"]
    one = await http.get(f"{BASE}/resend", headers=headers)
    assert one.json()["secrets"]["apiKey"]["set"] is True
    for answer in (put, kept, listed, one):
        assert key not in answer.text

    assert await tables_containing(engine, key) == []
    async with engine.connect() as conn:
        stored = (
            await conn.execute(
                select(s.notification_provider_account.c.secret_ciphertext).where(
                    s.notification_provider_account.c.tenant_id == tenant
                )
            )
        ).scalar_one()
        changes = [
            row.changes
            for row in await conn.execute(
                select(s.audit_record.c.changes)
                .where(
                    s.audit_record.c.tenant_id == tenant,
                    s.audit_record.c.entity_type == "notification_provider_account",
                )
                .order_by(s.audit_record.c.id)
            )
        ]
    assert stored is not None and key.encode() not in bytes(stored)
    assert changes[0]["apiKey"] == {"before": None, "after": "set"}
    assert "apiKey" not in changes[1] and changes[1]["from"]["after"] == "Other <o@school.example>"

    cleared = await http.put(f"{BASE}/resend", json={"settings": {"apiKey": None}}, headers=headers)
    assert cleared.json()["secrets"] == {"apiKey": {"set": False, "masked": None}}
    assert cleared.json()["settings"] == {}


@pytest.mark.parametrize(
    ("provider", "fields", "code"),
    [
        ("smtp", {"hots": "mail.example.com"}, "NOTIFICATION_PROVIDER_SETTINGS_INVALID"),
        ("smtp", {"host": "not a host!"}, "NOTIFICATION_PROVIDER_SETTINGS_INVALID"),
        ("smtp", {"port": 70000}, "NOTIFICATION_PROVIDER_SETTINGS_INVALID"),
        ("smtp", {"from": "nobody"}, "NOTIFICATION_PROVIDER_SETTINGS_INVALID"),
        ("smtp", {"host": "10.1.2.3"}, "NOTIFICATION_PROVIDER_HOST_FORBIDDEN"),
        ("smtp", {"host": "169.254.169.254"}, "NOTIFICATION_PROVIDER_HOST_FORBIDDEN"),
        ("smtp", {"host": "no-such-host.invalid"}, "NOTIFICATION_PROVIDER_HOST_UNRESOLVABLE"),
        (
            "resend",
            {"apiKey": "re_x", "baseUrl": "http://evil"},
            "NOTIFICATION_PROVIDER_SETTINGS_INVALID",
        ),
        ("twilio", {"accountSid": "nope"}, "NOTIFICATION_PROVIDER_SETTINGS_INVALID"),
        ("telegram", {"botToken": "short"}, "NOTIFICATION_PROVIDER_SETTINGS_INVALID"),
        ("slack", {"botToken": "not-a-slack-token"}, "NOTIFICATION_PROVIDER_SETTINGS_INVALID"),
        (
            "webpush",
            {"vapidSubject": "http://insecure.example"},
            "NOTIFICATION_PROVIDER_SETTINGS_INVALID",
        ),
        ("whatever", {}, "REQUEST_MALFORMED"),
    ],
)
async def test_bad_settings_are_refused_and_nothing_is_stored(
    http: AsyncClient,
    engine: AsyncEngine,
    tenant: str,
    provider: str,
    fields: dict[str, Any],
    code: str,
) -> None:
    """Issue 46, bad input: an unknown field, a value of the wrong shape, a host that is private
    or does not resolve, an unknown provider: 422 with a code, and no account stored."""
    headers = await admin_key(engine, tenant)
    answer = await http.put(f"{BASE}/{provider}", json={"settings": fields}, headers=headers)
    assert answer.status_code == 422, answer.text
    assert error_code(answer) == code
    async with engine.connect() as conn:
        count = (
            await conn.execute(
                text("SELECT count(*) FROM notification_provider_account WHERE tenant_id = :t"),
                {"t": tenant},
            )
        ).scalar_one()
    assert count == 0


async def test_a_refusal_never_quotes_the_value(
    http: AsyncClient, engine: AsyncEngine, tenant: str
) -> None:
    """A secret typed into the wrong field, or with a line break, comes back in no error."""
    headers = await admin_key(engine, tenant)
    value = f"secret-{uuid.uuid4().hex}"
    for settings in ({"passwd": value}, {"password": f"{value}\nX"}, {"username": ""}):
        if "username" in settings:
            settings["password"] = value
        answer = await http.put(f"{BASE}/smtp", json={"settings": settings}, headers=headers)
        assert answer.status_code == 422, answer.text
        assert value not in answer.text


async def test_permissions_and_tenants(
    http: AsyncClient, engine: AsyncEngine, accounts_settings: Settings, tenant: str
) -> None:
    """NotificationProvider_READ lists and reads, _WRITE sets and clears; without them an account
    is not there (404, never 403) and the list is empty; a key without the admin scope is
    refused (403); another tenant sees nothing of this one's accounts (404)."""
    headers = await admin_key(engine, tenant)
    body = {"settings": {"botToken": "123456:" + "A" * 30}}
    assert (await http.put(f"{BASE}/telegram", json=body, headers=headers)).status_code == 200

    async with engine.begin() as conn:
        roles = {}
        for code, permissions in (
            ("provider-reader", ["NotificationProvider_READ"]),
            ("provider-writer", ["NotificationProvider_READ", "NotificationProvider_WRITE"]),
            ("clerk", ["NotificationHistory_READ"]),
        ):
            role_id = await seed.role(conn, tenant, code, "staff")
            await conn.execute(
                update(s.role).where(s.role.c.id == role_id).values(permissions=permissions)
            )
            await seed.person(conn, tenant, code, roles=[role_id])
            roles[code] = bearer(
                sign_token(accounts_settings, tenant_id=tenant, subject=code, role=code)
            )
        events_key = bearer(await create_api_key(conn, tenant_id=tenant, scopes=["events:write"]))

    reader, writer, clerk = roles["provider-reader"], roles["provider-writer"], roles["clerk"]
    assert len((await http.get(BASE, headers=reader)).json()["items"]) == 1
    assert (await http.get(f"{BASE}/telegram", headers=reader)).status_code == 200
    refused = await http.put(f"{BASE}/telegram", json=body, headers=reader)
    assert refused.status_code == 404 and error_code(refused) == "NOT_FOUND"
    assert (await http.delete(f"{BASE}/telegram", headers=reader)).status_code == 404

    assert (await http.get(BASE, headers=clerk)).json()["items"] == []
    assert (await http.get(f"{BASE}/telegram", headers=clerk)).status_code == 404
    assert (await http.put(f"{BASE}/slack", json=body, headers=clerk)).status_code == 404

    assert (await http.get(BASE, headers=events_key)).status_code == 403

    other = await admin_key(engine, f"other-{tenant}")
    assert (await http.get(BASE, headers=other)).json()["items"] == []
    missing = await http.get(f"{BASE}/telegram", headers=other)
    assert missing.status_code == 404
    assert error_code(missing) == "NOTIFICATION_PROVIDER_ACCOUNT_NOT_FOUND"
    assert (await http.delete(f"{BASE}/telegram", headers=other)).status_code == 404

    stale = await http.put(f"{BASE}/telegram", json={**body, "version": 7}, headers=writer)
    assert stale.status_code == 409
    assert error_code(stale) == "NOTIFICATION_PROVIDER_ACCOUNT_VERSION_CONFLICT"
    assert (await http.delete(f"{BASE}/telegram", headers=writer)).status_code == 204
    assert (await http.get(f"{BASE}/telegram", headers=writer)).status_code == 404


async def test_erasing_the_operator_keeps_the_account_and_forgets_who(
    http: AsyncClient, engine: AsyncEngine, accounts_settings: Settings, tenant: str
) -> None:
    """An account is the tenant's configuration, not a person's data: erasing the operator who
    last changed it keeps it, and its updated_by names them only by an erased label."""
    from herald.directory.service import erase_person

    async with engine.begin() as conn:
        role_id = await seed.role(conn, tenant, "provider-admin", "staff")
        await conn.execute(
            update(s.role)
            .where(s.role.c.id == role_id)
            .values(permissions=["NotificationProvider_READ", "NotificationProvider_WRITE"])
        )
        person = await seed.person(conn, tenant, "bursar", roles=[role_id])
    headers = bearer(
        sign_token(accounts_settings, tenant_id=tenant, subject="bursar", role="provider-admin")
    )
    put = await http.put(
        f"{BASE}/slack", json={"settings": {"botToken": "xoxb-1234567890-abc"}}, headers=headers
    )
    assert put.status_code == 200, put.text
    assert put.json()["updatedBy"] == "person:bursar"
    async with engine.begin() as conn:
        await erase_person(conn, tenant, "bursar")
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(
                    s.notification_provider_account.c.provider,
                    s.notification_provider_account.c.updated_by,
                ).where(s.notification_provider_account.c.tenant_id == tenant)
            )
        ).all()
    assert [tuple(r) for r in rows] == [("slack", f"person:erased:{person.public_id}")]


async def test_each_tenant_posts_to_slack_with_its_own_bot(
    http: AsyncClient, engine: AsyncEngine, accounts_settings: Settings, vault: Vault
) -> None:
    """An HTTP provider per tenant: tenant A's staff notice is posted with A's bot token (which
    the local Slack Web API accepts), tenant B's with the deployment's (which it refuses); the
    base URL stays the deployment's."""
    from herald.channels.slack import SlackProvider
    from tests.providers.servers import slack_server

    a, b = f"a-{uuid.uuid4().hex[:10]}", f"b-{uuid.uuid4().hex[:10]}"
    a_token = f"xoxb-{uuid.uuid4().int % 10**10}-{uuid.uuid4().hex}"
    with slack_server(a_token) as slack:
        chat = accounts_settings.model_copy(
            update={
                "slack_provider": "slack",
                "slack_bot_token": "xoxb-0000000000-the-deployments-own-bot",
                "slack_base_url": slack.api_url,
                "max_attempts": 1,
            }
        )
        for tenant in (a, b):
            async with engine.begin() as conn:
                staff = await seed.person(conn, tenant, "asha", full_name="Asha")
                await conn.execute(
                    update(s.person).where(s.person.c.id == staff.id).values(slack_id="U0123ABCDEF")
                )
            await send_event(
                engine,
                tenant,
                kind="staff.notice",
                audience={"kind": "users", "userIds": ["asha"]},
                channels=["slack"],
                variables={"title": "Staff meeting", "message": "At 15:30"},
            )
            await run_to_completion(engine, tenant)
        put = await http.put(
            f"{BASE}/slack",
            json={"settings": {"botToken": a_token}},
            headers=await admin_key(engine, a),
        )
        assert put.status_code == 200, put.text
        default = SlackProvider(chat)
        accounts = TenantProviders(chat, {"slack": default}, refresh_seconds=0)
        try:
            for tenant in (a, b):
                claimed = await deliver_batch(
                    engine,
                    "slack",
                    default,
                    registry=SAMPLE_REGISTRY,
                    vault=vault,
                    settings=chat,
                    tenant_id=tenant,
                    accounts=accounts,
                )
                assert claimed == 1
        finally:
            await accounts.aclose()
            await default.aclose()
        tokens = [r.headers["authorization"] for r in slack.requests]
        assert tokens == [f"Bearer {a_token}", "Bearer xoxb-0000000000-the-deployments-own-bot"]
    d = s.notification_delivery
    async with engine.connect() as conn:
        found = {
            row.tenant_id: row.status
            for row in await conn.execute(
                select(d.c.tenant_id, d.c.status).where(d.c.tenant_id.in_([a, b]))
            )
        }
    assert found[a] == "sent" and found[b] != "sent"


async def test_a_provider_that_cannot_be_built_falls_back_to_the_deployments(
    http: AsyncClient,
    engine: AsyncEngine,
    accounts_settings: Settings,
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A tenant provider whose construction raises does not fail every batch of the tenant: the
    deployment's provider is used (once said, without the account's values) until the account
    changes."""
    from herald.delivery import accounts as tenant_accounts

    password = f"pw-{uuid.uuid4().hex}"
    put = await http.put(
        f"{BASE}/smtp",
        json={"settings": {"host": "127.0.0.1", "password": password}},
        headers=await admin_key(engine, tenant),
    )
    assert put.status_code == 200, put.text

    def refuse(*_: Any) -> Any:
        raise RuntimeError(password)  # even a message carrying the secret is not logged

    monkeypatch.setattr(tenant_accounts, "build_channel", refuse)
    default = SmtpEmailProvider(accounts_settings)
    accounts = TenantProviders(accounts_settings, {"email": default})
    await accounts.refresh(engine)
    assert accounts.provider_for(tenant, "email") is default
    assert accounts.providers_of([tenant], "email") == {}
    assert "could not be built (RuntimeError)" in caplog.text
    assert password not in caplog.text
    await accounts.aclose()
    await default.aclose()


async def received(server: SmtpTestServer, count: int) -> bool:
    """Wait (up to 30 s) until `server` holds `count` messages."""
    for _ in range(600):
        if len(server.handler.received) >= count:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_herald_worker_uses_a_changed_account_for_the_next_delivery(
    http: AsyncClient, engine: AsyncEngine, accounts_settings: Settings, tenant: str
) -> None:
    """The black-box check, through `herald worker`'s own loop (fan-out, the email sender and its
    LISTEN connection): the tenant's email reaches its own SMTP server; after the account is
    changed to another server, the next email reaches that one — the same worker, no restart."""
    from herald.runtime.worker import run_worker

    await parent(engine, tenant, "parent@school-a.example")
    headers = await admin_key(engine, tenant)
    default = SmtpEmailProvider(accounts_settings)
    stop = asyncio.Event()
    with smtp_server() as first, smtp_server() as second:

        async def point_at(server: SmtpTestServer) -> None:
            answer = await http.put(
                f"{BASE}/smtp",
                json={"settings": {"host": server.host, "port": server.port, "starttls": False}},
                headers=headers,
            )
            assert answer.status_code == 200, answer.text

        await point_at(first)
        worker = asyncio.create_task(
            run_worker(
                accounts_settings,
                engine,
                SAMPLE_REGISTRY,
                stop,
                tenant_id=tenant,
                providers={"email": default},
                maintenance=False,
            )
        )
        try:
            await queue_email_only(engine, tenant)
            assert await received(first, 1)
            await point_at(second)
            await queue_email_only(engine, tenant)
            assert await received(second, 1)
        finally:
            stop.set()
            await asyncio.wait_for(worker, timeout=20)
            await default.aclose()
        assert len(first.handler.received) == 1
        assert senders(second)[0][1] == "parent@school-a.example"


async def queue_email_only(engine: AsyncEngine, tenant: str) -> None:
    """An event for the worker to fan out and send (no fan-out here)."""
    variables = {"title": f"Notice {uuid.uuid4().hex[:6]}", "message": "See you on Friday."}
    await send_event(engine, tenant, channels=["email"], variables=variables)
