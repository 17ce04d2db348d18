"""Twilio status callbacks that arrive before Herald has recorded the send (issue 44).

A fast provider posts its callback while the recorder is still writing the message id; Twilio
posts it once. The real Twilio provider sends through the local Twilio server
(tests/providers/servers.py) and, before its answer reaches the recorder, the signed callback is
posted to Herald's route: it is kept (202), applied once by the recorder's transaction, and its
row deleted. A hard failure marks the number; changing the number clears it; soft failures and
bad input mark and keep nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from httpx import AsyncClient
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.channels.base import Message, ProviderOutcome
from herald.channels.twilio import TwilioSmsProvider
from herald.config import Settings
from herald.db import schema as s
from herald.db import tenancy
from herald.directory import service as directory
from herald.directory.schemas import PersonInput
from herald.maintenance import retention
from herald.receipts import service as receipts
from herald.secrets.vault import Vault
from tests.integration.receipt_helpers import (
    CALLBACK,
    TWILIO,
    guardian_with_sms,
    receipt_settings,
    signed,
)
from tests.integration.test_admin_history import admin_key_headers
from tests.integration.test_delivery import deliver, delivery_rows
from tests.integration.test_fanout import ANNOUNCE, run_to_completion, send_event
from tests.providers.servers import (
    TWILIO_FROM,
    TWILIO_SID,
    TwilioReply,
    TwilioRequest,
    twilio_server,
)


@pytest.fixture
def twilio() -> Any:
    with twilio_server() as server:
        yield server


@pytest.fixture
def settings(settings: Settings, twilio: Any, tmp_path: Any) -> Settings:
    return receipt_settings(
        settings,
        tmp_path,
        twilio_account_sid=TWILIO_SID,
        twilio_from=TWILIO_FROM,
        twilio_base_url=twilio.url,
    )


def status(sid: str, word: str, error: str | None = None) -> list[tuple[str, str]]:
    params = [("MessageSid", sid), ("MessageStatus", word), ("AccountSid", TWILIO_SID)]
    return params + ([("ErrorCode", error)] if error else [])


class CallbackFirst:
    """The real Twilio provider, whose status callback reaches Herald before its answer reaches
    the recorder: after Twilio's 201 (with a SID of this test's own), each callback of `script` is
    posted to the route, and the answers and the state Herald was in are kept."""

    channel = "sms"
    name = "twilio"
    is_mock = False

    def __init__(
        self,
        inner: TwilioSmsProvider,
        twilio: Any,
        client: AsyncClient,
        engine: AsyncEngine,
        *script: tuple[str, str | None],
    ) -> None:
        self.inner, self.twilio, self.client, self.engine = inner, twilio, client, engine
        self.script = script
        self.sids: list[str] = []
        self.answers: list[Any] = []
        self.kept_meanwhile: list[int] = []
        self.statuses_meanwhile: list[str] = []

    def is_configured(self) -> bool:
        return self.inner.is_configured()

    async def send(self, message: Message) -> ProviderOutcome:
        sid = f"SM{uuid.uuid4().hex}"
        self.sids.append(sid)

        def created(request: TwilioRequest) -> dict[str, Any]:
            return {"sid": sid, "status": "queued", "to": request.field("To")}

        self.twilio.reply_with(TwilioReply(status=201, body=created))
        outcome = await self.inner.send(message)
        assert outcome.provider_message_id == sid
        for word, error in self.script:
            self.answers.append(await self.client.post(TWILIO, **signed(status(sid, word, error))))
        self.kept_meanwhile.append(await kept(self.engine, sid))
        async with self.engine.connect() as conn:
            d = s.notification_delivery
            row = (
                await conn.execute(select(d.c.status).where(d.c.provider_message_id == sid))
            ).first()
        self.statuses_meanwhile.append(row.status if row else "no delivery carries the id")
        return outcome

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
async def real_twilio(settings: Settings) -> AsyncIterator[TwilioSmsProvider]:
    provider = TwilioSmsProvider(settings)
    yield provider
    await provider.aclose()


async def kept(engine: AsyncEngine, sid: str | None = None) -> int:
    p = s.pending_receipt
    query = select(func.count()).select_from(p)
    if sid is not None:
        query = query.where(p.c.provider_message_id == sid)
    async with engine.connect() as conn:
        return int((await conn.execute(query)).scalar_one())


async def one_sms(
    engine: AsyncEngine, tenant: str, provider: Any, vault: Vault, settings: Settings
) -> dict[str, Any]:
    """One more announcement over SMS, fanned out and delivered through `provider`; its row."""
    await send_event(
        engine, tenant, channels=["sms"], variables={**ANNOUNCE, "title": uuid.uuid4().hex}
    )
    await run_to_completion(engine, tenant)
    await deliver(engine, provider, vault, settings, tenant)()
    return (await delivery_rows(engine, tenant))[-1]


async def person_deliveries(client: AsyncClient, engine: AsyncEngine, tenant: str) -> Any:
    answer = await client.get(
        "/v1/admin/people/g0/deliveries", headers=await admin_key_headers(engine, tenant)
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["items"]


async def webhook_types(engine: AsyncEngine, tenant: str) -> list[str]:
    m = s.webhook_message
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(m.c.event_type).where(m.c.tenant_id == tenant).order_by(m.c.id)
        )
        return [row.event_type for row in rows]


async def sms_marks(engine: AsyncEngine, tenant: str) -> list[Any]:
    u = s.undeliverable_address
    async with engine.connect() as conn:
        found = await conn.execute(select(u.c.reason).where(u.c.tenant_id == tenant))
        return [row.reason for row in found]


async def test_an_early_callback_is_kept_then_applied_once_by_the_recorder(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    vault: Vault,
    twilio: Any,
    real_twilio: TwilioSmsProvider,
) -> None:
    """Issue 44: `delivered` posted twice before the send is recorded is answered 202 and kept as
    one row (no delivery carries the SID yet); the recorder's write applies it — the delivery is
    `delivered` in the person's history, with one delivery.delivered webhook — and deletes it.
    The same callback once more changes nothing."""
    headers = await admin_key_headers(engine, tenant)
    created = await client.post(
        "/v1/admin/webhooks",
        json={"url": "http://127.0.0.1:9/x", "eventTypes": ["delivery.delivered"]},
        headers=headers,
    )
    assert created.status_code == 201
    await guardian_with_sms(engine, tenant)
    provider = CallbackFirst(
        real_twilio, twilio, client, engine, ("delivered", None), ("delivered", None)
    )

    row = await one_sms(engine, tenant, provider, vault, settings)

    [sid] = provider.sids
    assert [a.status_code for a in provider.answers] == [202, 202]
    assert [a.json() for a in provider.answers] == [{"result": "pending"}] * 2
    assert provider.kept_meanwhile == [1]  # the duplicate added nothing
    assert provider.statuses_meanwhile == ["no delivery carries the id"]
    assert twilio.requests[-1].field("StatusCallback") == CALLBACK

    assert row["provider_message_id"] == sid
    assert row["status"] == "delivered" and row["delivered_at"] is not None
    assert await kept(engine, sid) == 0
    [item] = await person_deliveries(client, engine, tenant)
    assert item["channel"] == "sms" and item["status"] == "delivered"
    assert await webhook_types(engine, tenant) == ["delivery.delivered"]

    again = await client.post(TWILIO, **signed(status(sid, "delivered")))
    assert again.status_code == 200 and again.json() == {"result": "ignored"}
    assert await kept(engine, sid) == 0
    assert (await delivery_rows(engine, tenant))[-1]["status"] == "delivered"
    assert await webhook_types(engine, tenant) == ["delivery.delivered"]


@dataclass
class GuardianTexts:
    """SMS to the guardian through the real Twilio provider, fanned out and delivered by the
    worker, with Twilio's callbacks posted before the send is recorded."""

    client: AsyncClient
    engine: AsyncEngine
    tenant: str
    vault: Vault
    settings: Settings
    twilio: Any
    provider: TwilioSmsProvider

    def callback_first(self, *script: tuple[str, str | None]) -> CallbackFirst:
        return CallbackFirst(self.provider, self.twilio, self.client, self.engine, *script)

    async def send(self, provider: CallbackFirst) -> dict[str, Any]:
        return await one_sms(self.engine, self.tenant, provider, self.vault, self.settings)

    async def bounced_early(self, word: str, code: str) -> None:
        """An SMS answered `word` with `code` before its send is recorded: the callback is kept
        (202), and the recorder applies it — the delivery bounced with the code — and deletes it."""
        early = self.callback_first((word, code))
        row = await self.send(early)
        assert [a.status_code for a in early.answers] == [202]
        assert row["status"] == "bounced"
        assert row["last_error"] == f"SMS_UNDELIVERED (twilio_{code})"
        assert await kept(self.engine, early.sids[0]) == 0


