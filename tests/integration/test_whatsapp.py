"""WhatsApp, end to end (issue 46): an event for people with phones sent over `whatsapp` through
the worker arrives at a local server speaking the Graph API as the kind's approved template with
its parameters in order; Meta's signed receipts move the delivery (a bad signature changes
nothing); a number WhatsApp cannot reach is marked for WhatsApp alone; preferences, template
overrides, the trace and erasure take the channel as they take the others."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from httpx import AsyncClient
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.channels.whatsapp import WhatsAppProvider
from herald.config import Settings
from herald.db import schema as s
from herald.secrets.vault import Vault
from tests.integration.test_delivery import deliver, delivery_rows
from tests.integration.test_directory import Headers, api_key, error_code
from tests.integration.test_fanout import run_to_completion, send_event
from tests.providers.servers import (
    WHATSAPP_APP_SECRET,
    WHATSAPP_PHONE_NUMBER_ID,
    WHATSAPP_TOKEN,
    WHATSAPP_VERIFY_TOKEN,
    WhatsAppTestServer,
    whatsapp_error,
    whatsapp_server,
    whatsapp_signature,
    whatsapp_status_webhook,
)

WEBHOOK = "/v1/providers/whatsapp/webhook"
FEE = {"studentName": "Aarav Shrestha", "amount": "NPR 12,500", "dueDate": "2026-12-15"}
ASHA_PHONE = "+977 981-2345678"
ASHA_E164 = "+9779812345678"
BINA_PHONE = "9812000111"  # national: normalised with the default region (NP)


@pytest.fixture
def settings(settings: Settings, tmp_path: Any) -> Settings:
    return settings.model_copy(
        update={
            "max_attempts": 3,
            "data_dir": tmp_path,
            "whatsapp_app_secret": WHATSAPP_APP_SECRET,
            "whatsapp_verify_token": WHATSAPP_VERIFY_TOKEN,
        }
    )


@pytest.fixture
def graph() -> Iterator[WhatsAppTestServer]:
    with whatsapp_server() as running:
        running.approve("fee_reminder", "en", 3)
        running.approve("fee_reminder", "ne", 3)
        yield running


def _wa_settings(settings: Settings, graph: WhatsAppTestServer) -> Settings:
    return settings.model_copy(
        update={
            "whatsapp_provider": "whatsapp",
            "whatsapp_token": WHATSAPP_TOKEN,
            "whatsapp_phone_number_id": WHATSAPP_PHONE_NUMBER_ID,
            "whatsapp_api_url": graph.api_url,
        }
    )


async def _guardians(client: AsyncClient, auth: Headers) -> None:
    people = [
        {"externalId": "asha", "fullName": "Asha", "phone": ASHA_PHONE},
        {"externalId": "bina", "fullName": "Bina", "phone": BINA_PHONE, "locale": "ne"},
        {"externalId": "chet", "fullName": "Chet"},  # no phone: skipped, no destination
    ]
    answer = await client.post("/v1/people:batch", json={"people": people}, headers=auth)
    assert answer.status_code == 200, answer.text


@pytest.fixture
async def guardians(client: AsyncClient, auth: Headers) -> None:
    """Asha and Bina (two phones, two languages) and Chet (no phone) in the test's tenant."""
    await _guardians(client, auth)


@dataclass
class FeeReminders:
    """Fee reminders of the test's tenant (or another's), fanned out, and delivered through a
    WhatsApp provider (a new one each batch, as a worker's) speaking to the local Graph API."""

    engine: AsyncEngine
    settings: Settings
    graph: WhatsAppTestServer
    vault: Vault
    tenant: str

    async def send(self, who: list[str] | None = None, tenant: str = "", **variables: str) -> None:
        tenant = tenant or self.tenant
        await send_event(
            self.engine,
            tenant,
            kind="fee.reminder",
            audience={"kind": "users", "userIds": who or ["asha", "bina", "chet"]},
            channels=["whatsapp"],
            variables={**FEE, **variables},
        )
        await run_to_completion(self.engine, tenant)

    async def deliver(self, tenant: str = "") -> int:
        """One batch; how many deliveries it took."""
        wa = _wa_settings(self.settings, self.graph)
        provider = WhatsAppProvider(wa)
        try:
            count: int = await deliver(
                self.engine, provider, self.vault, wa, tenant or self.tenant
            )()
            return count
        finally:
            await provider.aclose()


