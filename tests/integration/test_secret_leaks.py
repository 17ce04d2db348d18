"""The secret-leak hunt: password-reset and OTP flows over the HTTP API, delivered to a real SMTP
server (aiosmtpd) — one that succeeds, one that fails retryably and succeeds on its retry, one
that fails retryably until it is dead-lettered, and one refused outright, dead-lettered and
replayed through the admin API — then every table, every captured log line and every API
response body seen is searched for every secret value, and none holds one.

The search is checked to work: the same scan finds the values where they must be (the emails the
SMTP server received) and finds the person's email address in person.email.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.api.app import create_app
from herald.auth.service import create_api_key
from herald.config import Settings
from herald.delivery import service as delivery_service
from herald.kinds import Registry
from herald.secrets.vault import TableVault
from tests import seed
from tests.integration.test_fanout import run_to_completion
from tests.integration.test_secrets import body_text, deliver_email, tables_containing
from tests.providers.servers import SmtpTestServer, smtp_server

# aiosmtpd's own loggers: the test's SMTP server, which logs the DATA it receives (the email is
# meant to carry the secret). Every other logger, Herald's and its libraries', is searched.
SMTP_SERVER_LOGGERS = ("mail.log", "mail.debug")


def secret(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def smtp() -> Iterator[SmtpTestServer]:
    with smtp_server() as server:
        yield server


class Responses:
    """Every API response body the test sees (an httpx event hook reads each one)."""

    def __init__(self) -> None:
        self.bodies: list[str] = []

    async def __call__(self, response: httpx.Response) -> None:
        await response.aread()
        self.bodies.append(
            f"{response.request.method} {response.request.url.path} "
            f"{response.status_code} {dict(response.headers)} {response.text}"
        )


def recording_client(app: FastAPI, responses: Responses) -> AsyncClient:
    """A client on the app whose every response body lands in `responses`."""
    return AsyncClient(
        transport=ASGITransport(app=app),
        base_url="http://herald.test",
        event_hooks={"response": [responses]},
    )


async def bearer(engine: AsyncEngine, tenant: str, scopes: list[str]) -> dict[str, str]:
    """Headers carrying a new API key of the tenant with these scopes."""
    async with engine.begin() as conn:
        key = await create_api_key(conn, tenant_id=tenant, scopes=scopes)
    return {"Authorization": f"Bearer {key}"}


async def post_event(
    engine: AsyncEngine,
    tenant: str,
    http: AsyncClient,
    headers: dict[str, str],
    body: dict[str, Any],
) -> str:
    """Posts the event over the API and fans it out to deliveries; returns its id."""
    event = await http.post("/v1/events", json=body, headers=headers)
    assert event.status_code == 201, event.text
    await run_to_completion(engine, tenant)
    event_id: str = event.json()["id"]
    return event_id


async def retry_now(engine: AsyncEngine, tenant: str) -> None:
    """The backoff elapses at once; the reaper puts the row back in the queue as it would."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE notification_delivery SET next_attempt_at = now() "
                "WHERE tenant_id = :t AND status = 'failed'"
            ),
            {"t": tenant},
        )
        await delivery_service.requeue_due_failures(conn, limit=100)


async def read_every_view(http: AsyncClient, headers: dict[str, str], event_ids: list[str]) -> None:
    """Everything an operator or the host can read about these events, so each body is searched."""
    for event_id in event_ids:
        for path in (
            f"/v1/events/{event_id}",
            f"/v1/admin/events/{event_id}",
            f"/v1/admin/events/{event_id}/deliveries",
        ):
            answer = await http.get(path, headers=headers)
            assert answer.status_code == 200, (path, answer.text)


async def replay_dead_letters(http: AsyncClient, headers: dict[str, str], count: int) -> None:
    """An operator replays every dead letter over the admin API; there are `count` of them."""
    letters = await http.get("/v1/admin/dead-letters", headers=headers)
    assert letters.status_code == 200, letters.text
    assert len(letters.json()["items"]) == count
    for letter in letters.json()["items"]:
        replayed = await http.post(f"/v1/admin/dead-letters/{letter['id']}/replay", headers=headers)
        assert replayed.status_code == 201, replayed.text


