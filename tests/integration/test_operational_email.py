"""Operational email to the support mailbox, through the real SMTP provider and a real SMTP
server (aiosmtpd) on 127.0.0.1."""

from __future__ import annotations

import email
import email.policy
import logging
import uuid
from collections.abc import Iterator
from datetime import timedelta
from email.message import EmailMessage
from typing import Any

import pytest
from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.channels.base import Message, ProviderOutcome
from herald.channels.mock import MockProvider
from herald.channels.smtp import SmtpEmailProvider
from herald.config import Settings
from herald.db import schema as s
from herald.errors import OperationalEmailInvalid, OperationalEventUnknown
from herald.maintenance import credit, opmail
from herald.maintenance.credit import check_sms_credit
from herald.maintenance.service import enqueue_operational_email, run_tick
from tests.providers.servers import SmtpTestServer, smtp_free_port, smtp_server

MAILBOX = "support@school.example"
ROWS = [
    ("From", "Parent <Asha>"),
    ("Subject", "Bus 4 & the <late> pickup"),
    ("Message", "<script>alert(1)</script>"),
]


@pytest.fixture
def server() -> Iterator[SmtpTestServer]:
    with smtp_server() as running:
        yield running


def mail_settings(settings: Settings, host: str | None, port: int, **overrides: Any) -> Settings:
    return settings.model_copy(
        update={
            "smtp_host": host,
            "smtp_port": port,
            "smtp_starttls": False,  # the test server speaks plain SMTP
            "email_from": "Herald <no-reply@school.example>",
            "support_mailbox": MAILBOX,
            "provider_connect_timeout_seconds": 1.0,
            "provider_read_timeout_seconds": 2.0,
            **overrides,
        }
    )


async def enqueue(
    engine: AsyncEngine,
    tenant: str,
    *,
    subject: str | None = None,
    event_type: str = "feedback.submitted",
    aggregate: bool = True,
) -> uuid.UUID:
    async with engine.begin() as conn:
        return await enqueue_operational_email(
            conn,
            tenant_id=tenant,
            event_type=event_type,
            aggregate_type="feedback" if aggregate else None,
            aggregate_id="018f2c1e-feedback" if aggregate else None,
            rows=ROWS,
            subject=subject or f"New feedback {uuid.uuid4().hex[:8]}",
        )


async def notice(engine: AsyncEngine, public_id: uuid.UUID) -> Any:
    async with engine.connect() as conn:
        return (
            await conn.execute(
                select(s.operational_email).where(s.operational_email.c.public_id == public_id)
            )
        ).one()


async def letters_for(engine: AsyncEngine, public_id: uuid.UUID) -> list[Any]:
    async with engine.connect() as conn:
        return list(
            await conn.execute(
                select(s.dead_letter).where(s.dead_letter.c.job_id == str(public_id))
            )
        )


async def make_due(engine: AsyncEngine, public_id: uuid.UUID) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            update(s.operational_email)
            .where(s.operational_email.c.public_id == public_id)
            .values(next_attempt_at=func.now() - timedelta(seconds=1))
        )