@pytest.fixture
def fees(
    engine: AsyncEngine, settings: Settings, graph: WhatsAppTestServer, vault: Vault, tenant: str
) -> FeeReminders:
    return FeeReminders(engine, settings, graph, vault, tenant)


async def _post_receipt(client: AsyncClient, body: bytes, signature: str | None) -> Any:
    headers = {"content-type": "application/json"}
    if signature is not None:
        headers["x-hub-signature-256"] = signature
    return await client.post(WEBHOOK, content=body, headers=headers)


def _sent(rows: list[dict[str, Any]], hint_tail: str) -> dict[str, Any]:
    return next(
        r for r in rows if r["destination_hint"] and r["destination_hint"].endswith(hint_tail)
    )


# -- sending ---------------------------------------------------------------------------------------


@pytest.mark.usefixtures("guardians")
async def test_a_template_message_arrives_with_its_parameters_and_a_signed_receipt_delivers_it(
    client: AsyncClient,
    engine: AsyncEngine,
    tenant: str,
    fees: FeeReminders,
    graph: WhatsAppTestServer,
) -> None:
    """The black-box check: the fee reminder reaches the Graph API as the approved template in
    each person's language with amount, student and date in the template's order, to the number
    normalised to E.164; a person without a phone is skipped. A receipt signed with the app
    secret marks it delivered; a later `read` changes nothing more."""
    await fees.send()
    assert await fees.deliver() == 3

    bodies = sorted(graph.sent(), key=lambda b: b["to"])
    assert [b["to"] for b in bodies] == ["9779812000111", "9779812345678"]
    for body, language in zip(bodies, ["ne", "en"], strict=True):
        assert graph.requests[0].headers["authorization"] == f"Bearer {WHATSAPP_TOKEN}"
        assert body["messaging_product"] == "whatsapp" and body["type"] == "template"
        assert body["template"]["name"] == "fee_reminder"
        assert body["template"]["language"] == {"code": language}
        assert body["template"]["components"] == [
            {
                "type": "body",
                "parameters": [
                    {"type": "text", "text": "NPR 12,500"},
                    {"type": "text", "text": "Aarav Shrestha"},
                    {"type": "text", "text": "2026-12-15"},
                ],
            }
        ]

    rows = await delivery_rows(engine, tenant)
    assert sorted(r["status"] for r in rows) == ["sent", "sent", "skipped_no_destination"]
    asha = _sent(rows, "5678")
    assert asha["destination_hint"] == "+977●●●●●●5678"
    assert asha["provider_message_id"].startswith("wamid.")
    # The stored rendering is the approved text as the kind words it (what the trace shows).
    assert asha["rendered_body"] == ("A fee of NPR 12,500 for Aarav Shrestha is due on 2026-12-15.")

    body = whatsapp_status_webhook(asha["provider_message_id"], "sent")
    answer = await _post_receipt(client, body, whatsapp_signature(body))
    assert (answer.status_code, answer.json()) == (200, {"results": ["ignored"]})

    body = whatsapp_status_webhook(
        asha["provider_message_id"],
        "delivered",
        more=[{"id": asha["provider_message_id"], "status": "read", "timestamp": "1"}],
    )
    answer = await _post_receipt(client, body, whatsapp_signature(body))
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"results": ["delivered", "ignored"]}
    rows = await delivery_rows(engine, tenant)
    delivered = _sent(rows, "5678")
    assert delivered["status"] == "delivered" and delivered["delivered_at"] is not None
    assert _sent(rows, "0111")["status"] == "sent"


