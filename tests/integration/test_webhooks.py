"""Outbound webhooks to the host (issue 16), end to end against a real local HTTP server that
verifies every request with the `standardwebhooks` package, as a host would.

Endpoints are managed over HTTP (/v1/admin/webhooks); messages are written by the real pipeline
(fan-out completion, the recorder) and sent by the real sender (herald.webhooks.worker).
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from cryptography.fernet import Fernet
from httpx import AsyncClient
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine
from standardwebhooks import Webhook, WebhookVerificationError
from typing_extensions import override

from herald.channels.base import ProviderOutcome
from herald.config import Settings
from herald.db import schema as s
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.secrets.vault import Vault
from herald.webhooks import worker as webhooks
from tests import seed
from tests.integration.test_admin_history import admin_key_headers, operator_headers
from tests.integration.test_delivery import ScriptedProvider, deliver, email_delivery
from tests.integration.test_fanout import send_event

BASE = "/v1/admin/webhooks"


@pytest.fixture
def settings(settings: Settings, tmp_path: Any) -> Settings:
    return settings.model_copy(
        update={
            "webhook_allow_loopback": True,
            "vault_key": Fernet.generate_key().decode(),
            "data_dir": tmp_path,
            "max_attempts": 3,
            "retry_base_seconds": 30,
            "webhook_max_attempts": 4,
        }
    )


@dataclass
class Receiver:
    """The host's endpoint: verifies every request, fails the first `fail_first` with 500."""

    secret: str = ""
    fail_first: int = 0
    always_fail: bool = False
    requests: int = 0
    unverified: list[str] = field(default_factory=list)
    # webhook-id → payloads answered 200
    accepted: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0
    # Set once `expect` distinct messages were accepted.
    expect: int = 0
    arrived: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/herald"

    def answer(self, body: bytes, headers: dict[str, str]) -> int:
        with self.lock:
            self.requests += 1
            try:
                payload = Webhook(self.secret).verify(body, headers)
            except WebhookVerificationError as exc:
                self.unverified.append(str(exc))
                return 400
            if self.always_fail or self.requests <= self.fail_first:
                return 500
            self.accepted.setdefault(headers["webhook-id"], []).append(payload)
            if self.expect and len(self.accepted) >= self.expect:
                self.arrived.set()
            return 200


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            code = state.answer(body, {k: v for k, v in self.headers.items()})
            self.send_response(code)
            self.send_header("content-length", "0")
            self.end_headers()

        @override
        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


