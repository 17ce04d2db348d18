"""The Twilio SMS provider against a local server speaking Twilio's Messages API."""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from herald.channels.base import ProviderOutcome
from herald.channels.sms import SMS_ERROR_CODES, segments, truncate_to_segments
from herald.channels.twilio import TWILIO_ERROR_TABLE, TwilioSmsProvider
from herald.config import Settings
from tests.providers.servers import (
    TWILIO_FROM,
    TWILIO_MESSAGE_SID,
    TWILIO_MESSAGES_PATH,
    TWILIO_SID,
    TWILIO_TOKEN,
    TwilioReply,
    twilio_error,
    twilio_server,
)
from tests.providers.sms_common import OTP, OTP_BODY, TO, assert_no_trace, sms, sms_settings


def twilio_settings(url: str, **overrides: Any) -> Settings:
    values = {
        "twilio_account_sid": TWILIO_SID,
        "twilio_auth_token": TWILIO_TOKEN,
        "twilio_from": TWILIO_FROM,
        "twilio_base_url": url,
    }
    return sms_settings(values, overrides)


@pytest.fixture
def twilio() -> Iterator[Any]:
    with twilio_server() as server:
        yield server


@pytest.fixture
async def provider(twilio: Any) -> AsyncIterator[TwilioSmsProvider]:
    instance = TwilioSmsProvider(twilio_settings(twilio.url))
    yield instance
    await instance.aclose()


# --- sent ------------------------------------------------------------------------------------