def parsed(content: bytes) -> EmailMessage:
    message = email.message_from_bytes(content, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    return message


def part(message: EmailMessage, subtype: str) -> str:
    body = message.get_body(preferencelist=(subtype,))
    assert body is not None
    return str(body.get_content())


# -- enqueue -----------------------------------------------------------------------------------


async def test_enqueue_renders_three_rows_and_writes_no_notification_rows(
    engine: AsyncEngine, tenant: str
) -> None:
    """R-OPMAIL-5, R-OPMAIL-2, R-OPMAIL-3: the notice is rendered when it is enqueued — three
    label/value rows, the HTML part escaped — and no event, recipient or delivery row exists, so
    no preference applies and no centre can show it."""
    public_id = await enqueue(engine, tenant, subject="New  feedback\nreceived")
    row = await notice(engine, public_id)
    assert (row.status, row.attempts, row.event_type) == ("queued", 0, "feedback.submitted")
    assert row.subject == "New feedback received"
    assert row.body_text == (
        "From: Parent <Asha>\nSubject: Bus 4 & the <late> pickup\n"
        "Message: <script>alert(1)</script>"
    )
    assert "<script>" not in row.body_html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in row.body_html
    assert "<strong>Subject</strong>: Bus 4 &amp; the &lt;late&gt; pickup" in row.body_html
    async with engine.connect() as conn:
        for table in (s.notification_event, s.notification_recipient, s.notification_delivery):
            n = await conn.execute(
                select(func.count()).select_from(table).where(table.c.tenant_id == tenant)
            )
            assert n.scalar_one() == 0, table.name


async def test_an_unknown_event_type_is_refused_at_enqueue(
    engine: AsyncEngine, tenant: str
) -> None:
    """R-OPMAIL-10, R-PLAT-11: only the registered operational types can be enqueued; anything
    else raises and writes nothing."""
    with pytest.raises(OperationalEventUnknown):
        await enqueue(engine, tenant, event_type="backup.restored")
    with pytest.raises(OperationalEmailInvalid):
        async with engine.begin() as conn:
            await enqueue_operational_email(
                conn,
                tenant_id=tenant,
                event_type="delivery.dead",
                rows=[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")],
                subject="Too many rows",
            )
    async with engine.connect() as conn:
        n = await conn.execute(
            select(func.count())
            .select_from(s.operational_email)
            .where(s.operational_email.c.tenant_id == tenant)
        )
        assert n.scalar_one() == 0


# -- send --------------------------------------------------------------------------------------


async def test_the_tick_sends_the_stored_rendering_through_the_email_provider(
    engine: AsyncEngine, settings: Settings, tenant: str, server: SmtpTestServer
) -> None:
    """R-OPMAIL-1, R-OPMAIL-4, R-OPMAIL-5, R-OPMAIL-6: the maintenance tick sends the notice to the
    support mailbox through the email channel's provider (real SMTP, real server), exactly as it
    was rendered at enqueue — a template published meanwhile changes nothing."""
    config = mail_settings(settings, server.host, server.port)
    provider = SmtpEmailProvider(config)
    subject = f"New feedback {uuid.uuid4().hex[:8]}"
    public_id = await enqueue(engine, tenant, subject=subject)
    async with engine.begin() as conn:
        await conn.execute(
            insert(s.notification_template).values(
                tenant_id=tenant,
                kind="feedback.submitted",
                channel="email",
                locale="en",
                status="published",
                title="Edited later",
                body="Edited later",
            )
        )

    tick = await run_tick(engine, config, backfill_channels=[], providers={"email": provider})

    assert tick.failures == []
    mine = [m for m in server.handler.received if subject.encode() in m.content]
    assert len(mine) == 1
    assert mine[0].rcpt_tos == [MAILBOX]
    message = parsed(mine[0].content)
    assert message["Subject"] == subject
    assert message["To"] == MAILBOX
    text, html = part(message, "plain"), part(message, "html")
    assert "Message: <script>alert(1)</script>" in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>" not in html
    assert "Edited later" not in text + html
    row = await notice(engine, public_id)
    assert (row.status, row.attempts, row.last_error) == ("sent", 1, None)
    assert row.sent_at is not None and row.claimed_at is None


async def test_a_transport_failure_retries_on_its_own_budget_then_dead_letters(
    engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-PLAT-9, R-DLQ-2, R-SCHEMA-53: nothing listens on the SMTP port, so each attempt is a
    transport failure: queued again with backoff until operational_email_max_attempts, then dead
    with one dead letter whose payload_ref is {aggregateType, aggregateId, eventType}."""
    config = mail_settings(
        settings, "127.0.0.1", smtp_free_port(), operational_email_max_attempts=3
    )
    provider = SmtpEmailProvider(config)
    public_id = await enqueue(engine, tenant)

    for attempt in (1, 2):
        report = await opmail.send_due_operational_emails(
            engine, config, provider, tenant_id=tenant
        )
        assert report.retried == 1
        row = await notice(engine, public_id)
        assert (row.status, row.attempts) == ("queued", attempt)
        assert row.last_error.startswith("EMAIL_TRANSPORT")
        assert await letters_for(engine, public_id) == []
        # Not due again before its backoff has passed.
        assert (
            await opmail.send_due_operational_emails(engine, config, provider, tenant_id=tenant)
        ).retried == 0
        await make_due(engine, public_id)

    report = await opmail.send_due_operational_emails(engine, config, provider, tenant_id=tenant)
    assert report.dead == 1
    row = await notice(engine, public_id)
    assert (row.status, row.attempts) == ("dead", 3)
    letters = await letters_for(engine, public_id)
    assert len(letters) == 1
    assert letters[0].payload_ref == {
        "aggregateType": "feedback",
        "aggregateId": "018f2c1e-feedback",
        "eventType": "feedback.submitted",
    }
    assert (letters[0].queue_name, letters[0].attempts) == ("notification.operational", 3)
    assert letters[0].last_error.startswith("EMAIL_TRANSPORT")


async def test_a_rejection_is_dead_at_once_and_absent_keys_are_omitted(
    engine: AsyncEngine, settings: Settings, tenant: str, server: SmtpTestServer
) -> None:
    """R-DLQ-2: the mailbox refused (550) is not retried; the dead letter's payload_ref omits the
    absent aggregate keys instead of writing nulls."""
    server.handler.refuse_rcpt = "550 5.1.1 <{address}>: mailbox unavailable"
    config = mail_settings(settings, server.host, server.port)
    public_id = await enqueue(engine, tenant, event_type="delivery.dead", aggregate=False)

    report = await opmail.send_due_operational_emails(
        engine, config, SmtpEmailProvider(config), tenant_id=tenant
    )

    assert report.dead == 1
    row = await notice(engine, public_id)
    assert (row.status, row.attempts) == ("dead", 1)
    assert row.last_error.startswith("EMAIL_REJECTED")
    letters = await letters_for(engine, public_id)
    assert [letter.payload_ref for letter in letters] == [{"eventType": "delivery.dead"}]
    assert MAILBOX not in (row.last_error or "")


async def test_an_unconfigured_provider_skips_with_a_warning_and_never_sends_later(
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    server: SmtpTestServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R-OPMAIL-7, R-OPMAIL-8: with no provider configured the notice completes as skipped with
    one warning and no dead letter; once the provider is configured it is still not sent."""
    caplog.set_level(logging.WARNING, logger="herald")
    unconfigured = mail_settings(settings, None, 25)
    public_id = await enqueue(engine, tenant)

    report = await opmail.send_due_operational_emails(
        engine, unconfigured, SmtpEmailProvider(unconfigured), tenant_id=tenant
    )

    assert report.skipped == 1
    row = await notice(engine, public_id)
    assert (row.status, row.last_error) == ("skipped", "skipped:unconfigured")
    assert await letters_for(engine, public_id) == []
    warnings = [r for r in caplog.records if str(public_id) in r.getMessage()]
    assert [r.levelno for r in warnings] == [logging.WARNING]

    configured = mail_settings(settings, server.host, server.port)
    later = await opmail.send_due_operational_emails(
        engine, configured, SmtpEmailProvider(configured), tenant_id=tenant
    )
    assert later.sent == 0
    assert server.handler.received == []
    assert (await notice(engine, public_id)).status == "skipped"


async def test_no_support_mailbox_skips_without_a_dead_letter(
    engine: AsyncEngine, settings: Settings, tenant: str, server: SmtpTestServer
) -> None:
    """R-OPMAIL-7: a configured provider but no HERALD_SUPPORT_MAILBOX: skipped, nothing sent,
    no dead letter."""
    config = mail_settings(settings, server.host, server.port, support_mailbox=None)
    public_id = await enqueue(engine, tenant)
    report = await opmail.send_due_operational_emails(
        engine, config, SmtpEmailProvider(config), tenant_id=tenant
    )
    assert report.skipped == 1
    assert (await notice(engine, public_id)).last_error == "skipped:no_support_mailbox"
    assert server.handler.received == []
    assert await letters_for(engine, public_id) == []


async def test_a_stored_notice_of_an_unknown_type_fails_with_a_recorded_error(
    engine: AsyncEngine, settings: Settings, tenant: str, server: SmtpTestServer
) -> None:
    """R-OPMAIL-10, R-PLAT-11: a row whose event type no handler knows is recorded dead with its
    error and a dead letter — never completed quietly, never sent."""
    async with engine.begin() as conn:
        public_id = (
            await conn.execute(
                insert(s.operational_email)
                .values(
                    tenant_id=tenant,
                    event_type="backup.restored",
                    aggregate_type="backup",
                    subject="Restored",
                    body_text="x",
                    body_html="x",
                )
                .returning(s.operational_email.c.public_id)
            )
        ).scalar_one()
    config = mail_settings(settings, server.host, server.port)

    report = await opmail.send_due_operational_emails(
        engine, config, SmtpEmailProvider(config), tenant_id=tenant
    )

    assert report.dead == 1 and report.sent == 0
    row = await notice(engine, public_id)
    assert (row.status, row.last_error) == ("dead", opmail.UNKNOWN_EVENT_TYPE_ERROR)
    assert [letter.payload_ref for letter in await letters_for(engine, public_id)] == [
        {"aggregateType": "backup", "eventType": "backup.restored"}
    ]
    assert server.handler.received == []


async def test_an_expired_lease_is_reclaimed_and_counts_an_attempt(
    engine: AsyncEngine, settings: Settings, tenant: str, server: SmtpTestServer
) -> None:
    """R-PLAT-9: a notice whose worker died mid-send is not stranded: once its lease passes it
    is queued again (the attempt counted) and sent; on its last attempt it goes dead instead."""
    config = mail_settings(settings, server.host, server.port, operational_email_max_attempts=2)
    stranded = await enqueue(engine, tenant)
    last = await enqueue(engine, tenant)
    async with engine.begin() as conn:
        for public_id, attempts in ((stranded, 0), (last, 1)):
            await conn.execute(
                update(s.operational_email)
                .where(s.operational_email.c.public_id == public_id)
                .values(
                    status="processing",
                    attempts=attempts,
                    claimed_at=func.now() - timedelta(minutes=5),
                    lease_expires_at=func.now() - timedelta(minutes=4),
                )
            )

    report = await opmail.send_due_operational_emails(
        engine, config, SmtpEmailProvider(config), tenant_id=tenant
    )

    assert report.reclaimed == 2
    assert (await notice(engine, stranded)).status == "sent"
    assert (await notice(engine, stranded)).attempts == 2
    dead = await notice(engine, last)
    assert (dead.status, dead.last_error) == ("dead", "LEASE_EXPIRED")
    assert len(await letters_for(engine, last)) == 1


async def test_the_mock_records_the_notice_and_it_completes_as_skipped(
    engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-OPMAIL-4: under `herald dev` the same mock the email channel uses records the notice
    (for the dev console) instead of sending it; the notice completes, never as sent."""
    config = mail_settings(settings, None, 25)
    mock = MockProvider("email", config)
    public_id = await enqueue(engine, tenant)
    await opmail.send_due_operational_emails(engine, config, mock, tenant_id=tenant)
    recorded = [m for m in mock.sent_messages if m.to == MAILBOX]
    assert len(recorded) == 1 and recorded[0].body_html is not None
    assert (await notice(engine, public_id)).status == "skipped"


async def test_the_feed_toast_is_relayed_even_when_the_email_is_skipped(
    engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-OPMAIL-9: a low SMS credit posts its feed row whatever becomes of the email: here the
    email provider is unconfigured, the notice is skipped, and the feed row is there."""

    class LowBalance:
        channel = "sms"
        name = "aakash"
        is_mock = False

        def is_configured(self) -> bool:
            return True

        async def balance(self) -> float:
            return 12.0

        async def send(self, message: Message) -> ProviderOutcome:
            raise AssertionError("not called")

        async def aclose(self) -> None:
            return None

    config = mail_settings(settings, None, 25, ops_tenant=tenant)
    async with engine.begin() as conn:
        await conn.execute(
            s.maintenance_run.delete().where(s.maintenance_run.c.task == credit.TASK)
        )
    reading = await check_sms_credit(engine, config, LowBalance())
    assert reading is not None and reading.low
    await opmail.send_due_operational_emails(
        engine, config, SmtpEmailProvider(config), tenant_id=tenant
    )
    async with engine.connect() as conn:
        feed = list(
            await conn.execute(
                select(s.feed_notification.c.kind).where(s.feed_notification.c.tenant_id == tenant)
            )
        )
        mails = list(
            await conn.execute(
                select(s.operational_email.c.status).where(
                    s.operational_email.c.tenant_id == tenant
                )
            )
        )
    assert [f.kind for f in feed] == ["sms.credit_low"]
    assert [m.status for m in mails] == ["skipped"]