@pytest.mark.usefixtures("guardians")
async def test_one_callback_moves_deliveries_of_several_tenants(
    client: AsyncClient,
    engine: AsyncEngine,
    tenant: str,
    fees: FeeReminders,
) -> None:
    """One business number serves every tenant, and Meta batches statuses: each status finds its
    own delivery's tenant, whichever tenant the one before it was."""
    other = f"t-{uuid.uuid4().hex[:12]}"
    await _guardians(client, await api_key(engine, other, ["directory:write"]))
    for each in (tenant, other):
        await fees.send(["asha"], tenant=each)
        await fees.deliver(each)
    [mine] = await delivery_rows(engine, tenant)
    [theirs] = await delivery_rows(engine, other)
    body = whatsapp_status_webhook(
        mine["provider_message_id"],
        "delivered",
        more=[{"id": theirs["provider_message_id"], "status": "read", "timestamp": "1"}],
    )
    answer = await _post_receipt(client, body, whatsapp_signature(body))
    assert answer.json() == {"results": ["delivered", "delivered"]}, answer.text
    for each in (tenant, other):
        assert [r["status"] for r in await delivery_rows(engine, each)] == ["delivered"]


@pytest.mark.parametrize(
    "signature",
    [
        None,
        "",
        "sha256=" + "0" * 64,
        "sha1=abc",
        whatsapp_signature(b"another body"),
        whatsapp_signature(b"x", "another-app-secret"),
    ],
)
@pytest.mark.usefixtures("guardians")
async def test_a_bad_signature_is_refused_and_changes_nothing(
    client: AsyncClient,
    engine: AsyncEngine,
    tenant: str,
    fees: FeeReminders,
    signature: str | None,
) -> None:
    await fees.send(["asha"])
    await fees.deliver()
    [row] = await delivery_rows(engine, tenant)
    body = whatsapp_status_webhook(row["provider_message_id"], "delivered")
    answer = await _post_receipt(client, body, signature)
    assert answer.status_code == 401, answer.text
    assert error_code(answer) == "PROVIDER_SIGNATURE_INVALID"
    assert WHATSAPP_APP_SECRET not in answer.text
    [after] = await delivery_rows(engine, tenant)
    assert after["status"] == "sent" and after["delivered_at"] is None


async def test_metas_subscription_handshake(client: AsyncClient) -> None:
    """GET with hub.mode=subscribe and this deployment's verify token echoes hub.challenge as
    text; another token is 403 with its code; a malformed handshake is 400."""
    params = {
        "hub.mode": "subscribe",
        "hub.verify_token": WHATSAPP_VERIFY_TOKEN,
        "hub.challenge": "1158201444",
    }
    answer = await client.get(WEBHOOK, params=params)
    assert answer.status_code == 200, answer.text
    assert answer.text == "1158201444"
    assert answer.headers["content-type"].startswith("text/plain")

    wrong = await client.get(WEBHOOK, params={**params, "hub.verify_token": "guess"})
    assert wrong.status_code == 403, wrong.text
    assert error_code(wrong) == "PROVIDER_VERIFY_TOKEN_INVALID"
    assert WHATSAPP_VERIFY_TOKEN not in wrong.text

    unsubscribe = await client.get(WEBHOOK, params={**params, "hub.mode": "unsubscribe"})
    assert unsubscribe.status_code == 400
    assert error_code(unsubscribe) == "PROVIDER_CALLBACK_MALFORMED"


async def test_a_malformed_callback_is_400(client: AsyncClient) -> None:
    for body in (
        b"not json",
        b'{"entry": 3}',
        b'{"entry": [{"changes": [{"value": {"statuses": [{}]}}]}]}',
    ):
        answer = await _post_receipt(client, body, whatsapp_signature(body))
        assert answer.status_code == 400, body
        assert error_code(answer) == "PROVIDER_CALLBACK_MALFORMED"
    # An incoming message (no statuses) carries no receipt: answered, nothing done.
    message = json.dumps(
        {"entry": [{"changes": [{"field": "messages", "value": {"messages": [{"id": "x"}]}}]}]}
    ).encode()
    answer = await _post_receipt(client, message, whatsapp_signature(message))
    assert (answer.status_code, answer.json()) == (200, {"results": []})


# -- undeliverable -------------------------------------------------------------------------------