async def create_endpoint(
    client: AsyncClient, headers: dict[str, str], url: str, event_types: list[str]
) -> dict[str, Any]:
    response = await client.post(
        BASE, json={"url": url, "eventTypes": event_types}, headers=headers
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def messages(engine: AsyncEngine, tenant: str) -> list[dict[str, Any]]:
    m = s.webhook_message
    async with engine.connect() as conn:
        rows = await conn.execute(select(m).where(m.c.tenant_id == tenant).order_by(m.c.id))
        return [dict(r._mapping) for r in rows]


async def make_due(engine: AsyncEngine, tenant: str) -> None:
    m = s.webhook_message
    async with engine.begin() as conn:
        await conn.execute(
            update(m)
            .where(m.c.tenant_id == tenant, m.c.status == "queued")
            .values(next_attempt_at=func.now() - timedelta(seconds=1))
        )


async def send_until_settled(
    engine: AsyncEngine, settings: Settings, tenant: str, *, rounds: int = 10
) -> None:
    """Run the sender, making backed-off messages due, until none is queued."""
    async with webhooks.build_client(settings) as http:
        for _ in range(rounds):
            await webhooks.drain(engine, settings, http, tenant_id=tenant)
            if not any(m["status"] == "queued" for m in await messages(engine, tenant)):
                return
            await make_due(engine, tenant)


async def test_every_message_arrives_once_per_id_through_failures(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    vault: Vault,
    receiver: Receiver,
) -> None:
    """A host answering 500 for a while then 200 gets every message in the end, once per id,
    each verified by standardwebhooks; payloads carry ids and statuses, never content or the
    address; retries keep the same webhook-id."""
    headers = await admin_key_headers(engine, tenant)
    created = await create_endpoint(
        client, headers, receiver.url, ["event.completed", "delivery.sent"]
    )
    assert created["secret"].startswith("whsec_")
    receiver.secret = created["secret"]
    receiver.fail_first = 3

    row = await email_delivery(engine, tenant)  # the fan-out completes: event.completed
    provider = ScriptedProvider("email")
    assert await deliver(engine, provider, vault, settings, tenant)() == 1  # delivery.sent

    written = await messages(engine, tenant)
    assert sorted(m["event_type"] for m in written) == ["delivery.sent", "event.completed"]
    await send_until_settled(engine, settings, tenant)

    assert receiver.unverified == []
    assert receiver.requests == 3 + 2  # three refusals, then each message once
    assert set(receiver.accepted) == {str(m["public_id"]) for m in written}
    assert all(len(copies) == 1 for copies in receiver.accepted.values())
    done = await messages(engine, tenant)
    assert all(m["status"] == "sent" and m["response_status"] == 200 for m in done)
    assert sum(m["attempts"] for m in done) == 5

    payloads = {p["type"]: p for [p] in receiver.accepted.values()}
    sent = payloads["delivery.sent"]["data"]
    assert sent["deliveryId"] == str(row["public_id"])
    assert sent["status"] == "sent" and sent["channel"] == "email"
    assert payloads["event.completed"]["data"]["recipientCount"] == 1
    text = json.dumps(payloads)
    assert "parent@example.com" not in text and "Sports day" not in text


async def test_dead_then_replayed_under_the_same_id(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    vault: Vault,
    receiver: Receiver,
) -> None:
    """A host down longer than the attempts: the message dies with a dead letter on the admin
    screen; replayed, it arrives under the same webhook-id."""
    headers = await admin_key_headers(engine, tenant)
    created = await create_endpoint(client, headers, receiver.url, ["delivery.dead"])
    receiver.secret, receiver.always_fail = created["secret"], True
    await email_delivery(engine, tenant)
    provider = ScriptedProvider("email", ProviderOutcome.failure("EMAIL_REJECTED", retryable=False))
    await deliver(engine, provider, vault, settings, tenant)()
    [message] = await messages(engine, tenant)
    assert message["event_type"] == "delivery.dead"

    await send_until_settled(engine, settings, tenant)
    [dead] = await messages(engine, tenant)
    assert dead["status"] == "dead" and dead["attempts"] == settings.webhook_max_attempts
    assert dead["last_error"] == "WEBHOOK_HTTP_500"
    listed = (await client.get("/v1/admin/dead-letters", headers=headers)).json()["items"]
    [letter] = [item for item in listed if item["queueName"] == "webhook"]
    assert letter["deliveryId"] == str(message["public_id"])

    receiver.always_fail = False
    replay = await client.post(f"/v1/admin/dead-letters/{letter['id']}/replay", headers=headers)
    assert replay.status_code == 201, replay.text
    assert replay.json()["deliveryId"] == str(message["public_id"])
    again = await client.post(f"/v1/admin/dead-letters/{letter['id']}/replay", headers=headers)
    assert again.status_code == 409
    await send_until_settled(engine, settings, tenant)
    assert list(receiver.accepted) == [str(message["public_id"])]
    assert receiver.unverified == []


async def test_no_endpoint_writes_nothing(
    engine: AsyncEngine, settings: Settings, tenant: str, vault: Vault
) -> None:
    """A tenant without endpoints: the outbox inserts nothing anywhere in the pipeline."""
    await email_delivery(engine, tenant)
    await deliver(engine, ScriptedProvider("email"), vault, settings, tenant)()
    assert await messages(engine, tenant) == []


async def test_unsubscribed_and_disabled_endpoints_get_nothing(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    vault: Vault,
    receiver: Receiver,
) -> None:
    headers = await admin_key_headers(engine, tenant)
    await create_endpoint(client, headers, receiver.url, ["broadcast.completed"])
    disabled = await create_endpoint(client, headers, receiver.url, ["delivery.sent"])
    patched = await client.patch(
        f"{BASE}/{disabled['id']}", json={"enabled": False}, headers=headers
    )
    assert patched.status_code == 200 and patched.json()["enabled"] is False
    await email_delivery(engine, tenant)
    await deliver(engine, ScriptedProvider("email"), vault, settings, tenant)()
    assert await messages(engine, tenant) == []


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("https://10.0.0.7/hook", "WEBHOOK_URL_FORBIDDEN"),
        ("https://192.168.1.1/hook", "WEBHOOK_URL_FORBIDDEN"),
        ("https://169.254.169.254/latest/meta-data", "WEBHOOK_URL_FORBIDDEN"),
        ("https://[fd00:ec2::254]/", "WEBHOOK_URL_FORBIDDEN"),
        ("https://[::ffff:10.0.0.1]/", "WEBHOOK_URL_FORBIDDEN"),
        ("https://100.64.0.1/", "WEBHOOK_URL_FORBIDDEN"),
        ("https://0.0.0.0/", "WEBHOOK_URL_FORBIDDEN"),
        ("http://93.184.215.14/hook", "WEBHOOK_URL_INVALID"),
        ("ftp://93.184.215.14/hook", "REQUEST_MALFORMED"),
        ("https://user:pw@93.184.215.14/hook", "WEBHOOK_URL_INVALID"),
        ("not a url", "REQUEST_MALFORMED"),
        ("https://[::1/", "WEBHOOK_URL_INVALID"),
        ("https://no-such-host.invalid/hook", "WEBHOOK_URL_UNRESOLVABLE"),
    ],
)
async def test_create_refuses_unsafe_urls(
    client: AsyncClient, engine: AsyncEngine, tenant: str, url: str, code: str
) -> None:
    """SSRF: private, link-local, metadata, shared and unspecified addresses (IPv4 inside IPv6
    too), plain http off loopback, credentials and unresolvable names are refused with a code,
    and nothing is written."""
    headers = await admin_key_headers(engine, tenant)
    response = await client.post(
        BASE, json={"url": url, "eventTypes": ["delivery.sent"]}, headers=headers
    )
    # Not even shaped like a web URL: the schema's 422; otherwise the SSRF rules' 400.
    assert response.status_code == (422 if code == "REQUEST_MALFORMED" else 400), response.text
    assert response.json()["error"]["code"] == code
    assert (await client.get(BASE, headers=headers)).json()["items"] == []