def lines_of(records: Iterable[logging.LogRecord]) -> list[str]:
    """Each captured record as one searchable line: logger, message and any traceback."""
    return [f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in records]


async def assert_found_nowhere(
    engine: AsyncEngine,
    values: Iterable[str],
    log_lines: list[str],
    responses: Responses,
    *,
    kept_in: Mapping[str, list[str]] | None = None,
) -> None:
    """No value is in any table, log line or response body; `kept_in` names the columns that
    are meant to hold a value (a person's own webhook URL), which must then be exactly those."""
    kept_in = kept_in or {}
    for value in values:
        assert await tables_containing(engine, value) == kept_in.get(value, []), value
        assert [line for line in log_lines if value in line] == [], value
        assert [body for body in responses.bodies if value in body] == [], value


async def test_no_secret_value_is_left_in_a_table_a_log_or_a_response(
    settings: Settings,
    engine: AsyncEngine,
    registry: Registry,
    tenant: str,
    smtp: SmtpTestServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R-SECRET-3, R-SECRET-4, R-SECRET-5, R-SECRET-6, R-SECRET-7, R-SECRET-16, R-SEC-8, R-SEC-9,
    R-DLQ-3: after password resets and OTPs — sent, failed and retried, retried until dead, and
    refused, dead-lettered and replayed — no secret value is in any table, any log line or any
    API response body, while each email that was sent carries its value."""
    caplog.set_level(logging.DEBUG)
    configured = settings.model_copy(
        update={
            "smtp_host": smtp.host,
            "smtp_port": smtp.port,
            "smtp_starttls": False,
            "email_from": "School <school@example.com>",
            "data_dir": tmp_path,
            "max_attempts": 2,
        }
    )
    vault = TableVault(engine, Fernet.generate_key())
    app = create_app(configured, engine, registry, vault=vault)
    responses = Responses()
    async with engine.begin() as conn:
        await seed.person(conn, tenant, "u1", full_name="Asha", email="asha@example.com")
    headers = await bearer(
        engine, tenant, ["secrets:write", "events:write", "events:read", "admin"]
    )

    async def send_secret(http: AsyncClient, kind: str, values: dict[str, str]) -> str:
        stash_type = "otp" if kind == "auth.otp" else "password_reset"
        stashed = await http.post(
            "/v1/secrets", json={"type": stash_type, "values": values}, headers=headers
        )
        assert stashed.status_code == 201, stashed.text
        return await post_event(
            engine,
            tenant,
            http,
            headers,
            {
                "kind": kind,
                "audience": {"kind": "users", "userIds": ["u1"]},
                "channels": ["email"],
                "variables": {"secretRef": stashed.json()["secretRef"]},
            },
        )

    async def deliver() -> None:
        await deliver_email(engine, configured, vault, tenant)

    sent_values: list[str] = []
    all_values: list[str] = []
    event_ids: list[str] = []
    async with recording_client(app, responses) as http:
        # 1. A password reset and an OTP, sent at once.
        for kind, name in (("auth.password_reset", "token"), ("auth.otp", "code")):
            value = secret(name)
            event_ids.append(await send_secret(http, kind, {name: value}))
            await deliver()
            sent_values.append(value)

        # 2. A temporary refusal (which echoes the secret, as some servers echo the message),
        #    then the retry succeeds.
        value = secret("retried")
        smtp.handler.refuse_data = f"451 4.3.0 try again later {value}"
        event_ids.append(await send_secret(http, "auth.password_reset", {"token": value}))
        await deliver()
        smtp.handler.refuse_data = None
        await retry_now(engine, tenant)
        await deliver()
        sent_values.append(value)

        # 3. Temporary refusals until the attempts run out: dead-lettered.
        value = secret("exhausted")
        smtp.handler.refuse_data = f"451 4.3.0 try again later {value}"
        event_ids.append(await send_secret(http, "auth.otp", {"code": value}))
        await deliver()
        await retry_now(engine, tenant)
        await deliver()
        smtp.handler.refuse_data = None
        all_values.append(value)

        # 4. Refused outright (the refusal echoes the address and the secret), dead-lettered,
        #    then replayed by an operator: the secret was single-use, so the replay sends nothing.
        value = secret("refused")
        smtp.handler.refuse_rcpt = "550 5.1.1 <{address}> unknown " + value
        event_ids.append(await send_secret(http, "auth.password_reset", {"token": value}))
        await deliver()
        smtp.handler.refuse_rcpt = None
        all_values.append(value)

        await replay_dead_letters(http, headers, 2)
        await deliver()

        await read_every_view(http, headers, event_ids)
        assert (await http.get("/v1/admin/events", headers=headers)).status_code == 200
        assert (await http.get("/v1/admin/feed", headers=headers)).status_code == 200

    all_values += sent_values
    statuses = await delivery_statuses(engine, tenant)
    assert statuses.count("sent") == 3, statuses
    assert statuses.count("dead") == 2, statuses

    # The scan works: it finds what must be there.
    received = "\n".join(body_text(m.content) for m in smtp.handler.received)
    assert all(value in received for value in sent_values)
    assert await tables_containing(engine, "asha@example.com") == ["person.email"]
    assert len(responses.bodies) > 20

    # And it finds no secret anywhere else.
    log_lines = lines_of(r for r in caplog.records if r.name not in SMTP_SERVER_LOGGERS)
    await assert_found_nowhere(engine, all_values, log_lines, responses)


async def delivery_statuses(engine: AsyncEngine, tenant: str) -> list[Any]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT status FROM notification_delivery "
                "WHERE tenant_id = :t AND replay_of_delivery_id IS NULL"
            ),
            {"t": tenant},
        )
        return [row.status for row in rows]


async def test_no_chat_provider_secret_is_left_in_a_table_a_log_or_a_response(
    settings: Settings,
    engine: AsyncEngine,
    registry: Registry,
    tenant: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 46, bad input: a provider secret — the Slack bot token, a Teams webhook URL (whoever
    holds it can post into that chat) — never appears in a response, a log line, an error or a
    dead letter. Staff notices are sent, refused retryably until dead (token revoked, 5xx),
    refused outright (a deleted webhook), dead-lettered and replayed through the admin API, with
    every logger at DEBUG; the token is in no table at all, the webhook URL only in
    person.teams_webhook_url."""
    from herald.channels.slack import SlackProvider
    from herald.channels.teams import TeamsProvider
    from tests.integration.test_delivery import deliver as deliver_batch_of
    from tests.providers.servers import ChatReply, slack_error, slack_server, teams_server

    caplog.set_level(logging.DEBUG)
    token = f"xoxb-{uuid.uuid4().int % 10**10}-{uuid.uuid4().hex}"
    with slack_server(token) as slack, teams_server() as teams:
        configured = settings.model_copy(
            update={
                "data_dir": tmp_path,
                "max_attempts": 2,
                "webhook_allow_loopback": True,
                "slack_provider": "slack",
                "slack_bot_token": token,
                "slack_base_url": slack.api_url,
                "teams_provider": "teams",
            }
        )
        webhook = teams.webhook_url(f"room-{uuid.uuid4().hex[:8]}")
        webhook_secret = webhook.removeprefix(teams.base_url)
        vault = TableVault(engine, Fernet.generate_key())
        app = create_app(configured, engine, registry, vault=vault)
        responses = Responses()
        headers = await bearer(
            engine, tenant, ["directory:write", "events:write", "events:read", "admin"]
        )
        slack_provider, teams_provider = SlackProvider(configured), TeamsProvider(configured)

        async def deliver() -> None:
            for provider in (slack_provider, teams_provider):
                await deliver_batch_of(engine, provider, vault, configured, tenant)()

        try:
            async with recording_client(app, responses) as http:
                person = {"fullName": "Asha", "slackId": "U0ASHA00001", "teamsWebhookUrl": webhook}
                put = await http.put("/v1/people/asha", json=person, headers=headers)
                assert put.status_code == 201, put.text
                refused = await http.put(
                    "/v1/people/bina",
                    json={"teamsWebhookUrl": webhook.replace("127.0.0.1", "10.1.2.3")},
                    headers=headers,
                )
                assert refused.status_code == 400, refused.text

                async def notice(message: str) -> str:
                    return await post_event(
                        engine,
                        tenant,
                        http,
                        headers,
                        {
                            "kind": "staff.notice",
                            "audience": {"kind": "users", "userIds": ["asha"]},
                            "channels": ["slack", "teams"],
                            "variables": {"title": "Staff", "message": message},
                        },
                    )

                event_ids = [await notice("sent at once")]
                await deliver()
                # Retryable until dead: a revoked token, a Teams 5xx (both echo what they got).
                slack.reply_with(slack_error("token_revoked"), slack_error("token_revoked"))
                teams.reply_with(
                    ChatReply(status=500, body=webhook.encode()),
                    ChatReply(status=502, body=token.encode()),
                )
                event_ids.append(await notice("retried until dead"))
                await deliver()
                await retry_now(engine, tenant)
                await deliver()
                await replay_dead_letters(http, headers, 2)
                await deliver()
                # Refused outright: the webhook is deleted.
                teams.gone.add(webhook_secret)
                event_ids.append(await notice("webhook gone"))
                await deliver()
                await read_every_view(http, headers, event_ids)
                assert (await http.get("/v1/admin/dead-letters", headers=headers)).is_success
        finally:
            await slack_provider.aclose()
            await teams_provider.aclose()

    statuses = await delivery_statuses(engine, tenant)
    assert statuses.count("sent") == 3 and statuses.count("dead") == 3, statuses
    # The scan works: the servers got the token and the URL, and (below) the table finds the URL.
    assert all(r.headers["authorization"] == f"Bearer {token}" for r in slack.requests)
    assert any(r.path == webhook_secret for r in teams.requests)
    assert len(responses.bodies) > 10

    log_lines = lines_of(caplog.records)
    assert any("teams send failed" in line for line in log_lines)
    await assert_found_nowhere(
        engine,
        (token, webhook_secret),
        log_lines,
        responses,
        kept_in={webhook_secret: ["person.teams_webhook_url"]},
    )


async def test_no_whatsapp_secret_is_left_in_a_table_a_log_or_a_response(
    settings: Settings,
    engine: AsyncEngine,
    registry: Registry,
    tenant: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 46, bad input: WhatsApp's access token, app secret and verify token never appear in
    a response, a log line, an error or a dead letter. Fee reminders are sent, refused
    retryably until dead (a token refused with Meta's echo of it, a 5xx echoing it), dead-lettered
    and replayed, refused outright (131026 quoting it); receipts are posted signed and forged,
    and the subscription handshake answered right and wrong, with every logger at DEBUG. None of
    the three is in any table."""
    from herald.channels.whatsapp import WhatsAppProvider
    from tests.integration.test_delivery import deliver as deliver_batch_of
    from tests.providers.servers import (
        WHATSAPP_PHONE_NUMBER_ID,
        ChatReply,
        whatsapp_error,
        whatsapp_server,
        whatsapp_signature,
        whatsapp_status_webhook,
    )

    caplog.set_level(logging.DEBUG)
    token = f"EAA{uuid.uuid4().hex}{uuid.uuid4().hex}"
    app_secret = secret("wa-app-secret")
    verify_token = secret("wa-verify")
    with whatsapp_server(token) as graph:
        graph.approve("fee_reminder", "en", 3)
        configured = settings.model_copy(
            update={
                "data_dir": tmp_path,
                "max_attempts": 2,
                "whatsapp_provider": "whatsapp",
                "whatsapp_token": token,
                "whatsapp_phone_number_id": WHATSAPP_PHONE_NUMBER_ID,
                "whatsapp_api_url": graph.api_url,
                "whatsapp_app_secret": app_secret,
                "whatsapp_verify_token": verify_token,
            }
        )
        vault = TableVault(engine, Fernet.generate_key())
        app = create_app(configured, engine, registry, vault=vault)
        responses = Responses()
        headers = await bearer(
            engine, tenant, ["directory:write", "events:write", "events:read", "admin"]
        )
        provider = WhatsAppProvider(configured)

        async def deliver() -> None:
            await deliver_batch_of(engine, provider, vault, configured, tenant)()

        try:
            async with recording_client(app, responses) as http:
                person = {"fullName": "Asha", "phone": "+9779812345678"}
                put = await http.put("/v1/people/asha", json=person, headers=headers)
                assert put.status_code == 201, put.text

                async def reminder(due: str) -> str:
                    return await post_event(
                        engine,
                        tenant,
                        http,
                        headers,
                        {
                            "kind": "fee.reminder",
                            "audience": {"kind": "users", "userIds": ["asha"]},
                            "channels": ["whatsapp"],
                            "variables": {
                                "studentName": "Aarav",
                                "amount": "NPR 1",
                                "dueDate": due,
                            },
                        },
                    )

                event_ids = [await reminder("2026-12-01")]
                await deliver()
                # Retryable until dead: Meta's 190 quoting the token, a 5xx echoing it.
                graph.reply_with(
                    whatsapp_error(190, status=401, message=f"Invalid OAuth token {token}"),
                    ChatReply(status=500, body=f"upstream {token} {app_secret}".encode()),
                )
                event_ids.append(await reminder("2026-12-02"))
                await deliver()
                await retry_now(engine, tenant)
                await deliver()
                await replay_dead_letters(http, headers, 1)
                await deliver()
                # Refused outright, Meta's message quoting the token.
                graph.reply_with(whatsapp_error(131026, message=f"{token} undeliverable"))
                event_ids.append(await reminder("2026-12-03"))
                await deliver()

                # Receipts: signed, then forged (signed with a guess); the handshake right, wrong.
                async with engine.connect() as conn:
                    ids = list(
                        (
                            await conn.execute(
                                text(
                                    "SELECT provider_message_id FROM notification_delivery "
                                    "WHERE tenant_id = :t AND provider_message_id IS NOT NULL "
                                    # The original first: the receipt is for it, not the replay.
                                    "ORDER BY replay_of_delivery_id NULLS FIRST, id"
                                ),
                                {"t": tenant},
                            )
                        ).scalars()
                    )
                assert len(ids) == 2
                body = whatsapp_status_webhook(ids[0], "delivered")
                for signature in (whatsapp_signature(body, app_secret), whatsapp_signature(body)):
                    await http.post(
                        "/v1/providers/whatsapp/webhook",
                        content=body,
                        headers={"x-hub-signature-256": signature},
                    )
                for guess in (verify_token, "guess"):
                    await http.get(
                        "/v1/providers/whatsapp/webhook",
                        params={
                            "hub.mode": "subscribe",
                            "hub.verify_token": guess,
                            "hub.challenge": "42",
                        },
                    )
                await read_every_view(http, headers, event_ids)
                assert (await http.get("/v1/admin/dead-letters", headers=headers)).is_success
        finally:
            await provider.aclose()

    statuses = await delivery_statuses(engine, tenant)
    # The first delivered by its receipt; the dead-lettered one (its replay is sent) and the
    # undeliverable one dead.
    assert sorted(statuses) == ["dead", "dead", "delivered"], statuses
    # The scan works: the server got the token, and the responses include the webhook's.
    assert all(r.headers["authorization"] == f"Bearer {token}" for r in graph.requests)
    assert any("PROVIDER_SIGNATURE_INVALID" in b for b in responses.bodies)
    assert any("PROVIDER_VERIFY_TOKEN_INVALID" in b for b in responses.bodies)
    assert len(responses.bodies) > 10

    # Meta's handshake carries the verify token in its query string by design: the one line
    # left out is the test's own client logging the URL it called (httpx, to http://herald.test);
    # Herald writes no access log (uvicorn's is off) and its providers' httpx lines are kept.
    log_lines = lines_of(
        r
        for r in caplog.records
        if not (r.name == "httpx" and "http://herald.test/" in r.getMessage())
    )
    assert any("whatsapp send failed" in line for line in log_lines)
    assert any(line.startswith("httpx HTTP Request: POST http://127.0.0.1") for line in log_lines)
    await assert_found_nowhere(engine, (token, app_secret, verify_token), log_lines, responses)


async def test_no_provider_account_secret_is_left_in_a_table_a_log_or_a_response(
    settings: Settings,
    engine: AsyncEngine,
    registry: Registry,
    tenant: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 46 item 4, bad input: a tenant's provider secrets — its SMTP password, Resend key,
    Telegram and Slack bot tokens — set over the admin API, used for sends that succeed and that
    are refused until dead-lettered, and typed into refused requests (a wrong field, a line
    break), appear in no table (only ciphertext), no log line at DEBUG, no response, no error
    and no dead letter; the SMTP server does receive the login that used the password."""
    from herald.channels.smtp import SmtpEmailProvider
    from herald.delivery.accounts import TenantProviders
    from herald.delivery.worker import deliver_batch
    from tests.integration.test_provider_accounts import parent, queue_email

    caplog.set_level(logging.DEBUG)
    password = secret("smtp-password")
    values = {
        "password": password,
        "resend": f"re_{uuid.uuid4().hex}",
        "telegram": f"{uuid.uuid4().int % 10**9}:{uuid.uuid4().hex}{uuid.uuid4().hex[:8]}",
        "slack": f"xoxb-{uuid.uuid4().int % 10**10}-{uuid.uuid4().hex}",
        "typo": secret("typed-in-the-wrong-field"),
    }
    configured = settings.model_copy(
        update={
            "data_dir": tmp_path,
            "max_attempts": 2,
            "webhook_allow_loopback": True,
            "vault_key": Fernet.generate_key().decode(),
        }
    )
    vault = TableVault(engine, Fernet.generate_key())
    app = create_app(configured, engine, registry, vault=vault)
    responses = Responses()
    await parent(engine, tenant, "parent@example.com")
    headers = await bearer(engine, tenant, ["admin"])
    default = SmtpEmailProvider(configured)
    accounts = TenantProviders(configured, {"email": default}, refresh_seconds=0)

    async def deliver() -> None:
        await deliver_batch(
            engine,
            "email",
            default,
            registry=registry,
            vault=vault,
            settings=configured,
            tenant_id=tenant,
            accounts=accounts,
        )

    with smtp_server(credentials=("school", password)) as school:
        async with recording_client(app, responses) as http:
            smtp_account = {
                "host": school.host,
                "port": school.port,
                "username": "school",
                "password": password,
                "starttls": False,
                "from": "School <office@school.example>",
            }
            for provider, fields in (
                ("smtp", smtp_account),
                ("resend", {"apiKey": values["resend"]}),
                ("telegram", {"botToken": values["telegram"]}),
                ("slack", {"botToken": values["slack"]}),
            ):
                put = await http.put(
                    f"/v1/admin/providers/{provider}", json={"settings": fields}, headers=headers
                )
                assert put.status_code == 200, put.text
            # Refused requests carrying secrets: a misspelt field, a line break, a wrong shape.
            for provider, fields in (
                ("smtp", {"passwrd": values["typo"]}),
                ("smtp", {"password": values["typo"] + "\r\nRSET"}),
                ("slack", {"botToken": values["typo"]}),
                ("telegram", {"botToken": values["typo"]}),
            ):
                refused = await http.put(
                    f"/v1/admin/providers/{provider}", json={"settings": fields}, headers=headers
                )
                assert refused.status_code == 422, refused.text

            # Sent with the password; then a wrong one, refused until dead-lettered.
            await queue_email(engine, tenant)
            await deliver()
            assert school.handler.logins == ["school"]
            wrong = {**smtp_account, "password": secret("wrong-password")}
            values["wrong"] = wrong["password"]
            put = await http.put(
                "/v1/admin/providers/smtp", json={"settings": wrong}, headers=headers
            )
            assert put.status_code == 200, put.text
            await queue_email(engine, tenant)
            await deliver()
            await retry_now(engine, tenant)
            await deliver()

            for path in (
                "/v1/admin/providers",
                "/v1/admin/providers/smtp",
                "/v1/admin/dead-letters",
            ):
                answer = await http.get(path, headers=headers)
                assert answer.status_code == 200, (path, answer.text)
            assert (
                len((await http.get("/v1/admin/dead-letters", headers=headers)).json()["items"])
                == 1
            )
    await accounts.aclose()
    await default.aclose()

    statuses = await delivery_statuses(engine, tenant)
    assert sorted(statuses) == ["dead", "sent"], statuses
    log_lines = lines_of(r for r in caplog.records if r.name not in SMTP_SERVER_LOGGERS)
    assert len(responses.bodies) >= 10
    await assert_found_nowhere(engine, values.values(), log_lines, responses)
