"""Delivery receipts from providers over HTTP (issue 16): Svix-signed Resend events and
X-Twilio-Signature status callbacks move real deliveries, mark hard-bounced addresses, emit the
webhooks, and change nothing when unsigned, forged, unknown, duplicate or out of order."""

from __future__ import annotations

import base64
import json
import os
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import pytest
from httpx import AsyncClient
from sqlalchemy import func, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine
from svix.webhooks import Webhook as SvixWebhook

from herald.channels.base import ProviderOutcome
from herald.config import Settings
from herald.db import schema as s
from herald.receipts.service import twilio_signature
from herald.secrets.vault import Vault
from tests.integration.receipt_helpers import (
    CALLBACK,
    TWILIO,
    guardian_with_sms,
    receipt_settings,
    signed,
)
from tests.integration.test_admin_history import admin_key_headers
from tests.integration.test_delivery import (
    ScriptedProvider,
    deliver,
    delivery_rows,
    email_delivery,
)
from tests.integration.test_fanout import ANNOUNCE, run_to_completion, send_event
from tests.providers.servers import TWILIO_TOKEN

RESEND = "/v1/providers/resend/events"
RESEND_SECRET = "whsec_" + base64.b64encode(os.urandom(24)).decode()


@pytest.fixture
def settings(settings: Settings, tmp_path: Any) -> Settings:
    return receipt_settings(settings, tmp_path, resend_webhook_secret=RESEND_SECRET)


def resend_request(
    kind: str, email_id: str, *, secret: str = RESEND_SECRET, **data: Any
) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(
        {"type": kind, "created_at": "2026-12-01T10:00:00Z", "data": {"email_id": email_id, **data}}
    )
    msg_id = f"msg_{uuid.uuid4().hex}"
    now = datetime.now(UTC)
    headers = {
        "svix-id": msg_id,
        "svix-timestamp": str(int(now.timestamp())),
        "svix-signature": SvixWebhook(secret).sign(msg_id, now, body),
        "content-type": "application/json",
    }
    return body.encode(), headers


async def post_resend(client: AsyncClient, kind: str, email_id: str, **data: Any) -> Any:
    body, headers = resend_request(kind, email_id, **data)
    return await client.post(RESEND, content=body, headers=headers)


async def sent_email(
    engine: AsyncEngine, tenant: str, vault: Vault, settings: Settings, message_id: str
) -> dict[str, Any]:
    await email_delivery(engine, tenant)
    await deliver(
        engine, ScriptedProvider("email", ProviderOutcome.sent(message_id)), vault, settings, tenant
    )()
    [row] = await delivery_rows(engine, tenant)
    assert row["status"] == "sent" and row["provider_message_id"] == message_id
    return row


async def one_more_email(
    engine: AsyncEngine, tenant: str, vault: Vault, settings: Settings, title: str
) -> dict[str, Any]:
    await send_event(engine, tenant, channels=["email"], variables={**ANNOUNCE, "title": title})
    await run_to_completion(engine, tenant)
    await deliver(engine, ScriptedProvider("email"), vault, settings, tenant)()
    return (await delivery_rows(engine, tenant))[-1]


async def sent_sms(
    engine: AsyncEngine,
    tenant: str,
    vault: Vault,
    settings: Settings,
    *,
    phone: str = "+977 984-1000001",
    setup: bool = True,
) -> str:
    """A guardian with a phone who opted in to SMS announcements gets one, sent; its SID."""
    if setup:
        await guardian_with_sms(engine, tenant, phone)
    sid = f"SM{uuid.uuid4().hex}"
    # A title of its own: the same event twice would be one event (its dedupe key).
    await send_event(engine, tenant, channels=["sms"], variables={**ANNOUNCE, "title": sid})
    await run_to_completion(engine, tenant)
    await deliver(
        engine, ScriptedProvider("sms", ProviderOutcome.sent(sid)), vault, settings, tenant
    )()
    return sid


async def post_twilio(client: AsyncClient, params: list[tuple[str, str]]) -> Any:
    return await client.post(TWILIO, **signed(params))


async def webhook_types(engine: AsyncEngine, tenant: str) -> list[str]:
    m = s.webhook_message
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(m.c.event_type, m.c.payload).where(m.c.tenant_id == tenant).order_by(m.c.id)
        )
        return [row.event_type for row in rows]


