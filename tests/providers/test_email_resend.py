"""The Resend email provider against a local HTTP server speaking Resend's POST /emails."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from herald.channels import email as herald_email
from herald.channels.base import Message, ProviderOutcome
from herald.channels.resend import ResendEmailProvider
from herald.config import Settings
from herald.kinds.sample import OTP
from herald.rendering.render import render
from tests.providers.servers import (
    ResendReply,
    ResendTestServer,
    resend_error,
    resend_server,
    smtp_free_port,
)

API_KEY = "re_test_key_0123456789"
ADDRESS = "jane.doe@example.com"
OTP_CODE = "493817"


@pytest.fixture
def server() -> Iterator[ResendTestServer]:
    with resend_server() as running:
        yield running


def _settings(base_url: str, *, read_timeout: float = 10.0) -> Settings:
    return Settings(
        resend_api_key=API_KEY,
        resend_base_url=base_url,
        email_from="School <no-reply@school.example>",
        provider_read_timeout_seconds=read_timeout,
    )


def _otp_message(**overrides: object) -> Message:
    rendered = render(OTP, "email", "en", {"name": "Jane", "code": OTP_CODE})
    assert rendered is not None
    fields: dict[str, object] = {
        "channel": "email",
        "to": ADDRESS,
        "title": rendered.title,
        "body": rendered.body,
        "body_html": rendered.body_html,
        "idempotency_key": "delivery-42:email",
    }
    fields.update(overrides)
    return Message(**fields)  # type: ignore[arg-type]


async def _send(settings: Settings, message: Message | None = None) -> ProviderOutcome:
    provider = ResendEmailProvider(settings)
    try:
        return await provider.send(message or _otp_message())
    finally:
        await provider.aclose()


def _our_logs(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(record.getMessage() for record in caplog.records)


def _assert_clean(outcome: ProviderOutcome, caplog: pytest.LogCaptureFixture) -> None:
    """R-PROVIDER-10, R-PROVIDER-24, R-STATE-15, R-SEC-8/9: neither the outcome nor any log line
    carries the address, the OTP, the body or the API key."""
    recorded = " ".join(
        str(value)
        for value in (outcome.error_code, outcome.detail, outcome.provider_status, outcome.outcome)
    )
    logs = _our_logs(caplog)
    for text in (recorded, logs):
        assert ADDRESS not in text
        assert OTP_CODE not in text
        assert "Your code is" not in text
        assert API_KEY not in text


async def test_success_is_sent_with_key_idempotency_and_json(
    server: ResendTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    """R-PROVIDER-5: 200 {"id"} is `sent` with Resend's id; the request carries the Bearer key,
    the Idempotency-Key and the one build's from/to/subject/html/text (R-PROVIDER-1)."""
    caplog.set_level(logging.DEBUG)
    server.reply_with(ResendReply(body={"id": "4ef9a417-02e9-4d39-ad75-9611e0fcc33c"}))
    message = _otp_message(action_url="https://school.example/sign-in")
    outcome = await _send(_settings(server.base_url), message)

    assert outcome.outcome == "sent"
    assert outcome.provider_message_id == "4ef9a417-02e9-4d39-ad75-9611e0fcc33c"
    assert len(server.requests) == 1
    request = server.requests[0]
    assert (request.method, request.path) == ("POST", "/emails")
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.headers["idempotency-key"] == "delivery-42:email"
    assert request.headers["content-type"] == "application/json"
    payload = request.json()
    built = herald_email.build_email(message, _settings(server.base_url))
    assert set(payload) == {"from", "to", "subject", "html", "text"}
    assert payload["from"] == "School <no-reply@school.example>"
    assert payload["to"] == [ADDRESS]
    assert payload["subject"] == "Your sign-in code"
    assert payload["text"] == built.text
    assert OTP_CODE in payload["text"] and OTP_CODE in payload["html"]
    assert 'href="https://school.example/sign-in"' in payload["html"]
    assert payload["html"] == built.html
    _assert_clean(outcome, caplog)


