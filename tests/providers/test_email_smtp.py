"""The SMTP email provider against a real SMTP server (aiosmtpd) on 127.0.0.1."""

from __future__ import annotations

import email
import email.policy
import logging
from collections.abc import Iterator
from email.message import EmailMessage

import pytest

from herald.channels import email as herald_email
from herald.channels.base import Message
from herald.channels.smtp import SmtpEmailProvider
from herald.config import Settings
from herald.kinds.sample import ANNOUNCEMENT, PASSWORD_RESET
from herald.rendering.render import render
from tests.providers.servers import SmtpTestServer, smtp_free_port, smtp_server

ADDRESS = "jane.doe@example.com"
SECRET = "R3set-T0ken-884213"


@pytest.fixture
def server() -> Iterator[SmtpTestServer]:
    with smtp_server() as running:
        yield running


def _settings(
    host: str | None,
    port: int,
    *,
    starttls: bool = False,
    username: str | None = None,
    password: str | None = None,
) -> Settings:
    return Settings(
        smtp_host=host,
        smtp_port=port,
        smtp_starttls=starttls,  # the test server speaks plain SMTP
        smtp_username=username,
        smtp_password=password,
        email_from="School <no-reply@school.example>",
    )


def _provider(server: SmtpTestServer) -> SmtpEmailProvider:
    return SmtpEmailProvider(_settings(server.host, server.port))


def _message(values: dict[str, str] | None = None, **overrides: object) -> Message:
    rendered = render(
        ANNOUNCEMENT,
        "email",
        "en",
        values or {"title": "Sports day moved", "message": "It is now on Friday.", "name": "Jane"},
    )
    assert rendered is not None
    fields: dict[str, object] = {
        "channel": "email",
        "to": ADDRESS,
        "title": rendered.title,
        "body": rendered.body,
        "body_html": rendered.body_html,
        "idempotency_key": "delivery-1:1",
    }
    fields.update(overrides)
    return Message(**fields)  # type: ignore[arg-type]


def _reset_message() -> Message:
    rendered = render(PASSWORD_RESET, "email", "en", {"name": "Jane", "token": SECRET})
    assert rendered is not None
    return Message(
        channel="email",
        to=ADDRESS,
        title=rendered.title,
        body=rendered.body,
        body_html=rendered.body_html,
    )


def _received(server: SmtpTestServer) -> EmailMessage:
    assert len(server.handler.received) == 1
    parsed = email.message_from_bytes(
        server.handler.received[0].content, policy=email.policy.default
    )
    assert isinstance(parsed, EmailMessage)
    return parsed


