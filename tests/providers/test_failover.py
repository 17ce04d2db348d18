"""Provider failover within a channel (issue 45 item 4) against real servers: two SMTP servers
(aiosmtpd), and the local Aakash and Twilio servers of the SMS tests.

The rule under test: a send moves to the next provider only when the one before certainly did not
take the message (connection refused, a 4xx reply, 429/503, a destination it cannot serve) or its
circuit is open; an ambiguous failure and a verdict on the message stay with the first provider.
"""

from __future__ import annotations

import asyncio
import email
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from typing_extensions import override

from herald.channels.aakash import AakashSmsProvider
from herald.channels.base import Message
from herald.channels.failover import FailoverProvider
from herald.channels.providers import build_providers, check_providers
from herald.channels.smtp import SmtpEmailProvider, SmtpServer
from herald.channels.twilio import TwilioSmsProvider
from herald.config import Settings
from herald.errors import ConfigurationError
from herald.observability import metrics
from tests.providers.servers import (
    AAKASH_TOKEN,
    TWILIO_FROM,
    TWILIO_SID,
    TWILIO_TOKEN,
    AakashReply,
    SmtpReceived,
    SmtpRecordingHandler,
    SmtpTestServer,
    aakash_server,
    smtp_free_port,
    smtp_server,
    twilio_server,
)

ADDRESS = "jane.doe@example.com"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def email_message(key: str = "delivery-1") -> Message:
    return Message(
        channel="email",
        to=ADDRESS,
        title="Sports day",
        body="It is on Friday.",
        idempotency_key=key,
    )


def smtp_settings(first_port: int, second_port: int, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "email_providers": "smtp,smtp_backup",
        "smtp_host": "127.0.0.1",
        "smtp_port": first_port,
        "smtp_starttls": False,
        "smtp_backup_host": "127.0.0.1",
        "smtp_backup_port": second_port,
        "smtp_backup_starttls": False,
        "email_from": "School <no-reply@school.example>",
        "provider_circuit_failures": 2,
    }
    values.update(overrides)
    return Settings(**values)


def two_smtp(settings: Settings, clock: Clock) -> FailoverProvider:
    """The provider build_providers makes for `smtp,smtp_backup`, on the test's clock."""
    return FailoverProvider(
        "email",
        [
            SmtpEmailProvider(settings),
            SmtpEmailProvider(settings, SmtpServer.backup(settings)),
        ],
        threshold=settings.provider_circuit_failures,
        cooldown=settings.provider_circuit_cooldown_seconds,
        clock=clock,
    )


@pytest.fixture
def second() -> Iterator[SmtpTestServer]:
    with smtp_server() as running:
        yield running


def _failovers(channel: str, provider: str, reason: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "herald_provider_failovers_total",
        {"channel": channel, "provider": provider, "reason": reason},
    )
    return value or 0.0


