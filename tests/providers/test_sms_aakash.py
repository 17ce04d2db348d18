"""The Aakash SMS provider against a local server speaking Aakash's v3 API."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from herald.channels.aakash import AakashSmsProvider, credit_url
from herald.channels.base import ProviderOutcome
from herald.channels.sms import segments, truncate_to_segments
from herald.config import Settings
from herald.errors import SmsBalanceUnavailable
from tests.providers.servers import (
    AAKASH_CREDIT_PATH,
    AAKASH_NOT_ENOUGH_BALANCE,
    AAKASH_SEND_PATH,
    AAKASH_TOKEN,
    AakashReply,
    AakashRequest,
    aakash_invalid_number,
    aakash_server,
)
from tests.providers.sms_common import OTP, OTP_BODY, assert_no_trace, sms, sms_settings

NATIONAL = "9812345678"


def aakash_settings(url: str, **overrides: Any) -> Settings:
    values = {"aakash_auth_token": AAKASH_TOKEN, "aakash_base_url": f"{url}/sms/v3"}
    return sms_settings(values, overrides)


@pytest.fixture
def aakash() -> Iterator[Any]:
    with aakash_server() as server:
        yield server


@pytest.fixture
async def provider(aakash: Any) -> AsyncIterator[AakashSmsProvider]:
    instance = AakashSmsProvider(aakash_settings(aakash.url))
    yield instance
    await instance.aclose()


# --- sent ------------------------------------------------------------------------------------


async def test_send_posts_the_documented_form_and_reads_the_message_id(
    provider: AakashSmsProvider, aakash: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """R-PROVIDER-4: one POST per number, exact form fields, one outcome with Aakash's id."""
    caplog.set_level(logging.DEBUG)
    outcome = await provider.send(sms())

    assert outcome == ProviderOutcome.sent("2673160", "queued")
    [request] = aakash.requests
    assert (request.method, request.path) == ("POST", AAKASH_SEND_PATH)
    assert request.headers["content-type"] == "application/x-www-form-urlencoded"
    assert request.form == {"auth_token": [AAKASH_TOKEN], "to": [NATIONAL], "text": [OTP_BODY]}
    # Logs: the number masked, never the body or the token.
    assert "+977●●●●●●5678" in caplog.text
    assert_no_trace(outcome, caplog, OTP, NATIONAL, AAKASH_TOKEN)


async def test_devanagari_arrives_intact_and_truncated_to_three_ucs2_segments(
    provider: AakashSmsProvider, aakash: Any
) -> None:
    """R-CHAN-10, R-CHAN-11: the provider truncates; Nepali text arrives as UTF-8, ≤ 3 segments."""
    short = "तपाईंको कोड ४९३८१७ हो।"
    long = "विद्यालय आज बन्द रहनेछ। " * 40

    assert (await provider.send(sms(short))).outcome == "sent"
    assert (await provider.send(sms(long))).outcome == "sent"

    first, second = aakash.requests
    assert first.field("text") == short
    received = second.field("text")
    assert received == truncate_to_segments(long, 3)
    assert received != long
    assert segments(received) == 3
    assert long.startswith(received.removesuffix("…"))


# --- failures --------------------------------------------------------------------------------


async def test_not_enough_balance_is_a_non_retryable_failure(
    provider: AakashSmsProvider, aakash: Any
) -> None:
    """R-PROVIDER-20, R-PROVIDER-21: HTTP 200 with error:true "Not enough balance." fails, and
    is not retryable (the delivery goes straight to dead)."""
    aakash.reply_with(AakashReply(status=200, body=AAKASH_NOT_ENOUGH_BALANCE))
    outcome = await provider.send(sms())
    assert outcome.outcome == "failed"
    assert outcome.error_code == "SMS_INSUFFICIENT_BALANCE"
    assert outcome.retryable is False