@pytest.fixture
async def texts(
    client: AsyncClient,
    engine: AsyncEngine,
    tenant: str,
    vault: Vault,
    settings: Settings,
    twilio: Any,
    real_twilio: TwilioSmsProvider,
) -> GuardianTexts:
    await guardian_with_sms(engine, tenant)
    return GuardianTexts(client, engine, tenant, vault, settings, twilio, real_twilio)


@pytest.mark.parametrize("code", ["30003", "30005", "30006"])
async def test_an_early_hard_failure_marks_the_number_until_it_changes(
    client: AsyncClient,
    engine: AsyncEngine,
    tenant: str,
    twilio: Any,
    texts: GuardianTexts,
    code: str,
) -> None:
    """Issue 44: an `undelivered` with a code that says the number cannot take SMS, kept before
    the send was recorded, bounces the delivery with the code and marks the number when the
    recorder applies it; the next SMS is skipped_no_destination with ADDRESS_UNDELIVERABLE in the
    person's history; after a directory update gives the person another number, SMS is sent."""
    await texts.bounced_early("undelivered", code)
    assert await sms_marks(engine, tenant) == [f"SMS_UNDELIVERED (twilio_{code})"]

    plain = texts.callback_first()
    skipped = await texts.send(plain)
    assert skipped["status"] == "skipped_no_destination"
    assert skipped["last_error"] == "ADDRESS_UNDELIVERABLE"
    assert len(plain.sids) == 0  # Twilio was not called
    newest = (await person_deliveries(client, engine, tenant))[0]
    assert newest["status"] == "skipped_no_destination"
    assert newest["errorCode"] == "ADDRESS_UNDELIVERABLE"

    async with engine.begin() as conn:
        await directory.upsert_person(
            conn, tenant, "g0", PersonInput(full_name="g0", phone="+9779841000002")
        )
    sent = await texts.send(plain)
    assert sent["status"] == "sent" and len(plain.sids) == 1
    assert twilio.requests[-1].field("To") == "+9779841000002"