async def test_loopback_refused_without_dev_and_allow_list_opens_a_network(
    settings: Settings, engine: AsyncEngine, tenant: str
) -> None:
    from herald.channels import destination

    strict = settings.model_copy(update={"webhook_allow_loopback": False})
    with pytest.raises(destination.WebhookUrlForbidden):
        await destination.resolve("https://127.0.0.1/hook", strict)
    with pytest.raises(destination.WebhookUrlForbidden):
        await destination.resolve("https://localhost/hook", strict)
    opened = strict.model_copy(update={"webhook_allowed_hosts": "10.20.0.0/16, hooks.internal"})
    target = await destination.resolve("https://10.20.3.4:8443/in?x=1", opened)
    assert target.request_url() == "https://10.20.3.4:8443/in?x=1"
    assert target.host_header() == "10.20.3.4:8443"
    with pytest.raises(destination.WebhookUrlForbidden):
        await destination.resolve("https://10.21.0.1/", opened)


async def test_refused_again_at_send_time(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    vault: Vault,
    receiver: Receiver,
) -> None:
    """An endpoint that was allowed when created but is not when sending (here: loopback no
    longer allowed) is never contacted; its message dies at once as forbidden."""
    headers = await admin_key_headers(engine, tenant)
    created = await create_endpoint(client, headers, receiver.url, ["delivery.sent"])
    receiver.secret = created["secret"]
    await email_delivery(engine, tenant)
    await deliver(engine, ScriptedProvider("email"), vault, settings, tenant)()
    strict = settings.model_copy(update={"webhook_allow_loopback": False})
    await send_until_settled(engine, strict, tenant)
    [message] = await messages(engine, tenant)
    assert message["status"] == "dead" and message["last_error"] == "WEBHOOK_DESTINATION_FORBIDDEN"
    assert receiver.requests == 0