async def test_invalid_number_answer_echoing_the_otp_leaves_no_trace(
    provider: AakashSmsProvider, aakash: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """R-STATE-15, R-PROVIDER-24, R-PROVIDER-25: Aakash echoes the text (an OTP) and the number
    in its failure body; the outcome carries only a fixed code and an allowlisted detail, and no
    log line carries the OTP."""
    caplog.set_level(logging.DEBUG)
    aakash.reply_with(AakashReply(body=aakash_invalid_number))
    outcome = await provider.send(sms())

    assert (outcome.outcome, outcome.error_code, outcome.retryable) == (
        "failed",
        "SMS_INVALID_NUMBER",
        False,
    )
    assert outcome.detail == "aakash:invalid_number"
    assert OTP in aakash.requests[0].field("text")  # the OTP really was sent and echoed
    assert_no_trace(outcome, caplog, OTP, NATIONAL, "Invalid number")


async def test_invalid_number_listed_with_error_false_is_still_invalid(
    provider: AakashSmsProvider, aakash: Any
) -> None:
    """R-PROVIDER-4: the one target is in data.invalid, so its outcome is a failure."""

    def answer(request: AakashRequest) -> dict[str, Any]:
        body = aakash_invalid_number(request)
        return {**body, "error": False, "message": "0 messages has been queued for delivery."}

    aakash.reply_with(AakashReply(body=answer))
    outcome = await provider.send(sms())
    assert (outcome.error_code, outcome.retryable) == ("SMS_INVALID_NUMBER", False)


async def test_other_error_echoing_the_otp_is_rejected_without_trace(
    provider: AakashSmsProvider, aakash: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """R-STATE-15, R-PROVIDER-24: an unknown error:true answer is SMS_REJECTED, non-retryable;
    its message — which quotes the text — reaches neither the outcome nor the logs. A text that
    itself says "Not enough balance." cannot steer the classification either."""
    caplog.set_level(logging.DEBUG)

    def answer(request: AakashRequest) -> dict[str, Any]:
        return {"error": True, "message": f"Could not send: {request.field('text')}", "data": []}

    aakash.reply_with(AakashReply(body=answer))
    body = f"Not enough balance. {OTP}"
    outcome = await provider.send(sms(body))

    assert (outcome.outcome, outcome.error_code, outcome.retryable) == (
        "failed",
        "SMS_REJECTED",
        False,
    )
    assert_no_trace(outcome, caplog, OTP, "Could not send", "balance")


async def test_wrong_token_is_an_auth_failure(aakash: Any) -> None:
    """R-PROVIDER-24: "The provided Auth Token is not valid." → SMS_AUTH, not retryable."""
    provider = AakashSmsProvider(aakash_settings(aakash.url, aakash_auth_token="wrong"))
    try:
        outcome = await provider.send(sms())
    finally:
        await provider.aclose()
    assert (outcome.error_code, outcome.retryable) == ("SMS_AUTH", False)
    assert aakash.requests[0].field("auth_token") == "wrong"


async def test_rate_limited_is_retryable_with_retry_after(
    provider: AakashSmsProvider, aakash: Any
) -> None:
    """R-PROVIDER-24: 429 is transport trouble: retryable, honouring Retry-After."""
    aakash.reply_with(
        AakashReply(status=429, body={"message": OTP_BODY}, headers={"Retry-After": "30"})
    )
    outcome = await provider.send(sms())
    assert (outcome.error_code, outcome.retryable, outcome.retry_after_seconds) == (
        "SMS_TRANSPORT",
        True,
        30,
    )
    assert outcome.detail == "http_429"


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_server_errors_are_retryable(
    provider: AakashSmsProvider, aakash: Any, status: int
) -> None:
    """R-PROVIDER-24: a 5xx is retryable SMS_TRANSPORT with the status as the only detail."""
    aakash.reply_with(AakashReply(status=status, body={"error": True, "message": OTP_BODY}))
    outcome = await provider.send(sms())
    assert (outcome.error_code, outcome.retryable, outcome.detail) == (
        "SMS_TRANSPORT",
        True,
        f"http_{status}",
    )


@pytest.mark.parametrize(
    "body",
    [f"<html>gateway echo {OTP_BODY}</html>".encode(), b"", b'{"error": false', b"[1, 2]"],
)
async def test_malformed_200_is_retryable_and_leaves_no_trace(
    provider: AakashSmsProvider, aakash: Any, caplog: pytest.LogCaptureFixture, body: bytes
) -> None:
    """R-PROVIDER-20, R-STATE-15: a 200 without a readable verdict is no receipt: retryable
    SMS_TRANSPORT, and nothing of the body survives."""
    caplog.set_level(logging.DEBUG)
    aakash.reply_with(AakashReply(status=200, body=body))
    outcome = await provider.send(sms())
    assert (outcome.error_code, outcome.retryable, outcome.detail) == (
        "SMS_TRANSPORT",
        True,
        "malformed_body",
    )
    assert_no_trace(outcome, caplog, OTP, "gateway echo")


async def test_read_timeout_is_retryable(provider: AakashSmsProvider, aakash: Any) -> None:
    """R-PROVIDER-23: the configured read timeout ends a slow call as retryable transport."""
    aakash.reply_with(AakashReply(delay_seconds=30))
    outcome = await provider.send(sms())
    assert (outcome.error_code, outcome.retryable, outcome.detail) == (
        "SMS_TRANSPORT",
        True,
        "timeout",
    )


async def test_connection_refused_is_retryable() -> None:
    """R-PROVIDER-22: a provider that cannot be reached is retryable transport trouble."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = AakashSmsProvider(aakash_settings(f"http://127.0.0.1:{port}"))
    try:
        outcome = await provider.send(sms())
    finally:
        await provider.aclose()
    assert (outcome.error_code, outcome.retryable) == ("SMS_TRANSPORT", True)
    assert outcome.detail == "ConnectError"


async def test_not_found_without_json_is_rejected(aakash: Any) -> None:
    """R-PROVIDER-24: a 404 page (a wrong base URL) is a non-retryable refusal, detail http_404."""
    provider = AakashSmsProvider(aakash_settings(aakash.url + "/wrong"))
    try:
        outcome = await provider.send(sms())
    finally:
        await provider.aclose()
    assert (outcome.error_code, outcome.retryable, outcome.detail) == (
        "SMS_REJECTED",
        False,
        "http_404",
    )


# --- destinations ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("to", "code"),
    [
        ("+14155552671", "SMS_UNSUPPORTED_DESTINATION"),
        ("9812345678", "SMS_INVALID_NUMBER"),
        ("+977 981-2345678", "SMS_INVALID_NUMBER"),
        ("+9779812345678,+9779812345679", "SMS_INVALID_NUMBER"),
        ("+97714412345", "SMS_INVALID_NUMBER"),
    ],
)
async def test_destinations_aakash_cannot_take_are_refused_before_sending(
    provider: AakashSmsProvider, aakash: Any, to: str, code: str
) -> None:
    """R-PROVIDER-4, R-PROVIDER-24: a non-E.164 or non-Nepali `to` is refused, not retryable,
    and nothing is sent (and billed)."""
    outcome = await provider.send(sms(to=to))
    assert (outcome.outcome, outcome.error_code, outcome.retryable) == ("failed", code, False)
    assert aakash.requests == []


# --- unconfigured ----------------------------------------------------------------------------


async def test_unconfigured_provider_is_constructed_and_skips(aakash: Any) -> None:
    """R-PROVIDER-13, R-PROVIDER-14: constructed without a token, reports unconfigured, answers
    skipped/unconfigured without raising or calling Aakash; its balance is None (R-CREDIT-3)."""
    provider = AakashSmsProvider(aakash_settings(aakash.url, aakash_auth_token=None))
    try:
        assert provider.is_configured() is False
        assert provider.is_mock is False
        assert (provider.channel, provider.name) == ("sms", "aakash")
        assert await provider.send(sms()) == ProviderOutcome.unconfigured()
        assert await provider.balance() is None
    finally:
        await provider.aclose()
    assert aakash.requests == []


async def test_configured_provider_reports_configured(provider: AakashSmsProvider) -> None:
    """R-PROVIDER-13: a token makes the provider configured."""
    assert provider.is_configured() is True


# --- balance ---------------------------------------------------------------------------------


def test_credit_url_sits_beside_the_v3_base() -> None:
    assert (
        credit_url("https://sms.aakashsms.com/sms/v3") == "https://sms.aakashsms.com/sms/v1/credit"
    )
    assert (
        credit_url("https://sms.aakashsms.com/sms/v3/") == "https://sms.aakashsms.com/sms/v1/credit"
    )
    assert credit_url("https://proxy.example/aakash") == "https://proxy.example/aakash/v1/credit"


async def test_balance_reads_available_credit(provider: AakashSmsProvider, aakash: Any) -> None:
    """R-CREDIT-1: one HTTP call to the credit endpoint reads the balance."""
    assert await provider.balance() == 1914.0
    [request] = aakash.requests
    assert (request.method, request.path) == ("POST", AAKASH_CREDIT_PATH)
    assert request.form == {"auth_token": [AAKASH_TOKEN]}


@pytest.mark.parametrize(
    "reply",
    [
        AakashReply(status=200, body={"error": True, "message": f"Token invalid {OTP}"}),
        AakashReply(status=503, body={"message": OTP}),
        AakashReply(status=200, body=f"<html>{OTP}</html>".encode()),
        AakashReply(status=200, body={"available_credit": "lots", "note": OTP}),
        AakashReply(status=200, body={"available_credit": True}),
    ],
)
async def test_balance_failure_raises_a_clear_error_without_provider_text(
    provider: AakashSmsProvider, aakash: Any, reply: AakashReply
) -> None:
    """R-CREDIT-5, R-STATE-15: a failed balance read raises SmsBalanceUnavailable for the
    caller to log; its message holds no provider text."""
    aakash.reply_with(reply)
    with pytest.raises(SmsBalanceUnavailable) as caught:
        await provider.balance()
    assert OTP not in str(caught.value)


async def test_balance_with_a_wrong_token_raises(aakash: Any) -> None:
    """R-CREDIT-5: Aakash's auth refusal surfaces as SmsBalanceUnavailable."""
    provider = AakashSmsProvider(aakash_settings(aakash.url, aakash_auth_token="wrong"))
    try:
        with pytest.raises(SmsBalanceUnavailable, match="auth_token_invalid"):
            await provider.balance()
    finally:
        await provider.aclose()