def _circuit_open(channel: str, provider: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(
        "herald_provider_circuit_open", {"channel": channel, "provider": provider}
    )


async def test_a_refused_connection_fails_over_and_the_first_takes_over_again_once_back(
    second: SmtpTestServer,
) -> None:
    """Issue 45 item 4: with the first SMTP server refusing connections (nothing listens on its
    port) mail goes through the second, and the answer names it and the provider passed over;
    after N refusals the circuit opens and the first is not even tried; once it is back and the
    cooldown has passed, one probe goes to it, succeeds, and mail goes through the first again."""
    first_port = smtp_free_port()
    settings = smtp_settings(first_port, second.port)
    clock = Clock()
    provider = two_smtp(settings, clock)
    before = _failovers("email", "smtp", "provider")

    outcome = await provider.send(email_message("d-1"))
    assert outcome.outcome == "sent"
    assert outcome.provider == "smtp_backup"
    assert outcome.passed_over == ("smtp:EMAIL_TRANSPORT",)
    assert len(second.handler.received) == 1
    assert _failovers("email", "smtp", "provider") == before + 1

    await provider.send(email_message("d-2"))  # the second refusal in a row opens the circuit
    assert provider.circuit_states()["smtp"] == "open"
    assert _circuit_open("email", "smtp") == 1

    outcome = await provider.send(email_message("d-3"))
    assert outcome.provider == "smtp_backup"
    assert outcome.passed_over == ("smtp:circuit_open",)
    assert len(second.handler.received) == 3

    with smtp_server(port=first_port) as first:
        outcome = await provider.send(email_message("d-4"))  # still cooling down
        assert outcome.provider == "smtp_backup" and first.handler.received == []

        clock.now += settings.provider_circuit_cooldown_seconds
        outcome = await provider.send(email_message("d-5"))  # the probe
        assert outcome.outcome == "sent"
        assert outcome.provider == "smtp" and outcome.passed_over == ()
        assert provider.circuit_states()["smtp"] == "closed"
        assert _circuit_open("email", "smtp") == 0

        outcome = await provider.send(email_message("d-6"))
        assert outcome.provider == "smtp"
        assert len(first.handler.received) == 2
    assert len(second.handler.received) == 4


async def test_a_timeout_after_data_is_not_failed_over(second: SmtpTestServer) -> None:
    """The first server takes the message and answers too late: the send is ambiguous (the
    server may have queued it), so it is a retryable failure of the first provider and the
    second server is never asked."""
    slow = SmtpRecordingHandler(data_delay_seconds=3.0)
    with smtp_server(handler=slow) as first:
        settings = smtp_settings(first.port, second.port, provider_read_timeout_seconds=0.5)
        provider = two_smtp(settings, Clock())
        outcome = await provider.send(email_message())
    assert outcome.outcome == "failed" and outcome.retryable
    assert outcome.error_code == "EMAIL_TRANSPORT"
    assert outcome.not_sent is None
    assert outcome.provider == "smtp" and outcome.passed_over == ()
    assert second.handler.received == []
    # It counts against the first provider's circuit all the same.
    assert provider.circuits["smtp"].failures == 1


@dataclass
class KeepsThenAnswersLate(SmtpRecordingHandler):
    """A server that queues the message at once and answers DATA only after the client gave up
    waiting: what an overloaded relay does."""

    @override
    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.received.append(
            SmtpReceived(envelope.mail_from, list(envelope.rcpt_tos), bytes(envelope.content))
        )
        await asyncio.sleep(2.0)
        return "250 2.0.0 queued"


async def test_the_one_duplicate_case_an_ambiguous_failure_retried_through_the_next_provider(
    second: SmtpTestServer,
) -> None:
    """docs/sending-and-delivery.md, "When a duplicate is possible": the first server takes the
    message but answers too late (ambiguous), which opens its circuit; the delivery's retry finds
    it open and goes to the second. The first had queued it after all: the recipient has two
    copies — with the same Message-ID, so a mail client can tell."""
    with smtp_server(handler=KeepsThenAnswersLate()) as first:
        settings = smtp_settings(
            first.port,
            second.port,
            provider_read_timeout_seconds=0.5,
            provider_circuit_failures=1,
        )
        provider = two_smtp(settings, Clock())
        attempt = await provider.send(email_message("delivery-7"))
        assert attempt.outcome == "failed" and attempt.retryable and attempt.provider == "smtp"
        retry = await provider.send(email_message("delivery-7"))
        assert retry.outcome == "sent" and retry.provider == "smtp_backup"
        assert retry.passed_over == ("smtp:circuit_open",)
    copies = [*first.handler.received, *second.handler.received]
    ids = {email.message_from_bytes(c.content)["Message-ID"] for c in copies}
    assert len(copies) == 2 and len(ids) == 1


async def test_a_permanent_rejection_is_not_failed_over(second: SmtpTestServer) -> None:
    """A 5xx to RCPT TO is a verdict on the address: the delivery ends dead with the first
    provider's answer; another provider would be refused too, or worse, deliver to a typo."""
    refusing = SmtpRecordingHandler(refuse_rcpt="550 5.1.1 <{address}>: no such user")
    with smtp_server(handler=refusing) as first:
        provider = two_smtp(smtp_settings(first.port, second.port), Clock())
        outcome = await provider.send(email_message())
    assert outcome.outcome == "failed" and not outcome.retryable
    assert outcome.error_code == "EMAIL_REJECTED:smtp_550"
    assert outcome.provider == "smtp" and outcome.passed_over == ()
    assert second.handler.received == []
    # The server answered: it is healthy, whatever it thought of the address.
    assert provider.circuits["smtp"].failures == 0


async def test_a_4xx_before_the_message_was_taken_fails_over(second: SmtpTestServer) -> None:
    """A 4xx reply (greylisting, a full queue) means the server did not take the message: the
    second server may, with no risk of a copy from the first."""
    deferring = SmtpRecordingHandler(refuse_rcpt="451 4.7.1 try again later")
    with smtp_server(handler=deferring) as first:
        provider = two_smtp(smtp_settings(first.port, second.port), Clock())
        outcome = await provider.send(email_message())
        assert first.handler.received == []
    assert outcome.outcome == "sent" and outcome.provider == "smtp_backup"
    assert outcome.passed_over == ("smtp:EMAIL_TRANSPORT",)


async def test_both_refusing_is_one_retryable_failure_naming_the_last() -> None:
    settings = smtp_settings(smtp_free_port(), smtp_free_port())
    provider = two_smtp(settings, Clock())
    outcome = await provider.send(email_message())
    assert outcome.outcome == "failed" and outcome.retryable
    assert outcome.provider == "smtp_backup"
    assert outcome.passed_over == ("smtp:EMAIL_TRANSPORT",)
    await provider.send(email_message())
    # Both circuits open: nothing is called, and the retry waits for the first probe.
    outcome = await provider.send(email_message())
    assert outcome.outcome == "failed" and outcome.retryable
    assert outcome.provider is None and outcome.detail == "circuit_open"
    assert outcome.passed_over == ("smtp:circuit_open", "smtp_backup:circuit_open")
    assert outcome.retry_after_seconds == 30


def test_build_providers_makes_the_failover_provider_and_refuses_an_unconfigured_one() -> None:
    settings = smtp_settings(2525, 2526)
    providers = build_providers(settings)
    email = providers["email"]
    assert isinstance(email, FailoverProvider)
    assert [p.name for p in email.providers] == ["smtp", "smtp_backup"]
    check_providers(settings, providers)

    missing = Settings(email_providers="smtp,resend", smtp_host="127.0.0.1")
    with pytest.raises(ConfigurationError, match="names resend, which is not configured"):
        check_providers(missing, build_providers(missing))


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"email_providers": "smtp,sendgrid"}, "unknown provider"),
        ({"email_providers": "smtp,smtp"}, "twice"),
        ({"email_providers": "smtp,mock"}, "only be the one provider"),
        ({"email_providers": "smtp,resend", "email_provider": "smtp"}, "not both"),
        ({"sms_providers": "aakash,nexmo"}, "unknown provider"),
    ],
)
def test_a_bad_provider_list_refuses_to_start(values: dict[str, str], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Settings(**values)


def test_a_single_provider_configuration_is_unchanged() -> None:
    """No list: the channel's one provider, as before (no failover, no circuit)."""
    providers = build_providers(Settings(email_provider="resend", resend_api_key="re_x"))
    assert providers["email"].name == "resend"
    providers = build_providers(Settings(email_providers="resend", resend_api_key="re_x"))
    assert providers["email"].name == "resend"
    assert build_providers(Settings(smtp_host="h"))["email"].name == "smtp"


# --- SMS: Aakash, then Twilio ----------------------------------------------------------------


@pytest.fixture
def sms_servers() -> Iterator[tuple[Any, Any]]:
    with aakash_server() as aakash, twilio_server() as twilio:
        yield aakash, twilio


@pytest.fixture
async def aakash_then_twilio(sms_servers: tuple[Any, Any]) -> AsyncIterator[FailoverProvider]:
    aakash, twilio = sms_servers
    settings = Settings(
        sms_providers="aakash,twilio",
        aakash_auth_token=AAKASH_TOKEN,
        aakash_base_url=f"{aakash.url}/sms/v3",
        twilio_account_sid=TWILIO_SID,
        twilio_auth_token=TWILIO_TOKEN,
        twilio_from=TWILIO_FROM,
        twilio_base_url=twilio.url,
        provider_read_timeout_seconds=0.5,
    )
    provider = build_providers(settings)["sms"]
    assert isinstance(provider, FailoverProvider)
    assert [type(p) for p in provider.providers] == [AakashSmsProvider, TwilioSmsProvider]
    check_providers(settings, {"sms": provider})
    yield provider
    await provider.aclose()


def sms(to: str = "+9779812345678") -> Message:
    return Message(channel="sms", to=to, body="School closes at noon today.")


async def test_aakash_unavailable_fails_over_to_twilio(
    aakash_then_twilio: FailoverProvider, sms_servers: tuple[Any, Any]
) -> None:
    """Aakash answers 503 (it took nothing): the SMS goes through Twilio, which names itself."""
    aakash, twilio = sms_servers
    aakash.reply_with(AakashReply(status=503, body={"error": True, "message": "down"}))
    outcome = await aakash_then_twilio.send(sms())
    assert outcome.outcome == "sent" and outcome.provider == "twilio"
    assert outcome.passed_over == ("aakash:SMS_TRANSPORT",)
    assert len(aakash.requests) == 1 and len(twilio.requests) == 1


async def test_aakash_sends_when_it_can(
    aakash_then_twilio: FailoverProvider, sms_servers: tuple[Any, Any]
) -> None:
    aakash, twilio = sms_servers
    outcome = await aakash_then_twilio.send(sms())
    assert outcome.outcome == "sent" and outcome.provider == "aakash"
    assert len(aakash.requests) == 1 and twilio.requests == []


async def test_a_number_outside_nepal_goes_to_twilio_without_touching_aakash_health(
    aakash_then_twilio: FailoverProvider, sms_servers: tuple[Any, Any]
) -> None:
    aakash, twilio = sms_servers
    for _ in range(6):
        outcome = await aakash_then_twilio.send(sms("+447911123456"))
        assert outcome.provider == "twilio"
        assert outcome.passed_over == ("aakash:SMS_UNSUPPORTED_DESTINATION",)
    assert aakash.requests == [] and len(twilio.requests) == 6
    assert aakash_then_twilio.circuit_states()["aakash"] == "closed"


async def test_an_aakash_read_timeout_is_not_failed_over(
    aakash_then_twilio: FailoverProvider, sms_servers: tuple[Any, Any]
) -> None:
    """Aakash got the request and did not answer in time: it may have sent (and billed) the SMS,
    so Twilio is not asked in the same attempt."""
    aakash, twilio = sms_servers
    aakash.reply_with(AakashReply(delay_seconds=3.0))
    outcome = await aakash_then_twilio.send(sms())
    assert outcome.outcome == "failed" and outcome.retryable
    assert outcome.provider == "aakash" and outcome.passed_over == ()
    assert twilio.requests == []


async def test_an_invalid_number_at_aakash_is_not_failed_over(
    aakash_then_twilio: FailoverProvider, sms_servers: tuple[Any, Any]
) -> None:
    from tests.providers.servers import aakash_invalid_number

    aakash, twilio = sms_servers
    aakash.reply_with(AakashReply(body=aakash_invalid_number))
    outcome = await aakash_then_twilio.send(sms())
    assert outcome.error_code == "SMS_INVALID_NUMBER" and not outcome.retryable
    assert outcome.provider == "aakash"
    assert twilio.requests == []


async def test_the_credit_check_reads_aakash_through_the_failover_provider(
    aakash_then_twilio: FailoverProvider,
) -> None:
    assert await aakash_then_twilio.balance() == 1914