async def _undeliverable_marks(engine: AsyncEngine, tenant: str) -> list[tuple[str, str]]:
    u = s.undeliverable_address
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(u.c.channel, u.c.reason).where(u.c.tenant_id == tenant).order_by(u.c.id)
        )
        return [(r.channel, r.reason) for r in rows]


@pytest.mark.usefixtures("guardians")
async def test_a_failed_receipt_bounces_and_131026_marks_the_number_for_whatsapp_only(
    client: AsyncClient,
    engine: AsyncEngine,
    tenant: str,
    fees: FeeReminders,
    graph: WhatsAppTestServer,
) -> None:
    await fees.send(["asha", "bina"])
    await fees.deliver()
    rows = await delivery_rows(engine, tenant)
    asha, bina = _sent(rows, "5678"), _sent(rows, "0111")

    body = whatsapp_status_webhook(asha["provider_message_id"], "failed", error_code=131026)
    body_2 = whatsapp_status_webhook(bina["provider_message_id"], "failed", error_code=131049)
    for raw in (body, body_2):
        answer = await _post_receipt(client, raw, whatsapp_signature(raw))
        assert answer.json() == {"results": ["bounced"]}, answer.text
    rows = await delivery_rows(engine, tenant)
    assert _sent(rows, "5678")["last_error"] == "WHATSAPP_UNDELIVERED (whatsapp_131026)"
    assert _sent(rows, "0111")["status"] == "bounced"
    # Only 131026 says the number cannot take WhatsApp; 131049 bounced this message alone.
    assert await _undeliverable_marks(engine, tenant) == [
        ("whatsapp", "WHATSAPP_UNDELIVERED (whatsapp_131026)")
    ]

    calls = len(graph.requests)
    await fees.send(["asha", "bina"], dueDate="2027-01-15")
    await fees.deliver()
    assert len(graph.requests) == calls + 1  # Bina only
    latest = (await delivery_rows(engine, tenant))[-2:]
    assert {(r["status"], r["last_error"]) for r in latest} == {
        ("skipped_no_destination", "ADDRESS_UNDELIVERABLE"),
        ("sent", None),
    }


@pytest.mark.usefixtures("guardians")
async def test_undeliverable_at_send_time_is_dead_and_marks_the_number(
    engine: AsyncEngine,
    tenant: str,
    fees: FeeReminders,
    graph: WhatsAppTestServer,
) -> None:
    """131026 in the send's answer: dead at once with the code (no retry), the number marked; the
    Graph API's message, which quotes the number, is in no recorded error or dead letter."""
    graph.reply_with(whatsapp_error(131026, message=f"Message to {ASHA_E164} undeliverable"))
    await fees.send(["asha"])
    await fees.deliver()
    [row] = await delivery_rows(engine, tenant)
    assert row["status"] == "dead"
    assert row["last_error"].startswith("WHATSAPP_UNREACHABLE")
    assert "9812345678" not in row["last_error"]
    assert [c for c, _ in await _undeliverable_marks(engine, tenant)] == ["whatsapp"]


@pytest.mark.usefixtures("guardians")
async def test_retention_ages_the_whatsapp_mark_out_and_the_number_is_tried_again(
    engine: AsyncEngine,
    tenant: str,
    settings: Settings,
    fees: FeeReminders,
    graph: WhatsAppTestServer,
) -> None:
    from herald.maintenance import retention

    graph.reply_with(whatsapp_error(131026))
    await fees.send(["asha"])
    await fees.deliver()
    assert [c for c, _ in await _undeliverable_marks(engine, tenant)] == ["whatsapp"]
    async with engine.begin() as conn:
        await conn.execute(
            s.undeliverable_address.update()
            .where(s.undeliverable_address.c.tenant_id == tenant)
            .values(created_at=func.now() - text("interval '181 days'"))
        )
    aged = settings.model_copy(update={"retention_days": 180})
    report = await retention.prune_undeliverable_addresses(engine, aged, max_batches=None)
    assert report.undeliverable_addresses >= 1
    assert await _undeliverable_marks(engine, tenant) == []

    await fees.send(["asha"], dueDate="2027-02-01")
    await fees.deliver()
    assert (await delivery_rows(engine, tenant))[-1]["status"] == "sent"