async def test_validation_error_echoing_address_and_otp_is_redacted(
    server: ResendTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    """R-PROVIDER-7, R-PROVIDER-24, R-PROVIDER-25, R-STATE-15: a 422 is a non-retryable
    EMAIL_REJECTED:validation_error; Resend's `message`, which here echoes the address and the
    OTP, reaches neither the error code, the detail, nor the logs."""
    caplog.set_level(logging.DEBUG)
    server.reply_with(
        resend_error(
            422,
            "validation_error",
            f"Invalid `to` field {ADDRESS}: body 'Your code is {OTP_CODE}' rejected",
        )
    )
    outcome = await _send(_settings(server.base_url))

    assert outcome.outcome == "failed"
    assert outcome.retryable is False
    assert outcome.error_code == "EMAIL_REJECTED:validation_error"
    assert outcome.detail == "http_422 validation_error"
    assert outcome.error_code.split(":")[0] in herald_email.EMAIL_ERROR_CODES
    _assert_clean(outcome, caplog)
    assert "j●●●@example.com" in _our_logs(caplog)


async def test_error_name_that_is_not_a_token_is_not_used(
    server: ResendTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    """R-PROVIDER-24, R-PROVIDER-25: a `name` that is not an allowlisted token (here it carries
    the OTP and the address) falls back to the HTTP status."""
    caplog.set_level(logging.DEBUG)
    server.reply_with(resend_error(400, f"code {OTP_CODE} for {ADDRESS}", "nope"))
    outcome = await _send(_settings(server.base_url))
    assert (outcome.retryable, outcome.error_code, outcome.detail) == (
        False,
        "EMAIL_REJECTED:http_400",
        "http_400",
    )
    _assert_clean(outcome, caplog)


async def test_429_is_retryable_with_retry_after(
    server: ResendTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    """R-PROVIDER-8: a rate limit is a retryable EMAIL_TRANSPORT carrying Retry-After."""
    caplog.set_level(logging.DEBUG)
    server.reply_with(
        ResendReply(
            status=429,
            body={"statusCode": 429, "name": "rate_limit_exceeded", "message": OTP_CODE},
            headers={"Retry-After": "7"},
        )
    )
    outcome = await _send(_settings(server.base_url))
    assert (outcome.outcome, outcome.retryable, outcome.error_code) == (
        "failed",
        True,
        "EMAIL_TRANSPORT",
    )
    assert outcome.retry_after_seconds == 7
    assert outcome.detail == "http_429 rate_limit_exceeded"
    _assert_clean(outcome, caplog)


async def test_429_with_an_http_date_retry_after(server: ResendTestServer) -> None:
    """Retry-After may be an HTTP date (RFC 9110); it becomes a bounded number of seconds."""
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    server.reply_with(ResendReply(status=429, body={}, headers={"Retry-After": when}))
    outcome = await _send(_settings(server.base_url))
    assert outcome.retryable is True
    assert outcome.retry_after_seconds is not None
    assert 0 < outcome.retry_after_seconds <= 121


async def test_429_without_retry_after(server: ResendTestServer) -> None:
    server.reply_with(ResendReply(status=429, body={"name": "daily_quota_exceeded"}))
    outcome = await _send(_settings(server.base_url))
    assert (outcome.retryable, outcome.error_code, outcome.retry_after_seconds) == (
        True,
        "EMAIL_TRANSPORT",
        None,
    )


async def test_500_is_retryable_transport(
    server: ResendTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    """R-PROVIDER-8: a 5xx is a retryable EMAIL_TRANSPORT; the body's text is not kept."""
    caplog.set_level(logging.DEBUG)
    server.reply_with(
        resend_error(500, "internal_server_error", f"failed sending {OTP_CODE} to {ADDRESS}")
    )
    outcome = await _send(_settings(server.base_url))
    assert (outcome.outcome, outcome.retryable, outcome.error_code, outcome.detail) == (
        "failed",
        True,
        "EMAIL_TRANSPORT",
        "http_500 internal_server_error",
    )
    _assert_clean(outcome, caplog)


async def test_read_timeout_is_retryable_transport(
    server: ResendTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    """R-PROVIDER-8, R-PROVIDER-23: an answer slower than the read timeout (0.5 s here) is a
    retryable EMAIL_TRANSPORT, logged with the exception class (R-PROVIDER-9)."""
    caplog.set_level(logging.DEBUG)
    server.reply_with(ResendReply(delay_seconds=30))  # released when the server stops
    outcome = await _send(_settings(server.base_url, read_timeout=0.5))
    assert (outcome.outcome, outcome.retryable, outcome.error_code, outcome.detail) == (
        "failed",
        True,
        "EMAIL_TRANSPORT",
        "ReadTimeout",
    )
    assert "ReadTimeout" in _our_logs(caplog)
    _assert_clean(outcome, caplog)


async def test_connection_refused_is_retryable_transport(caplog: pytest.LogCaptureFixture) -> None:
    """R-PROVIDER-8, R-PROVIDER-9: nothing listening is a retryable EMAIL_TRANSPORT, logged with
    its class; the address masked (R-PROVIDER-10)."""
    caplog.set_level(logging.DEBUG)
    outcome = await _send(_settings(f"http://127.0.0.1:{smtp_free_port()}"))
    assert (outcome.outcome, outcome.retryable, outcome.error_code, outcome.detail) == (
        "failed",
        True,
        "EMAIL_TRANSPORT",
        "ConnectError",
    )
    assert "ConnectError" in _our_logs(caplog)
    assert "j●●●@example.com" in _our_logs(caplog)
    _assert_clean(outcome, caplog)


@pytest.mark.parametrize(
    "body", [b"not json", b'{"id": 42}', b"[]", b'{"id": "bad id with spaces"}', b""]
)
async def test_malformed_success_is_retryable_transport(
    server: ResendTestServer, body: bytes
) -> None:
    """A 2xx we cannot read is ambiguous; it is retried (the Idempotency-Key makes the retry
    unable to send twice), never reported as sent."""
    server.reply_with(ResendReply(status=200, body=body))
    outcome = await _send(_settings(server.base_url))
    assert (outcome.outcome, outcome.retryable, outcome.error_code, outcome.detail) == (
        "failed",
        True,
        "EMAIL_TRANSPORT",
        "malformed_response",
    )


async def test_retry_after_malformed_answer_reuses_the_idempotency_key(
    server: ResendTestServer,
) -> None:
    """The retry of an ambiguous send carries the same Idempotency-Key as the first call."""
    server.reply_with(ResendReply(status=200, body=b"garbled"), ResendReply())
    provider = ResendEmailProvider(_settings(server.base_url))
    try:
        first = await provider.send(_otp_message())
        second = await provider.send(_otp_message())
    finally:
        await provider.aclose()
    assert (first.outcome, second.outcome) == ("failed", "sent")
    keys = [request.headers["idempotency-key"] for request in server.requests]
    assert keys == ["delivery-42:email", "delivery-42:email"]


@pytest.mark.parametrize(
    ("status", "name"),
    [
        (401, "missing_api_key"),
        (401, "validation_error"),  # Resend's answer to a bad key on the sending endpoint
        (403, "invalid_api_key"),
        (409, "concurrent_idempotent_requests"),
    ],
)
async def test_answers_not_about_the_message_are_retryable(
    server: ResendTestServer, status: int, name: str
) -> None:
    """R-PROVIDER-7 names a rejection as a decision about this message; a bad key or the same
    key still in flight is not one, so the message is kept for a retry."""
    server.reply_with(resend_error(status, name, f"{ADDRESS} {OTP_CODE}"))
    outcome = await _send(_settings(server.base_url))
    assert (outcome.retryable, outcome.error_code) == (True, "EMAIL_TRANSPORT")
    assert outcome.detail == f"http_{status} {name}"


async def test_no_address_is_refused_before_any_call(server: ResendTestServer) -> None:
    """R-PROVIDER-11: no address is a non-retryable EMAIL_NO_ADDRESS and Resend is not called."""
    outcome = await _send(_settings(server.base_url), _otp_message(to=""))
    assert (outcome.outcome, outcome.retryable, outcome.error_code) == (
        "failed",
        False,
        "EMAIL_NO_ADDRESS",
    )
    assert server.requests == []


async def test_without_idempotency_key_no_header_is_sent(server: ResendTestServer) -> None:
    outcome = await _send(_settings(server.base_url), _otp_message(idempotency_key=None))
    assert outcome.outcome == "sent"
    assert "idempotency-key" not in server.requests[0].headers


async def test_long_idempotency_key_is_hashed_to_fit(server: ResendTestServer) -> None:
    """Resend refuses keys over 256 characters; a long key is hashed (still stable per key)."""
    long_key = "k" * 300
    await _send(_settings(server.base_url), _otp_message(idempotency_key=long_key))
    await _send(_settings(server.base_url), _otp_message(idempotency_key=long_key))
    keys = [request.headers["idempotency-key"] for request in server.requests]
    assert len(keys[0]) == 64 and keys[0] == keys[1]


async def test_unconfigured_is_skipped_and_quiet(caplog: pytest.LogCaptureFixture) -> None:
    """R-PROVIDER-13, R-PROVIDER-14, R-OBS-4: without a key the provider is constructed,
    reports unconfigured, answers skipped/unconfigured and logs nothing."""
    caplog.set_level(logging.DEBUG)
    provider = ResendEmailProvider(Settings(resend_api_key=None))
    assert provider.is_configured() is False
    assert provider.is_mock is False
    assert (provider.channel, provider.name) == ("email", "resend")
    outcome = await provider.send(_otp_message())
    await provider.aclose()
    assert (outcome.outcome, outcome.skip_reason) == ("skipped", "unconfigured")
    assert caplog.records == []


def test_configured_when_a_key_is_set() -> None:
    """R-PROVIDER-13: the key is what makes Resend configured."""
    assert ResendEmailProvider(_settings("http://127.0.0.1:1")).is_configured() is True