def _our_logs(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(
        record.getMessage() for record in caplog.records if not record.name.startswith("mail.")
    )


def _assert_logs_are_clean(caplog: pytest.LogCaptureFixture, *secrets: str) -> None:
    """R-PROVIDER-10, R-SEC-8, R-SEC-9: no body, no full address in any log line of ours (the
    test server's own `mail.log` is left out: it is the remote side)."""
    text = _our_logs(caplog)
    assert ADDRESS not in text
    for secret in secrets:
        assert secret not in text


async def test_accepted_message_is_sent_with_both_parts(server: SmtpTestServer) -> None:
    """R-PROVIDER-5, R-PROVIDER-1: a 250 is `sent`, the provider id is the Message-ID we wrote,
    and the server receives Subject, From, To, the plain part and the HTML layout."""
    provider = _provider(server)
    outcome = await provider.send(_message(action_url="https://school.example/events/7"))
    await provider.aclose()

    assert outcome.outcome == "sent"
    assert outcome.error_code is None
    envelope = server.handler.received[0]
    assert envelope.mail_from == "no-reply@school.example"
    assert envelope.rcpt_tos == [ADDRESS]
    mime = _received(server)
    assert mime["Message-ID"] == outcome.provider_message_id
    assert mime["Subject"] == "Sports day moved"
    assert mime["From"] == "School <no-reply@school.example>"
    assert mime["To"] == ADDRESS
    assert mime.get_content_type() == "multipart/alternative"
    plain, html = mime.get_body(("plain",)), mime.get_body(("html",))
    assert isinstance(plain, EmailMessage) and isinstance(html, EmailMessage)
    assert "Dear Jane,\n\nIt is now on Friday." in plain.get_content().replace("\r\n", "\n")
    html_text = html.get_content().replace("\r\n", "\n")
    assert '<p style="margin:0 0 16px 0;">It is now on Friday.</p>' in html_text
    assert 'href="https://school.example/events/7"' in html_text


async def test_script_in_a_value_arrives_escaped(server: SmtpTestServer) -> None:
    """R-RENDER-11: a `<script>` in a value reaches the recipient's HTML part escaped."""
    provider = _provider(server)
    values = {"title": "Trip", "message": "<script>alert('x')</script>", "name": "Jane"}
    outcome = await provider.send(_message(values))
    assert outcome.outcome == "sent"
    html = _received(server).get_body(("html",))
    assert isinstance(html, EmailMessage)
    content = html.get_content()
    assert "<script>" not in content
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in content


async def test_javascript_action_url_sends_without_a_button(server: SmtpTestServer) -> None:
    """R-RENDER-25: an unsafe action URL is dropped (no CTA) and the send still goes ahead."""
    provider = _provider(server)
    outcome = await provider.send(_message(action_url="javascript:alert(document.cookie)"))
    assert outcome.outcome == "sent"
    html = _received(server).get_body(("html",))
    assert isinstance(html, EmailMessage)
    content = html.get_content()
    assert "javascript:" not in content
    assert "<a " not in content


async def test_subject_with_crlf_value_is_one_header(server: SmtpTestServer) -> None:
    """R-RENDER-12: a CR/LF in a subject value cannot add a header (no Bcc reaches the server)."""
    provider = _provider(server)
    values = {"title": "Trip\r\nBcc: thief@evil.example", "message": "m", "name": "Jane"}
    outcome = await provider.send(_message(values))
    assert outcome.outcome == "sent"
    assert server.handler.received[0].rcpt_tos == [ADDRESS]
    mime = _received(server)
    assert mime["Bcc"] is None
    assert mime["Subject"] == "Trip Bcc: thief@evil.example"


async def test_550_is_a_non_retryable_rejection(
    server: SmtpTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    """R-PROVIDER-7, R-PROVIDER-24, R-STATE-15: a 5xx refusal of the recipient is EMAIL_REJECTED
    with the SMTP code as suffix, not retryable; the server's text (which quotes the address)
    reaches neither the outcome nor the logs (R-PROVIDER-10)."""
    caplog.set_level(logging.DEBUG)
    server.handler.refuse_rcpt = "550 5.1.1 <{address}>: Recipient address rejected"
    provider = _provider(server)
    outcome = await provider.send(_reset_message())

    assert outcome.outcome == "failed"
    assert outcome.retryable is False
    assert outcome.error_code == "EMAIL_REJECTED:smtp_550"
    assert outcome.detail == "smtp 550 5.1.1"
    assert outcome.error_code.split(":")[0] in herald_email.EMAIL_ERROR_CODES
    assert server.handler.received == []
    for field in (outcome.error_code, outcome.detail or "", outcome.provider_status or ""):
        assert ADDRESS not in field and "Recipient" not in field
    _assert_logs_are_clean(caplog, SECRET, "Recipient address rejected")
    assert "j●●●@example.com" in _our_logs(caplog)


async def test_554_at_data_is_a_non_retryable_rejection(server: SmtpTestServer) -> None:
    """R-PROVIDER-7: a 5xx answer to the message itself is a rejection."""
    server.handler.refuse_data = "554 5.7.1 Message content rejected: " + SECRET
    outcome = await _provider(server).send(_reset_message())
    assert (outcome.outcome, outcome.retryable, outcome.error_code) == (
        "failed",
        False,
        "EMAIL_REJECTED:smtp_554",
    )
    assert SECRET not in (outcome.detail or "")


async def test_451_is_a_retryable_transport_failure(
    server: SmtpTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    """R-PROVIDER-8: a 4xx ("try later") is EMAIL_TRANSPORT and retryable; logged without the
    body or the full address (R-PROVIDER-9, R-PROVIDER-10)."""
    caplog.set_level(logging.DEBUG)
    server.handler.refuse_data = "451 4.3.0 Temporary failure for {address}"
    outcome = await _provider(server).send(_reset_message())

    assert (outcome.outcome, outcome.retryable, outcome.error_code) == (
        "failed",
        True,
        "EMAIL_TRANSPORT",
    )
    assert outcome.detail == "smtp 451 4.3.0"
    _assert_logs_are_clean(caplog, SECRET)
    assert "SMTPDataError" in _our_logs(caplog)


async def test_451_at_rcpt_is_retryable(server: SmtpTestServer) -> None:
    """R-PROVIDER-8: greylisting (4xx to RCPT) is retried, never a rejection."""
    server.handler.refuse_rcpt = "451 4.7.1 Greylisted, try again later"
    outcome = await _provider(server).send(_message())
    assert (outcome.outcome, outcome.retryable, outcome.error_code) == (
        "failed",
        True,
        "EMAIL_TRANSPORT",
    )


async def test_server_down_is_a_retryable_transport_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R-PROVIDER-8, R-PROVIDER-9: a refused connection is EMAIL_TRANSPORT, retryable, and
    logged with the exception's class and text, the address masked and the body absent."""
    caplog.set_level(logging.DEBUG)
    provider = SmtpEmailProvider(_settings("127.0.0.1", smtp_free_port()))
    outcome = await provider.send(_reset_message())

    assert (outcome.outcome, outcome.retryable, outcome.error_code) == (
        "failed",
        True,
        "EMAIL_TRANSPORT",
    )
    assert outcome.detail == "SMTPConnectError"
    assert "SMTPConnectError" in _our_logs(caplog)
    assert "j●●●@example.com" in _our_logs(caplog)
    _assert_logs_are_clean(caplog, SECRET)


async def test_starttls_required_but_not_offered_is_transport(server: SmtpTestServer) -> None:
    """R-PROVIDER-8: with STARTTLS on and a server that does not offer it, nothing is sent in
    clear; the failure is a retryable transport fault (a TLS problem, not a message decision)."""
    provider = SmtpEmailProvider(_settings(server.host, server.port, starttls=True))
    outcome = await provider.send(_message())
    assert (outcome.outcome, outcome.retryable, outcome.error_code) == (
        "failed",
        True,
        "EMAIL_TRANSPORT",
    )
    assert server.handler.received == []


@pytest.mark.parametrize("to", ["", "   ", "not-an-address", "jane@example.com\r\nBcc: x@y.z"])
async def test_no_usable_address_is_no_address(server: SmtpTestServer, to: str) -> None:
    """R-PROVIDER-11: no address is a non-retryable EMAIL_NO_ADDRESS and nothing is sent."""
    outcome = await _provider(server).send(_message(to=to))
    assert (outcome.outcome, outcome.retryable, outcome.error_code) == (
        "failed",
        False,
        "EMAIL_NO_ADDRESS",
    )
    assert server.handler.received == []


async def test_unconfigured_is_skipped_and_quiet(caplog: pytest.LogCaptureFixture) -> None:
    """R-PROVIDER-13, R-PROVIDER-14, R-OBS-4: constructed without a host, the provider says it
    is unconfigured, answers skipped/unconfigured without raising, and logs nothing."""
    caplog.set_level(logging.DEBUG)
    provider = SmtpEmailProvider(_settings(None, 587))
    assert provider.is_configured() is False
    assert provider.is_mock is False
    assert (provider.channel, provider.name) == ("email", "smtp")
    outcome = await provider.send(_message())
    assert (outcome.outcome, outcome.skip_reason, outcome.error_code) == (
        "skipped",
        "unconfigured",
        None,
    )
    await provider.aclose()
    assert _our_logs(caplog) == ""


def test_configured_when_a_host_is_set() -> None:
    """R-PROVIDER-13: a host is what makes SMTP configured."""
    assert SmtpEmailProvider(_settings("smtp.example", 587)).is_configured() is True


async def test_username_and_password_log_in() -> None:
    """HERALD_SMTP_USERNAME/PASSWORD: the provider authenticates before sending."""
    with smtp_server(credentials=("herald", "s3cret-pass")) as server:
        provider = SmtpEmailProvider(
            _settings(server.host, server.port, username="herald", password="s3cret-pass")
        )
        outcome = await provider.send(_message())
    assert outcome.outcome == "sent"
    assert server.handler.logins == ["herald"]
    assert len(server.handler.received) == 1


async def test_wrong_password_is_transport_not_a_rejection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R-PROVIDER-7, R-PROVIDER-8: a refused login says nothing about the message, so it is a
    retryable EMAIL_TRANSPORT (the operator can fix the password); the password is not logged."""
    caplog.set_level(logging.DEBUG)
    with smtp_server(credentials=("herald", "s3cret-pass")) as server:
        provider = SmtpEmailProvider(
            _settings(server.host, server.port, username="herald", password="wrong-pass")
        )
        outcome = await provider.send(_reset_message())
    assert (outcome.outcome, outcome.retryable, outcome.error_code) == (
        "failed",
        True,
        "EMAIL_TRANSPORT",
    )
    assert outcome.detail == "SMTPAuthenticationError"
    assert server.handler.received == []
    _assert_logs_are_clean(caplog, SECRET, "wrong-pass")