@pytest.mark.usefixtures("guardians")
async def test_rate_limits_are_retried_and_re_engagement_is_permanent(
    engine: AsyncEngine,
    tenant: str,
    fees: FeeReminders,
    graph: WhatsAppTestServer,
) -> None:
    graph.reply_with(whatsapp_error(130429, retry_after=30), whatsapp_error(131047))
    await fees.send(["asha", "bina"])
    await fees.deliver()
    outcomes = sorted((r["status"], r["last_error"]) for r in await delivery_rows(engine, tenant))
    assert outcomes[0][0] == "dead"
    assert outcomes[0][1].startswith("WHATSAPP_REENGAGEMENT")
    assert outcomes[1][0] == "failed"
    assert outcomes[1][1].startswith("WHATSAPP_RATE_LIMITED")


# -- preferences, templates, the trace, erasure ------------------------------------------------------


@pytest.mark.usefixtures("guardians")
async def test_a_person_who_switched_whatsapp_off_is_skipped(
    engine: AsyncEngine,
    tenant: str,
    fees: FeeReminders,
    graph: WhatsAppTestServer,
) -> None:
    async with engine.begin() as conn:
        asha = (
            await conn.execute(
                select(s.person.c.id).where(
                    s.person.c.tenant_id == tenant, s.person.c.external_id == "asha"
                )
            )
        ).scalar_one()
        await conn.execute(
            s.notification_channel_preference.insert().values(
                tenant_id=tenant, person_id=asha, channel="whatsapp", enabled=False
            )
        )
    await fees.send(["asha", "bina"])
    await fees.deliver()
    statuses = sorted(r["status"] for r in await delivery_rows(engine, tenant))
    assert statuses == ["sent", "skipped_preference"]
    assert [b["to"] for b in graph.sent()] == ["9779812000111"]


async def test_an_override_keeps_the_approved_parameters_and_is_what_is_stored(
    client: AsyncClient,
    engine: AsyncEngine,
    tenant: str,
    fees: FeeReminders,
    graph: WhatsAppTestServer,
) -> None:
    """A WhatsApp override is the approved template's text: one that drops or adds a parameter
    is refused with its code and nothing is stored; one with the same parameters is previewed,
    published, stored as the rendering, and the message still carries the parameters in the
    template's order."""
    from herald.auth.service import create_api_key

    async with engine.begin() as conn:
        key = await create_api_key(conn, tenant_id=tenant, scopes=["admin", "directory:write"])
    admin = {"Authorization": f"Bearer {key}"}
    base = "/v1/admin/templates"
    wording = {"kind": "fee.reminder", "channel": "whatsapp", "locale": "en"}

    for bad in (
        "{{amount}} is due on {{dueDate}}.",
        "{{amount}} {{studentName}} {{dueDate}} {{name}}",
    ):
        refused = await client.post(base, json={**wording, "body": bad}, headers=admin)
        assert refused.status_code == 400, refused.text
        assert error_code(refused) == "NOTIFICATION_TEMPLATE_WHATSAPP_PARAMETERS"
    titled = await client.post(
        base, json={**wording, "title": "Fee", "body": "{{amount}}"}, headers=admin
    )
    assert error_code(titled) == "NOTIFICATION_TEMPLATE_TITLE_NOT_ALLOWED"
    listed = await client.get(base, params={"kind": "fee.reminder"}, headers=admin)
    assert listed.status_code == 200 and listed.json()["items"] == []
    # The kinds list says which parameters an override must keep, in the template's order.
    kinds = await client.get(f"{base}/kinds", params={"limit": 100}, headers=admin)
    assert kinds.status_code == 200, kinds.text
    [fee] = [k for k in kinds.json()["items"] if k["kind"] == "fee.reminder"]
    channels = {c["channel"]: c for c in fee["channels"]}
    assert channels["whatsapp"]["whatsappTemplate"] == {
        "name": "fee_reminder",
        "language": "en",
        "languages": {"ne": "ne"},
        "parameters": ["amount", "studentName", "dueDate"],
    }
    assert channels["email"]["whatsappTemplate"] is None

    good = "Reminder: {{studentName}} owes {{amount}} by {{dueDate}}."
    preview = await client.post(f"{base}/preview", json={**wording, "body": good}, headers=admin)
    assert preview.status_code == 200, preview.text
    assert preview.json()["body"] == "Reminder: Aarav Shrestha owes NPR 12,500 by 2026-12-15."
    created = await client.post(base, json={**wording, "body": good}, headers=admin)
    assert created.status_code == 201, created.text
    published = await client.post(
        f"{base}/{created.json()['id']}/publish", json={"version": 1}, headers=admin
    )
    assert published.status_code == 200, published.text

    await _guardians(client, admin)
    await fees.send(["asha"])
    await fees.deliver()
    [body] = graph.sent()
    texts = [p["text"] for p in body["template"]["components"][0]["parameters"]]
    assert texts == ["NPR 12,500", "Aarav Shrestha", "2026-12-15"]
    [row] = await delivery_rows(engine, tenant)
    assert row["rendered_body"] == "Reminder: Aarav Shrestha owes NPR 12,500 by 2026-12-15."
    assert row["template_version"] == 2