async def test_resend_delivered_then_duplicate_and_late_bounce_change_nothing(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str, vault: Vault
) -> None:
    headers = await admin_key_headers(engine, tenant)
    created = await client.post(
        "/v1/admin/webhooks",
        json={"url": "http://127.0.0.1:9/x", "eventTypes": ["delivery.delivered"]},
        headers=headers,
    )
    assert created.status_code == 201
    email_id = f"re_{uuid.uuid4().hex}"
    await sent_email(engine, tenant, vault, settings, email_id)

    answer = await post_resend(client, "email.delivered", email_id)
    assert answer.status_code == 200 and answer.json() == {"result": "delivered"}
    [row] = await delivery_rows(engine, tenant)
    assert row["status"] == "delivered" and row["delivered_at"] is not None
    assert await webhook_types(engine, tenant) == ["delivery.delivered"]

    again = await post_resend(client, "email.delivered", email_id)
    late = await post_resend(client, "email.bounced", email_id, bounce={"type": "Permanent"})
    unknown = await post_resend(client, "email.delivered", "re_nobody")
    assert [r.json()["result"] for r in (again, late, unknown)] == ["ignored"] * 3
    [still] = await delivery_rows(engine, tenant)
    assert still["status"] == "delivered" and still["bounced_at"] is None
    assert await webhook_types(engine, tenant) == ["delivery.delivered"]


async def test_resend_hard_bounce_skips_the_address_until_it_changes(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str, vault: Vault
) -> None:
    email_id = f"re_{uuid.uuid4().hex}"
    await sent_email(engine, tenant, vault, settings, email_id)
    answer = await post_resend(
        client,
        "email.bounced",
        email_id,
        bounce={"type": "Permanent", "subType": "Suppressed", "message": "parent@example.com"},
    )
    assert answer.json() == {"result": "bounced"}
    [row] = await delivery_rows(engine, tenant)
    assert row["status"] == "bounced" and row["bounced_at"] is not None
    assert row["last_error"] == "EMAIL_BOUNCED (Suppressed)"
    async with engine.connect() as conn:
        marks = (
            await conn.execute(
                select(s.undeliverable_address).where(s.undeliverable_address.c.tenant_id == tenant)
            )
        ).all()
    assert len(marks) == 1 and "example.com" not in json.dumps([str(v) for v in marks[0]])

    skipped = await one_more_email(engine, tenant, vault, settings, "Second notice")
    assert skipped["status"] == "skipped_no_destination"
    assert skipped["last_error"] == "ADDRESS_UNDELIVERABLE"

    async with engine.begin() as conn:
        await conn.execute(
            update(s.person)
            .where(s.person.c.tenant_id == tenant, s.person.c.external_id == "g0")
            .values(email="parent.new@example.com")
        )
    sent = await one_more_email(engine, tenant, vault, settings, "Third notice")
    assert sent["status"] == "sent"


async def test_unsigned_and_forged_callbacks_are_401_and_change_nothing(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str, vault: Vault
) -> None:
    email_id = f"re_{uuid.uuid4().hex}"
    await sent_email(engine, tenant, vault, settings, email_id)
    body, headers = resend_request("email.delivered", email_id)
    unsigned = await client.post(RESEND, content=body, headers={"content-type": "application/json"})
    forged_body, forged_headers = resend_request(
        "email.delivered", email_id, secret="whsec_" + base64.b64encode(b"x" * 24).decode()
    )
    forged = await client.post(RESEND, content=forged_body, headers=forged_headers)
    tampered = await client.post(
        RESEND, content=body.replace(b"delivered", b"bounced"), headers=headers
    )
    for answer in (unsigned, forged, tampered):
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "PROVIDER_SIGNATURE_INVALID"
    [row] = await delivery_rows(engine, tenant)
    assert row["status"] == "sent"


async def test_twilio_undelivered_is_bounced_with_the_code(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str, vault: Vault
) -> None:
    sid = await sent_sms(engine, tenant, vault, settings)
    params = [("MessageSid", sid), ("MessageStatus", "undelivered"), ("ErrorCode", "30008")]
    form = urlencode(params)
    content = {"content-type": "application/x-www-form-urlencoded"}

    unsigned = await client.post(TWILIO, content=form, headers=content)
    forged = await client.post(
        TWILIO, content=form, headers={**content, "x-twilio-signature": "bm90IGl0"}
    )
    assert unsigned.status_code == 401 and forged.status_code == 401
    assert (await delivery_rows(engine, tenant))[0]["status"] == "sent"

    signature = twilio_signature(TWILIO_TOKEN, CALLBACK, params)
    answer = await client.post(
        TWILIO, content=form, headers={**content, "x-twilio-signature": signature}
    )
    assert answer.status_code == 200 and answer.json() == {"result": "bounced"}
    [row] = await delivery_rows(engine, tenant)
    assert row["status"] == "bounced" and row["last_error"] == "SMS_UNDELIVERED (twilio_30008)"
    async with engine.connect() as conn:
        marks = await conn.execute(
            select(s.undeliverable_address).where(s.undeliverable_address.c.tenant_id == tenant)
        )
        assert marks.all() == []  # 30008 (unknown error) bounces this message only


async def test_a_receipt_never_crosses_tenants(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str, vault: Vault
) -> None:
    """The same provider id in two tenants is ambiguous: neither row moves."""
    email_id = f"re_{uuid.uuid4().hex}"
    await sent_email(engine, tenant, vault, settings, email_id)
    other = f"{tenant}-b"
    await sent_email(engine, other, vault, settings, email_id)
    answer = await post_resend(client, "email.delivered", email_id)
    assert answer.json() == {"result": "ignored"}
    assert (await delivery_rows(engine, tenant))[0]["status"] == "sent"
    assert (await delivery_rows(engine, other))[0]["status"] == "sent"