async def test_send_posts_the_documented_form_with_basic_auth(
    provider: TwilioSmsProvider, twilio: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """R-PROVIDER-4: one Messages resource per number, exact form fields, Twilio's sid back."""
    caplog.set_level(logging.DEBUG)
    outcome = await provider.send(sms())

    assert outcome == ProviderOutcome.sent(TWILIO_MESSAGE_SID, "queued")
    [request] = twilio.requests
    assert (request.method, request.path) == ("POST", TWILIO_MESSAGES_PATH)
    credentials = base64.b64encode(f"{TWILIO_SID}:{TWILIO_TOKEN}".encode()).decode()
    assert request.headers["authorization"] == f"Basic {credentials}"
    assert request.headers["content-type"] == "application/x-www-form-urlencoded"
    assert request.form == {"To": [TO], "From": [TWILIO_FROM], "Body": [OTP_BODY]}
    assert "+977●●●●●●5678" in caplog.text
    assert_no_trace(outcome, caplog, OTP, "9812345678", TWILIO_TOKEN)


async def test_messaging_service_sid_is_sent_as_such(twilio: Any) -> None:
    """A Messaging Service (MG…) in HERALD_TWILIO_FROM goes out as MessagingServiceSid."""
    service = "MG0123456789abcdef0123456789abcdef"
    provider = TwilioSmsProvider(twilio_settings(twilio.url, twilio_from=service))
    try:
        assert (await provider.send(sms())).outcome == "sent"
    finally:
        await provider.aclose()
    assert twilio.requests[0].form == {
        "To": [TO],
        "MessagingServiceSid": [service],
        "Body": [OTP_BODY],
    }


async def test_devanagari_arrives_intact_and_truncated_to_three_ucs2_segments(
    provider: TwilioSmsProvider, twilio: Any
) -> None:
    """R-CHAN-10, R-CHAN-11: the provider truncates; Nepali text arrives as UTF-8, ≤ 3 segments."""
    short = "तपाईंको कोड ४९३८१७ हो।"
    long = "विद्यालय आज बन्द रहनेछ। " * 40

    assert (await provider.send(sms(short))).outcome == "sent"
    assert (await provider.send(sms(long))).outcome == "sent"

    first, second = twilio.requests
    assert first.field("Body") == short
    received = second.field("Body")
    assert received == truncate_to_segments(long, 3)
    assert received != long
    assert segments(received) == 3


async def test_created_with_an_unreadable_body_is_still_sent(
    provider: TwilioSmsProvider, twilio: Any
) -> None:
    """R-PROVIDER-4: 201 is Twilio's receipt; a retry would send and bill a second message."""
    twilio.reply_with(TwilioReply(status=201, body=b"not json"))
    outcome = await provider.send(sms())
    assert (outcome.outcome, outcome.provider_message_id) == ("sent", None)


# --- failures --------------------------------------------------------------------------------


async def test_invalid_to_echoing_the_number_and_otp_leaves_no_trace(
    provider: TwilioSmsProvider, twilio: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """R-STATE-15, R-PROVIDER-24, R-PROVIDER-25: 21211 → SMS_INVALID_NUMBER, non-retryable,
    detail `twilio_21211`; Twilio's message (quoting the number and the body) goes nowhere."""
    caplog.set_level(logging.DEBUG)
    twilio.reply_with(
        twilio_error(400, 21211, f"The 'To' number {TO} is not a valid phone number: {OTP_BODY}")
    )
    outcome = await provider.send(sms())
    assert (outcome.outcome, outcome.error_code, outcome.retryable, outcome.detail) == (
        "failed",
        "SMS_INVALID_NUMBER",
        False,
        "twilio_21211",
    )
    assert_no_trace(outcome, caplog, OTP, "9812345678", "not a valid phone number")


@pytest.mark.parametrize(
    ("status", "code", "expected", "retryable"),
    [
        (400, 21614, "SMS_INVALID_NUMBER", False),
        (400, 21610, "SMS_REJECTED", False),
        (400, 21408, "SMS_UNSUPPORTED_DESTINATION", False),
        (400, 21611, "SMS_TRANSPORT", True),
        (403, 20005, "SMS_AUTH", False),
        (400, 21999, "SMS_REJECTED", False),  # a code not in the table
        (401, 29999, "SMS_AUTH", False),  # unknown code, auth status
    ],
)
async def test_twilio_error_codes_map_to_the_fixed_table(
    provider: TwilioSmsProvider,
    twilio: Any,
    caplog: pytest.LogCaptureFixture,
    status: int,
    code: int,
    expected: str,
    retryable: bool,
) -> None:
    """R-PROVIDER-24, R-PROVIDER-25: Twilio's numeric code picks the fixed SMS code; the detail
    is the allowlisted `twilio_<code>`, never Twilio's message."""
    twilio.reply_with(twilio_error(status, code, f"Refused: {OTP_BODY}"))
    outcome = await provider.send(sms())
    assert (outcome.error_code, outcome.retryable, outcome.detail) == (
        expected,
        retryable,
        f"twilio_{code}",
    )
    assert_no_trace(outcome, caplog, OTP, "Refused")


def test_twilio_table_uses_only_sms_codes() -> None:
    """R-PROVIDER-25: every code the Twilio table can emit is in SMS_ERROR_CODES."""
    assert {code for code, _ in TWILIO_ERROR_TABLE.values()} <= set(SMS_ERROR_CODES)


async def test_wrong_credentials_are_an_auth_failure(twilio: Any) -> None:
    """R-PROVIDER-24: 401 / 20003 → SMS_AUTH, not retryable."""
    provider = TwilioSmsProvider(twilio_settings(twilio.url, twilio_auth_token="wrong"))
    try:
        outcome = await provider.send(sms())
    finally:
        await provider.aclose()
    assert (outcome.error_code, outcome.retryable, outcome.detail) == (
        "SMS_AUTH",
        False,
        "twilio_20003",
    )


async def test_rate_limited_is_retryable_with_retry_after(
    provider: TwilioSmsProvider, twilio: Any
) -> None:
    """R-PROVIDER-24: 429 (20429) is retryable SMS_TRANSPORT, honouring Retry-After."""
    reply = twilio_error(429, 20429, "Too Many Requests")
    twilio.reply_with(TwilioReply(status=429, body=reply.body, headers={"Retry-After": "12"}))
    outcome = await provider.send(sms())
    assert (outcome.error_code, outcome.retryable, outcome.retry_after_seconds, outcome.detail) == (
        "SMS_TRANSPORT",
        True,
        12,
        "twilio_20429",
    )


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_server_errors_are_retryable(
    provider: TwilioSmsProvider, twilio: Any, status: int
) -> None:
    """R-PROVIDER-24: a 5xx (with or without a JSON body) is retryable SMS_TRANSPORT."""
    twilio.reply_with(TwilioReply(status=status, body=f"<html>{OTP_BODY}</html>".encode()))
    outcome = await provider.send(sms())
    assert (outcome.error_code, outcome.retryable, outcome.detail) == (
        "SMS_TRANSPORT",
        True,
        f"http_{status}",
    )


async def test_a_4xx_without_json_is_rejected(provider: TwilioSmsProvider, twilio: Any) -> None:
    """R-PROVIDER-24: a 4xx with an unreadable body is a non-retryable refusal, detail http_4xx."""
    twilio.reply_with(TwilioReply(status=400, body=f"bad request {OTP}".encode()))
    outcome = await provider.send(sms())
    assert (outcome.error_code, outcome.retryable, outcome.detail) == (
        "SMS_REJECTED",
        False,
        "http_400",
    )


async def test_read_timeout_is_retryable(provider: TwilioSmsProvider, twilio: Any) -> None:
    """R-PROVIDER-23: the configured read timeout ends a slow call as retryable transport."""
    twilio.reply_with(TwilioReply(delay_seconds=30))
    outcome = await provider.send(sms())
    assert (outcome.error_code, outcome.retryable, outcome.detail) == (
        "SMS_TRANSPORT",
        True,
        "timeout",
    )


@pytest.mark.parametrize("to", ["9812345678", "+977 981-2345678", "", "+9779812345678,+1"])
async def test_a_non_e164_destination_is_refused_before_sending(
    provider: TwilioSmsProvider, twilio: Any, to: str
) -> None:
    """R-PROVIDER-4, R-PROVIDER-24: a `to` that is not E.164 is SMS_INVALID_NUMBER, not
    retryable, and Twilio is never called."""
    outcome = await provider.send(sms(to=to))
    assert (outcome.outcome, outcome.error_code, outcome.retryable) == (
        "failed",
        "SMS_INVALID_NUMBER",
        False,
    )
    assert twilio.requests == []


# --- unconfigured ----------------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["twilio_account_sid", "twilio_auth_token", "twilio_from"])
async def test_unconfigured_provider_is_constructed_and_skips(twilio: Any, missing: str) -> None:
    """R-PROVIDER-13, R-PROVIDER-14: any missing credential leaves the provider constructed but
    unconfigured; it answers skipped/unconfigured without calling Twilio."""
    provider = TwilioSmsProvider(twilio_settings(twilio.url, **{missing: None}))
    try:
        assert provider.is_configured() is False
        assert provider.is_mock is False
        assert (provider.channel, provider.name) == ("sms", "twilio")
        assert await provider.send(sms()) == ProviderOutcome.unconfigured()
    finally:
        await provider.aclose()
    assert twilio.requests == []


async def test_configured_provider_has_no_balance_api(provider: TwilioSmsProvider) -> None:
    """R-PROVIDER-13, R-CREDIT-4: configured with all three settings; no credit API → None."""
    assert provider.is_configured() is True
    assert await provider.balance() is None