async def test_crud_rotate_test_event_audit_and_permissions(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    receiver: Receiver,
) -> None:
    """Create shows the secret once; read and list never do; rotate signs from then on with the
    new secret only; a test event arrives signed; each change is audited without the secret;
    a caller without the permissions sees an empty list and 404s; another tenant's id is 404."""
    headers = await admin_key_headers(engine, tenant)
    created = await create_endpoint(client, headers, receiver.url, ["delivery.sent"])
    endpoint_id = created["id"]
    shown = await client.get(f"{BASE}/{endpoint_id}", headers=headers)
    assert shown.status_code == 200 and "secret" not in shown.json()
    assert [e["id"] for e in (await client.get(BASE, headers=headers)).json()["items"]] == [
        endpoint_id
    ]

    rotated = await client.post(f"{BASE}/{endpoint_id}/rotate-secret", headers=headers)
    assert rotated.status_code == 200
    new_secret = rotated.json()["secret"]
    assert new_secret != created["secret"]
    receiver.secret = created["secret"]
    queued = await client.post(f"{BASE}/{endpoint_id}/test", headers=headers)
    assert queued.status_code == 202
    await send_until_settled(engine, settings, tenant, rounds=1)
    assert receiver.unverified and not receiver.accepted  # the old secret no longer verifies

    receiver.secret, receiver.unverified = new_secret, []
    again = await client.post(f"{BASE}/{endpoint_id}/test", headers=headers)
    await send_until_settled(engine, settings, tenant, rounds=1)
    [payload] = receiver.accepted[again.json()["messageId"]]
    assert payload["type"] == "webhook.test" and payload["data"]["endpointId"] == endpoint_id

    a = s.audit_record
    async with engine.connect() as conn:
        audits = (
            await conn.execute(
                select(a.c.action, a.c.changes).where(
                    a.c.tenant_id == tenant, a.c.entity_type == "webhook_endpoint"
                )
            )
        ).all()
    assert [row.action for row in audits] == ["create", "update"]
    assert created["secret"] not in json.dumps([row.changes for row in audits])
    assert new_secret not in json.dumps([row.changes for row in audits])
    async with engine.connect() as conn:
        stored = (await conn.execute(select(s.webhook_endpoint.c.secret_ciphertext))).scalars()
        assert all(created["secret"].encode() not in bytes(c) for c in stored)

    nobody = await operator_headers(engine, settings, tenant, ["NotificationHistory_READ"])
    assert (await client.get(BASE, headers=nobody)).json()["items"] == []
    assert (await client.get(f"{BASE}/{endpoint_id}", headers=nobody)).status_code == 404
    assert (await client.delete(f"{BASE}/{endpoint_id}", headers=nobody)).status_code == 404
    creator = await operator_headers(engine, settings, tenant, ["NotificationWebhook_CREATE"])
    made = await client.post(
        BASE, json={"url": receiver.url, "eventTypes": ["delivery.dead"]}, headers=creator
    )
    assert made.status_code == 201

    other = await admin_key_headers(engine, f"{tenant}-other")
    assert (await client.get(f"{BASE}/{endpoint_id}", headers=other)).status_code == 404
    assert (await client.get(f"{BASE}/{uuid.uuid4()}", headers=headers)).status_code == 404
    assert (await client.get(f"{BASE}/not-a-uuid", headers=headers)).status_code == 404

    deleted = await client.delete(f"{BASE}/{endpoint_id}", headers=headers)
    assert deleted.status_code == 204
    assert (await client.get(f"{BASE}/{endpoint_id}", headers=headers)).status_code == 404
    assert [m["endpoint_id"] for m in await messages(engine, tenant)] == []


