"""Provider failover through the real delivery path (issue 45 item 4): the worker sends through a
FailoverProvider over two real SMTP servers (aiosmtpd), the recorder writes the attempt with the
provider that answered and the ones passed over, and the operator's trace and the event's delivery
history show them."""

from __future__ import annotations

import uuid
from typing import Any

from httpx import AsyncClient
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.channels.failover import FailoverProvider
from herald.channels.smtp import SmtpEmailProvider, SmtpServer
from herald.config import Settings
from herald.db import schema as s
from herald.delivery.worker import deliver_batch
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.secrets.vault import Vault
from tests.integration.test_admin_history import HISTORY_READ, fanned_out_event, operator_headers
from tests.integration.test_fanout import school
from tests.providers.servers import SmtpRecordingHandler, smtp_free_port, smtp_server

EVENTS = "/v1/admin/events"


def _two_smtp(settings: Settings, first_port: int, second_port: int) -> FailoverProvider:
    values = settings.model_copy(
        update={
            "smtp_host": "127.0.0.1",
            "smtp_port": first_port,
            "smtp_starttls": False,
            "smtp_backup_host": "127.0.0.1",
            "smtp_backup_port": second_port,
            "smtp_backup_starttls": False,
        }
    )
    return FailoverProvider(
        "email",
        [SmtpEmailProvider(values), SmtpEmailProvider(values, SmtpServer.backup(values))],
        threshold=5,
        cooldown=30,
    )


async def _attempts(engine: AsyncEngine, tenant: str) -> list[dict[str, Any]]:
    a, d = s.notification_delivery_attempt, s.notification_delivery
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(a.c.outcome, a.c.error_code, a.c.provider, a.c.passed_over, d.c.status)
            .join(d, (d.c.id == a.c.delivery_id) & (d.c.occurred_at == a.c.occurred_at))
            .where(a.c.tenant_id == tenant)
            .order_by(a.c.id)
        )
        return [dict(r._mapping) for r in rows]


async def _email_event(engine: AsyncEngine, tenant: str) -> uuid.UUID:
    await school(engine, tenant, students=1)
    return await fanned_out_event(engine, tenant, channels=["email"])


async def test_the_attempt_names_the_second_server_when_the_first_refuses(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str, vault: Vault
) -> None:
    """Issue 45 item 4: the first SMTP server refuses connections; the delivery is sent through
    the second, once, and its attempt row, the trace and the delivery history name `smtp_backup`
    and say `smtp` was passed over, with the code of its refusal."""
    event_id = await _email_event(engine, tenant)
    with smtp_server() as second:
        provider = _two_smtp(settings, smtp_free_port(), second.port)
        claimed = await deliver_batch(
            engine,
            "email",
            provider,
            registry=SAMPLE_REGISTRY,
            vault=vault,
            settings=settings,
            tenant_id=tenant,
        )
    assert claimed == 1
    assert len(second.handler.received) == 1
    assert second.handler.received[0].rcpt_tos == ["g0@example.com"]
    assert await _attempts(engine, tenant) == [
        {
            "outcome": "sent",
            "error_code": None,
            "provider": "smtp_backup",
            "passed_over": "smtp:EMAIL_TRANSPORT",
            "status": "sent",
        }
    ]

    headers = await operator_headers(engine, settings, tenant, [HISTORY_READ])
    answer = await client.get(f"{EVENTS}/{event_id}/recipients/g0", headers=headers)
    assert answer.status_code == 200, answer.text
    (email,) = [d for d in answer.json()["deliveries"] if d["channel"] == "email"]
    (attempt,) = email["attempts"]
    assert attempt["provider"] == "smtp_backup"
    assert attempt["passedOver"] == [{"provider": "smtp", "reason": "EMAIL_TRANSPORT"}]

    answer = await client.get(f"{EVENTS}/{event_id}/deliveries", headers=headers)
    assert answer.status_code == 200, answer.text
    assert [(d["channel"], d["provider"]) for d in answer.json()["items"]] == [
        ("email", "smtp_backup")
    ]


async def test_a_rejected_address_is_recorded_against_the_first_and_never_sent_elsewhere(
    engine: AsyncEngine, settings: Settings, tenant: str, vault: Vault
) -> None:
    """A permanent rejection by the first provider ends the delivery dead with that provider's
    answer: the second server never sees it."""
    await _email_event(engine, tenant)
    refusing = SmtpRecordingHandler(refuse_rcpt="550 5.1.1 no such user")
    with smtp_server(handler=refusing) as first, smtp_server() as second:
        provider = _two_smtp(settings, first.port, second.port)
        await deliver_batch(
            engine,
            "email",
            provider,
            registry=SAMPLE_REGISTRY,
            vault=vault,
            settings=settings,
            tenant_id=tenant,
        )
        assert second.handler.received == []
    (attempt,) = await _attempts(engine, tenant)
    assert attempt["status"] == "dead" and attempt["provider"] == "smtp"
    assert attempt["passed_over"] is None
    assert attempt["error_code"].startswith("EMAIL_REJECTED:smtp_550")


async def test_a_single_provider_attempt_names_it_too(
    engine: AsyncEngine, settings: Settings, tenant: str, vault: Vault
) -> None:
    """Without a list the channel's one provider is used as before, and its name is recorded."""
    await _email_event(engine, tenant)
    with smtp_server() as only:
        values = settings.model_copy(
            update={"smtp_host": "127.0.0.1", "smtp_port": only.port, "smtp_starttls": False}
        )
        await deliver_batch(
            engine,
            "email",
            SmtpEmailProvider(values),
            registry=SAMPLE_REGISTRY,
            vault=vault,
            settings=values,
            tenant_id=tenant,
        )
        assert len(only.handler.received) == 1
    (attempt,) = await _attempts(engine, tenant)
    assert (attempt["provider"], attempt["passed_over"]) == ("smtp", None)