async def test_erasure_forgets_the_undeliverable_mark(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str, vault: Vault
) -> None:
    """The hash of a known address identifies it: erasing the person deletes the mark."""
    from herald.directory import service as directory

    email_id = f"re_{uuid.uuid4().hex}"
    await sent_email(engine, tenant, vault, settings, email_id)
    await post_resend(client, "email.bounced", email_id, bounce={"type": "Permanent"})
    u = s.undeliverable_address
    count = select(func.count()).select_from(u).where(u.c.tenant_id == tenant)
    async with engine.connect() as conn:
        assert (await conn.execute(count)).scalar_one() == 1
    async with engine.begin() as conn:
        await directory.erase_person(conn, tenant, "g0")
    async with engine.connect() as conn:
        assert (await conn.execute(count)).scalar_one() == 0


async def test_a_receipt_ahead_of_the_recorder_is_refused_for_a_retry(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str, vault: Vault
) -> None:
    """The provider answered, its receipt arrived, the outcome is not written yet: 409, so Svix
    sends it again, and nothing changes meanwhile."""
    email_id = f"re_{uuid.uuid4().hex}"
    row = await sent_email(engine, tenant, vault, settings, email_id)
    d, q = s.notification_delivery, s.notification_delivery_queue
    async with engine.begin() as conn:  # claimed again: queued, its queue row holding a claim
        await conn.execute(update(d).where(d.c.id == row["id"]).values(status="queued"))
        await conn.execute(
            q.insert().values(
                delivery_id=row["id"],
                tenant_id=tenant,
                channel="email",
                occurred_at=row["occurred_at"],
                claimed_at=func.now(),
                lease_expires_at=func.now() + text("interval '1 minute'"),
            )
        )
    answer = await post_resend(client, "email.delivered", email_id)
    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "PROVIDER_RECEIPT_EARLY"
    assert (await delivery_rows(engine, tenant))[0]["status"] == "queued"
    async with engine.connect() as conn:
        claim = select(q.c.claimed_at).where(q.c.delivery_id == row["id"])
        assert (await conn.execute(claim)).scalar_one() is not None


async def set_phone(engine: AsyncEngine, tenant: str, phone: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            update(s.person)
            .where(s.person.c.tenant_id == tenant, s.person.c.external_id == "g0")
            .values(phone=phone)
        )


async def sms_marks(engine: AsyncEngine, tenant: str) -> list[Any]:
    u = s.undeliverable_address
    async with engine.connect() as conn:
        found = await conn.execute(
            select(u.c.channel, u.c.address_hash, u.c.reason).where(u.c.tenant_id == tenant)
        )
        return list(found.all())


@pytest.mark.parametrize("code", ["30005", "30006", "21610"])
async def test_twilio_permanent_error_skips_the_number_until_it_changes(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    vault: Vault,
    code: str,
) -> None:
    """A number Twilio says cannot take SMS (unknown, a landline, opted out) is marked, as a hard
    email bounce marks an address: the next SMS to it is skipped_no_destination with
    ADDRESS_UNDELIVERABLE; once the host stores another number it is sent; erasing the person
    forgets the mark. Only a hash is kept."""
    from herald.directory import service as directory

    sid = await sent_sms(engine, tenant, vault, settings)
    params = [("MessageSid", sid), ("MessageStatus", "undelivered"), ("ErrorCode", code)]
    answer = await post_twilio(client, params)
    assert answer.json() == {"result": "bounced"}
    [mark] = await sms_marks(engine, tenant)
    assert mark.channel == "sms" and mark.reason == f"SMS_UNDELIVERED (twilio_{code})"
    assert "9841000001" not in json.dumps([str(v) for v in mark])

    await sent_sms(engine, tenant, vault, settings, setup=False)
    skipped = (await delivery_rows(engine, tenant))[-1]
    assert skipped["status"] == "skipped_no_destination"
    assert skipped["last_error"] == "ADDRESS_UNDELIVERABLE"

    await set_phone(engine, tenant, "+9779841000001")  # the same number, written differently
    await sent_sms(engine, tenant, vault, settings, setup=False)
    assert (await delivery_rows(engine, tenant))[-1]["status"] == "skipped_no_destination"

    await set_phone(engine, tenant, "+9779841000002")
    await sent_sms(engine, tenant, vault, settings, setup=False)
    assert (await delivery_rows(engine, tenant))[-1]["status"] == "sent"

    await set_phone(engine, tenant, "+977-9841000001")  # back to the marked number, then erased
    async with engine.begin() as conn:
        await directory.erase_person(conn, tenant, "g0")
    assert await sms_marks(engine, tenant) == []