async def test_followup_reminded_and_reaper_dead_are_emitted(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    registry: Any,
    receiver: Receiver,
) -> None:
    """The outbox beyond the recorder: a follow-up's reminder and a delivery the reaper kills
    each write their message in the same transaction."""
    from herald.delivery import service as delivery
    from herald.delivery.queries import claim_due_deliveries
    from tests.integration.test_followups import _arm, _nudge, _row, _sweep

    headers = await admin_key_headers(engine, tenant)
    await create_endpoint(client, headers, receiver.url, ["followup.reminded", "delivery.dead"])
    await _arm(engine, tenant, "absence:1", delay=3600)
    await _nudge(engine, tenant, "absence:1", "arm_at")
    await _sweep(engine, registry)
    assert await messages(engine, tenant) == []  # notified: not subscribed, nothing
    await _nudge(engine, tenant, "absence:1", "escalate_at")
    await _sweep(engine, registry)
    [reminded] = await messages(engine, tenant)
    row = await _row(engine, tenant, "absence:1")
    assert reminded["event_type"] == "followup.reminded"
    assert reminded["payload"]["data"] == {
        "followupKey": "absence:1",
        "cycle": 1,
        "eventId": str(row["reminder_event_id"]),
    }

    other = f"{tenant}-r"
    other_headers = await admin_key_headers(engine, other)
    await create_endpoint(client, other_headers, receiver.url, ["delivery.dead"])
    queued = await email_delivery(engine, other)
    async with engine.begin() as conn:
        assert await claim_due_deliveries(conn, "email", 10, 60, other)
    d, q = s.notification_delivery, s.notification_delivery_queue
    async with engine.begin() as conn:
        await conn.execute(
            update(d).where(d.c.id == queued["id"]).values(attempts=settings.max_attempts)
        )
        await conn.execute(  # its lease ran out (the claim is the queue row's)
            update(q)
            .where(q.c.delivery_id == queued["id"])
            .values(lease_expires_at=func.now() - timedelta(seconds=1))
        )
        await delivery.reclaim_expired_leases(conn, max_attempts=settings.max_attempts, limit=100)
    [dead] = await messages(engine, other)
    assert dead["event_type"] == "delivery.dead"
    assert dead["payload"]["data"]["errorCode"] == "LEASE_EXPIRED"
    assert dead["payload"]["data"]["deliveryId"] == str(queued["public_id"])


async def test_the_worker_process_loop_sends_them(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    receiver: Receiver,
) -> None:
    """`herald worker`'s loops, as run_worker assembles them: fan-out, the email sender and the
    webhook sender together bring event.completed and delivery.sent to the host, through a
    refusal, each once."""
    from herald.runtime.worker import run_worker

    headers = await admin_key_headers(engine, tenant)
    created = await create_endpoint(
        client, headers, receiver.url, ["event.completed", "delivery.sent"]
    )
    receiver.secret, receiver.fail_first, receiver.expect = created["secret"], 1, 2
    fast = settings.model_copy(update={"retry_base_seconds": 1})
    async with engine.begin() as conn:
        group_id = await seed.group(conn, tenant, "class-7a")
        pupil = await seed.person(conn, tenant, "s0")
        parent = await seed.person(conn, tenant, "g0", email="parent@example.com")
        await seed.member(conn, tenant, group_id, pupil.id)
        await seed.guardian(conn, tenant, pupil.id, parent.id)
    stop = asyncio.Event()
    worker = asyncio.create_task(
        run_worker(
            fast,
            engine,
            SAMPLE_REGISTRY,
            stop,
            tenant_id=tenant,
            providers={"email": ScriptedProvider("email")},
            maintenance=False,
        )
    )
    try:
        await send_event(engine, tenant, channels=["email"])
        assert await asyncio.to_thread(receiver.arrived.wait, 30)
    finally:
        stop.set()
        await asyncio.wait_for(worker, timeout=20)
    assert receiver.unverified == []
    types = sorted(p["type"] for [p] in receiver.accepted.values())
    assert types == ["delivery.sent", "event.completed"]