@pytest.mark.parametrize("code", ["30001", "30007", "30008"])
async def test_an_early_soft_failure_bounces_the_message_only(
    engine: AsyncEngine, tenant: str, texts: GuardianTexts, code: str
) -> None:
    """Issue 44: queue overflow (30001), carrier filtering (30007) and an unknown error (30008)
    bounce this message, kept and applied like any early receipt, but mark
    nothing: the next SMS to the number is sent."""
    await texts.bounced_early("failed", code)
    assert await sms_marks(engine, tenant) == []
    assert (await texts.send(texts.callback_first()))["status"] == "sent"


async def test_bad_callbacks_are_refused_and_keep_nothing(
    client: AsyncClient, engine: AsyncEngine
) -> None:
    """Issue 44: a callback naming no delivery is kept only once verified and well formed: no
    MessageSid or no MessageStatus is 400 PROVIDER_CALLBACK_MALFORMED, an unsigned or forged one
    401 PROVIDER_SIGNATURE_INVALID, and a status Herald does not act on (queued, sent) is 200
    ignored — none of them leaves a row."""
    sid = f"SM{uuid.uuid4().hex}"
    before = await kept(engine)
    for params in ([("MessageStatus", "delivered")], [("MessageSid", sid)]):
        answer = await client.post(TWILIO, **signed(params))
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["code"] == "PROVIDER_CALLBACK_MALFORMED"
    forged = await client.post(TWILIO, **signed(status(sid, "delivered"), token="not-the-token"))
    unsigned = await client.post(
        TWILIO,
        content=urlencode(status(sid, "delivered")),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    for answer in (forged, unsigned):
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "PROVIDER_SIGNATURE_INVALID"
    for word in ("queued", "sent"):
        answer = await client.post(TWILIO, **signed(status(sid, word)))
        assert answer.status_code == 200 and answer.json() == {"result": "ignored"}
    assert await kept(engine) == before


async def test_a_receipt_no_send_claims_is_pruned_after_a_day(
    client: AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    """Issue 44: a kept receipt whose message id no recorded send carried is deleted by retention
    once it is PENDING_RECEIPT_DAYS old; a fresh one stays."""
    old, fresh = f"SM{uuid.uuid4().hex}", f"SM{uuid.uuid4().hex}"
    for sid in (old, fresh):
        answer = await client.post(TWILIO, **signed(status(sid, "delivered")))
        assert answer.status_code == 202
    p = s.pending_receipt
    async with engine.begin() as conn:
        await conn.execute(
            update(p)
            .where(p.c.provider_message_id == old)
            .values(
                received_at=func.now() - timedelta(days=retention.PENDING_RECEIPT_DAYS, hours=1)
            )
        )
    report = await retention.prune_pending_receipts(engine, settings, max_batches=None)
    assert report.pending_receipts >= 1
    assert await kept(engine, old) == 0 and await kept(engine, fresh) == 1


async def test_a_callback_racing_the_recorders_commit_is_applied_not_kept(
    client: AsyncClient, engine: AsyncEngine, tenant: str
) -> None:
    """Issue 44: the recorder has written the SID and looked for kept receipts (none), but not
    committed, when the callback comes. The route waits for the recorder's lock on the SID, then
    sees the committed delivery and moves it itself: the receipt is neither kept for a recorder
    that has already looked, nor lost."""
    await guardian_with_sms(engine, tenant)
    await send_event(engine, tenant, channels=["sms"], variables=ANNOUNCE)
    await run_to_completion(engine, tenant)
    [queued] = await delivery_rows(engine, tenant)
    sid = f"SM{uuid.uuid4().hex}"
    d = s.notification_delivery
    async with engine.begin() as conn:  # the recorder's transaction, as far as receipts go
        await tenancy.enter_tenant(conn, tenant)
        await conn.execute(
            update(d)
            .where(d.c.id == queued["id"])
            .values(status="sent", sent_at=func.now(), provider_message_id=sid)
        )
        assert await receipts.apply_parked(conn, tenant, "sms", {sid: queued["id"]}) == 0
        callback = asyncio.create_task(client.post(TWILIO, **signed(status(sid, "delivered"))))
        await asyncio.sleep(0.5)
        assert not callback.done()  # waiting for the recorder's commit
    answer = await callback
    assert answer.status_code == 200 and answer.json() == {"result": "delivered"}
    assert await kept(engine, sid) == 0
    assert (await delivery_rows(engine, tenant))[0]["status"] == "delivered"