@pytest.mark.usefixtures("guardians")
async def test_the_trace_names_whatsapp_and_why_a_person_was_skipped(
    client: AsyncClient,
    engine: AsyncEngine,
    tenant: str,
    settings: Settings,
    fees: FeeReminders,
) -> None:
    from tests.integration.test_admin_history import HISTORY_READ, operator_headers

    event_id = await send_event(
        engine,
        tenant,
        kind="fee.reminder",
        audience={"kind": "users", "userIds": ["asha", "chet"]},
        channels=["whatsapp"],
        variables=FEE,
    )
    await run_to_completion(engine, tenant)
    await fees.deliver()
    headers = await operator_headers(engine, settings, tenant, [HISTORY_READ])
    traces = {}
    for who in ("asha", "chet"):
        answer = await client.get(f"/v1/admin/events/{event_id}/recipients/{who}", headers=headers)
        assert answer.status_code == 200, answer.text
        [row] = [d for d in answer.json()["deliveries"] if d["channel"] == "whatsapp"]
        traces[who] = row
    assert traces["asha"]["status"] == "sent"
    assert "WhatsApp" in traces["asha"]["reason"]
    assert traces["chet"]["status"] == "skipped_no_destination"
    assert traces["chet"]["reason"].startswith("No usable phone number on file")


async def test_erasure_leaves_the_number_in_no_table(
    client: AsyncClient,
    engine: AsyncEngine,
    tenant: str,
    auth: Headers,
    fees: FeeReminders,
    graph: WhatsAppTestServer,
) -> None:
    """R-ERASE-1 for WhatsApp: once sent and marked undeliverable, erasing the person leaves the
    number in no table and no hint on the delivery (the mark is a hash)."""
    from tests.integration.test_secrets import tables_containing

    # Unique per test: the table scans below read every tenant's rows.
    digits = str(int(hashlib.sha256(tenant.encode()).hexdigest(), 16))[:8]
    # 984: an NTC mobile prefix, so every hash gives a valid number (98x is not always one).
    phone = f"+977 984-{digits[1:]}"
    answer = await client.put(
        "/v1/people/dina", json={"fullName": "Dina", "phone": phone}, headers=auth
    )
    assert answer.status_code == 201, answer.text
    graph.reply_with(whatsapp_error(131026))
    await fees.send(["dina"])
    await fees.deliver()
    national = f"984{digits[1:]}"
    assert await tables_containing(engine, phone) == ["person.phone"]
    answer = await client.post("/v1/people/dina/erase", headers=auth)
    assert answer.status_code == 200, answer.text
    assert await tables_containing(engine, phone) == []
    assert await tables_containing(engine, national) == []
    [row] = await delivery_rows(engine, tenant)
    assert (row["status"], row["destination_hint"]) == ("dead", None)
