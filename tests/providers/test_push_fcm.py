"""The FCM push provider against a local server speaking FCM v1 and Google's OAuth token endpoint.

The server checks the JWT assertion's RS256 signature with the public half of a key generated
here, and accepts messages only with an access token it issued.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from herald.channels.base import Message, ProviderOutcome
from herald.channels.fcm import (
    PUSH_ERROR_CODES,
    FcmPushProvider,
    build_fcm_message,
    mask_device_token,
    parse_retry_after,
)
from herald.config import Settings
from tests.providers.outcomes import assert_failed
from tests.providers.servers import (
    FcmReply,
    FcmTestServer,
    fcm_error,
    fcm_server,
    smtp_free_port,
)

PROJECT = "herald-test-project"
CLIENT_EMAIL = "herald-push@herald-test-project.iam.gserviceaccount.com"
DEVICE_TOKEN = "fTq9:APA91bH-device-token-for-a-test-phone-0123456789abcdefXYZ987"
OTP = "OTP-884213"


@dataclass(frozen=True)
class KeyPair:
    private_pem: str
    public_pem: bytes


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _generate_key() -> KeyPair:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(private_pem, public_pem)


@pytest.fixture(scope="module")
def key() -> KeyPair:
    return _generate_key()


def _write_account(tmp_path: Path, key: KeyPair, **extra: Any) -> Path:
    account = {
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": "test-key-1",
        "private_key": key.private_pem,
        "client_email": CLIENT_EMAIL,
        **extra,
    }
    path = tmp_path / "service-account.json"
    path.write_text(json.dumps(account))
    return path


@pytest.fixture
def account_file(tmp_path: Path, key: KeyPair) -> Path:
    return _write_account(tmp_path, key)


@pytest.fixture
def server(key: KeyPair) -> Iterator[FcmTestServer]:
    with fcm_server(key.public_pem, CLIENT_EMAIL, PROJECT) as running:
        yield running


def _settings(
    account_file: Path | None,
    server: FcmTestServer | None = None,
    *,
    base_url: str | None = None,
    token_url: str | None = None,
    read_timeout: float = 5.0,
) -> Settings:
    return Settings(
        push_provider="fcm",
        fcm_service_account_file=account_file,
        fcm_base_url=base_url or (server.base_url if server else "http://127.0.0.1:9"),
        fcm_token_url=token_url or (server.token_url if server else "http://127.0.0.1:9/token"),
        provider_connect_timeout_seconds=2.0,
        provider_read_timeout_seconds=read_timeout,
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def provider(
    account_file: Path, server: FcmTestServer, clock: FakeClock
) -> AsyncIterator[FcmPushProvider]:
    instance = FcmPushProvider(_settings(account_file, server), clock=clock)
    yield instance
    await instance.aclose()


@pytest.fixture
async def impatient(account_file: Path, server: FcmTestServer) -> AsyncIterator[FcmPushProvider]:
    """A provider with a 0.5 s read timeout, for servers that hold their answer for 5 s."""
    instance = FcmPushProvider(_settings(account_file, server, read_timeout=0.5))
    yield instance
    await instance.aclose()


_message = partial(
    Message,
    channel="push",
    to=DEVICE_TOKEN,
    title="Sports day moved",
    body="It is now on Friday.",
    action_url="https://school.example/announcements/42",
    platform="android",
    priority="normal",
)


_assert_failure = partial(assert_failed, codes=PUSH_ERROR_CODES)


# -- configuration -------------------------------------------------------------------------------


async def test_unconfigured_without_a_service_account_file() -> None:
    """R-PROVIDER-13, R-PROVIDER-14: built without credentials; send is skipped/unconfigured."""
    provider = FcmPushProvider(_settings(None))
    assert provider.is_configured() is False
    assert provider.is_mock is False
    outcome = await provider.send(_message())
    assert outcome == ProviderOutcome.unconfigured()
    await provider.aclose()


@pytest.mark.parametrize(
    "content",
    [None, "{not json", "[]", json.dumps({"project_id": PROJECT, "client_email": CLIENT_EMAIL})],
    ids=["missing", "malformed", "not-an-object", "no-private-key"],
)
async def test_unusable_service_account_file_is_unconfigured(
    tmp_path: Path, content: str | None
) -> None:
    """R-PROVIDER-13, R-PROVIDER-14: an unusable key file never fails construction."""
    path = tmp_path / "account.json"
    if content is not None:
        path.write_text(content)
    provider = FcmPushProvider(_settings(path))
    assert provider.is_configured() is False
    assert (await provider.send(_message())).skip_reason == "unconfigured"


async def test_a_key_that_is_not_pem_is_unconfigured(tmp_path: Path) -> None:
    """R-PROVIDER-13: a private_key that does not parse leaves push unconfigured."""
    path = tmp_path / "account.json"
    path.write_text(
        json.dumps(
            {"project_id": PROJECT, "client_email": CLIENT_EMAIL, "private_key": "not a key"}
        )
    )
    assert FcmPushProvider(_settings(path)).is_configured() is False


async def test_configured_with_a_readable_service_account(provider: FcmPushProvider) -> None:
    """R-PROVIDER-13: a readable service account configures the provider."""
    assert provider.is_configured() is True
    assert (provider.channel, provider.name) == ("push", "fcm")


# -- success per platform ------------------------------------------------------------------------


async def test_android_send_carries_the_android_block(
    provider: FcmPushProvider, server: FcmTestServer
) -> None:
    """R-CHAN-14: an android device gets FCM's android block (high priority for urgent)."""
    outcome = await provider.send(_message(platform="android", priority="urgent"))

    assert outcome.outcome == "sent"
    assert outcome.provider_message_id is not None
    assert outcome.provider_message_id.startswith(f"projects/{PROJECT}/messages/")
    [request] = server.requests
    assert request.path == f"/v1/projects/{PROJECT}/messages:send"
    assert request.headers["authorization"] == f"Bearer {server.issued_tokens[0]}"
    sent = request.json()["message"]
    assert sent["token"] == DEVICE_TOKEN
    assert sent["notification"] == {"title": "Sports day moved", "body": "It is now on Friday."}
    assert sent["data"] == {"actionUrl": "https://school.example/announcements/42"}
    assert sent["android"] == {"priority": "high"}
    assert "apns" not in sent
    assert "webpush" not in sent


async def test_android_normal_priority(provider: FcmPushProvider, server: FcmTestServer) -> None:
    """R-CHAN-14: a normal-priority android push is sent at FCM's normal priority."""
    await provider.send(_message(platform="android", priority="normal"))
    assert server.requests[0].json()["message"]["android"] == {"priority": "normal"}


@pytest.mark.parametrize(("priority", "apns_priority"), [("high", "10"), ("low", "5")])
async def test_ios_send_carries_the_apns_block(
    provider: FcmPushProvider, server: FcmTestServer, priority: str, apns_priority: str
) -> None:
    """R-CHAN-14: an ios device gets the apns block with headers and an aps payload."""
    outcome = await provider.send(_message(platform="ios", priority=priority))

    assert outcome.outcome == "sent"
    sent = server.requests[0].json()["message"]
    assert sent["apns"]["headers"] == {"apns-priority": apns_priority}
    assert isinstance(sent["apns"]["payload"]["aps"], dict)
    assert "android" not in sent
    assert "webpush" not in sent


async def test_web_send_links_only_an_https_action_url(
    provider: FcmPushProvider, server: FcmTestServer
) -> None:
    """R-CHAN-14: a web device gets the webpush block; fcm_options.link only for https."""
    await provider.send(_message(platform="web"))
    await provider.send(_message(platform="web", action_url="/announcements/42"))

    first, second = (r.json()["message"] for r in server.requests)
    assert first["webpush"]["fcm_options"] == {"link": "https://school.example/announcements/42"}
    assert "android" not in first
    assert "apns" not in first
    assert "fcm_options" not in second["webpush"]
    assert second["data"] == {"actionUrl": "/announcements/42"}


def test_no_action_url_means_no_data() -> None:
    """actionUrl is in data only when the message has one; no title → no notification title."""
    body = build_fcm_message(_message(action_url=None, title=None, platform=None))
    assert "data" not in body
    assert body["notification"] == {"body": "It is now on Friday."}
    assert not {"android", "apns", "webpush"} & body.keys()


async def test_the_assertion_is_signed_for_the_token_endpoint(
    provider: FcmPushProvider, server: FcmTestServer
) -> None:
    """The OAuth exchange sends an RS256 JWT the server verified with the account's public key."""
    await provider.send(_message())

    [form] = server.token_requests
    assert form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
    [claims] = server.assertion_claims
    assert claims["iss"] == CLIENT_EMAIL
    assert claims["aud"] == server.token_url
    assert claims["exp"] - claims["iat"] == 3600


async def test_the_account_token_uri_is_the_assertion_audience(
    tmp_path: Path, key: KeyPair, server: FcmTestServer
) -> None:
    """With token_uri in the account file, the JWT names it as audience (the post still goes to
    HERALD_FCM_TOKEN_URL, which may be a proxy)."""
    audience = "https://oauth2.googleapis.com/token"
    server.audience = audience
    path = _write_account(tmp_path, key, token_uri=audience)
    provider = FcmPushProvider(_settings(path, server))
    try:
        assert (await provider.send(_message())).outcome == "sent"
    finally:
        await provider.aclose()
    assert server.assertion_claims[0]["aud"] == audience


async def test_an_assertion_signed_with_another_key_is_refused(
    tmp_path: Path, server: FcmTestServer
) -> None:
    """The server's signature check can fail: a foreign key gets no access token → PUSH_AUTH."""
    path = _write_account(tmp_path, _generate_key())
    provider = FcmPushProvider(_settings(path, server))
    try:
        outcome = await provider.send(_message())
    finally:
        await provider.aclose()
    _assert_failure(outcome, "PUSH_AUTH", retryable=True)
    assert outcome.detail == "token_http_400"
    assert server.requests == []


# -- token cache ---------------------------------------------------------------------------------


async def test_the_access_token_is_cached_until_shortly_before_expiry(
    provider: FcmPushProvider, server: FcmTestServer, clock: FakeClock
) -> None:
    """Two sends share one token; past (expiry - margin) the next send fetches a new one."""
    await provider.send(_message())
    await provider.send(_message())
    assert len(server.token_requests) == 1

    clock.now += 3600 - 300 - 1  # still inside the cache window
    await provider.send(_message())
    assert len(server.token_requests) == 1

    clock.now += 2  # within the refresh margin of expiry
    await provider.send(_message())
    assert len(server.token_requests) == 2
    assert server.requests[-1].headers["authorization"] == f"Bearer {server.issued_tokens[1]}"


async def test_concurrent_sends_share_one_refresh(
    provider: FcmPushProvider, server: FcmTestServer
) -> None:
    """Sends that find no token wait for one refresh instead of each fetching their own."""
    outcomes = await asyncio.gather(*(provider.send(_message()) for _ in range(8)))
    assert all(o.outcome == "sent" for o in outcomes)
    assert len(server.token_requests) == 1


async def test_401_drops_the_cached_token(provider: FcmPushProvider, server: FcmTestServer) -> None:
    """A 401 is retryable PUSH_AUTH and the next send fetches a fresh token."""
    await provider.send(_message())
    server.reply_with(
        fcm_error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
    )
    outcome = await provider.send(_message())
    _assert_failure(outcome, "PUSH_AUTH", retryable=True)
    assert outcome.invalidate_token is False

    assert (await provider.send(_message())).outcome == "sent"
    assert len(server.token_requests) == 2


async def test_403_sender_id_mismatch_invalidates_and_drops_the_token(
    provider: FcmPushProvider, server: FcmTestServer
) -> None:
    """R-CHAN-16: SENDER_ID_MISMATCH is permanent for the token, and the access token is dropped."""
    server.reply_with(
        fcm_error(
            403,
            "PERMISSION_DENIED",
            "SenderId mismatch",
            error_code="SENDER_ID_MISMATCH",
        )
    )
    outcome = await provider.send(_message())
    _assert_failure(outcome, "PUSH_SENDER_MISMATCH", retryable=False)
    assert outcome.invalidate_token is True
    assert outcome.detail == "SENDER_ID_MISMATCH"

    await provider.send(_message())
    assert len(server.token_requests) == 2


# -- failures ------------------------------------------------------------------------------------


async def test_unregistered_token_is_invalidated(
    provider: FcmPushProvider, server: FcmTestServer
) -> None:
    """R-CHAN-16: UNREGISTERED → permanent PUSH_TOKEN_INVALID with invalidate_token."""
    server.reply_with(
        fcm_error(404, "NOT_FOUND", "Requested entity was not found.", error_code="UNREGISTERED")
    )
    outcome = await provider.send(_message())
    _assert_failure(outcome, "PUSH_TOKEN_INVALID", retryable=False)
    assert outcome.invalidate_token is True
    assert outcome.detail == "UNREGISTERED"
    assert outcome.provider_status == "404"


async def test_invalid_argument_about_the_token_is_invalidated(
    provider: FcmPushProvider, server: FcmTestServer
) -> None:
    """R-CHAN-16: INVALID_ARGUMENT naming message.token → invalidate_token."""
    server.reply_with(
        fcm_error(
            400,
            "INVALID_ARGUMENT",
            "The registration token is not a valid FCM registration token",
            error_code="INVALID_ARGUMENT",
            field_violation="message.token",
        )
    )
    outcome = await provider.send(_message())
    _assert_failure(outcome, "PUSH_TOKEN_INVALID", retryable=False)
    assert outcome.invalidate_token is True
    assert outcome.detail == "INVALID_ARGUMENT"


async def test_invalid_argument_about_the_payload_keeps_the_token(
    provider: FcmPushProvider, server: FcmTestServer
) -> None:
    """An INVALID_ARGUMENT about something else is a permanent rejection, the token stays."""
    server.reply_with(
        fcm_error(
            400,
            "INVALID_ARGUMENT",
            "Invalid value at 'message.data'",
            error_code="INVALID_ARGUMENT",
            field_violation="message.data",
        )
    )
    outcome = await provider.send(_message())
    _assert_failure(outcome, "PUSH_REJECTED", retryable=False)
    assert outcome.invalidate_token is False


async def test_a_bare_404_does_not_invalidate(
    provider: FcmPushProvider, server: FcmTestServer
) -> None:
    """A 404 without FCM's errorCode (a wrong base URL, a proxy) must not kill every token."""
    server.reply_with(FcmReply(status=404, body=b"<html>Not Found</html>"))
    outcome = await provider.send(_message())
    _assert_failure(outcome, "PUSH_REJECTED", retryable=False)
    assert outcome.invalidate_token is False
    assert outcome.detail == "http_404"


@pytest.mark.parametrize(
    ("reply", "detail", "retry_after"),
    [
        (
            fcm_error(
                429,
                "RESOURCE_EXHAUSTED",
                "Quota exceeded",
                error_code="QUOTA_EXCEEDED",
                headers={"Retry-After": "7"},
            ),
            "QUOTA_EXCEEDED",
            7,
        ),
        (
            fcm_error(
                503,
                "UNAVAILABLE",
                "The service is currently unavailable.",
                error_code="UNAVAILABLE",
                headers={"Retry-After": "30"},
            ),
            "UNAVAILABLE",
            30,
        ),
        (
            fcm_error(500, "INTERNAL", "Internal error encountered.", error_code="INTERNAL"),
            "INTERNAL",
            None,
        ),
    ],
    ids=["429", "503", "500"],
)
async def test_overload_and_server_errors_are_retryable_with_retry_after(
    provider: FcmPushProvider,
    server: FcmTestServer,
    reply: FcmReply,
    detail: str,
    retry_after: int | None,
) -> None:
    """429 / 503 / 500 → retryable PUSH_TRANSPORT, honouring Retry-After when given."""
    server.reply_with(reply)
    outcome = await provider.send(_message())
    _assert_failure(outcome, "PUSH_TRANSPORT", retryable=True)
    assert outcome.detail == detail
    assert outcome.retry_after_seconds == retry_after
    assert outcome.invalidate_token is False


async def test_a_read_timeout_is_retryable(
    impatient: FcmPushProvider, server: FcmTestServer
) -> None:
    """R-PROVIDER-23: the read timeout ends the call; the send is retryable PUSH_TRANSPORT."""
    server.reply_with(FcmReply(delay_seconds=5.0))
    outcome = await impatient.send(_message())
    _assert_failure(outcome, "PUSH_TRANSPORT", retryable=True)
    assert outcome.detail == "timeout"


async def test_connection_refused_is_retryable(account_file: Path, server: FcmTestServer) -> None:
    """No FCM answering at all → retryable PUSH_TRANSPORT, no exception."""
    provider = FcmPushProvider(
        _settings(account_file, server, base_url=f"http://127.0.0.1:{smtp_free_port()}")
    )
    try:
        outcome = await provider.send(_message())
    finally:
        await provider.aclose()
    _assert_failure(outcome, "PUSH_TRANSPORT", retryable=True)
    assert outcome.detail == "connection"


@pytest.mark.parametrize(
    ("status", "code", "retryable"),
    [
        (200, "PUSH_RESPONSE_INVALID", True),
        (500, "PUSH_TRANSPORT", True),
        (400, "PUSH_REJECTED", False),
    ],
)
async def test_malformed_json_answers(
    provider: FcmPushProvider, server: FcmTestServer, status: int, code: str, retryable: bool
) -> None:
    """A body that is not JSON is sorted by status, never reported as sent."""
    server.reply_with(FcmReply(status=status, body=b"<html>upstream proxy error</html>"))
    outcome = await provider.send(_message())
    _assert_failure(outcome, code, retryable=retryable)
    assert outcome.detail == f"http_{status}"


@pytest.mark.parametrize(
    ("reply", "detail"),
    [
        (FcmReply(status=500, body={"error": "backend"}), "token_http_500"),
        (FcmReply(status=200, body=b"not json"), "token_response_invalid"),
        (FcmReply(status=200, body={"token_type": "Bearer"}), "token_response_invalid"),
    ],
    ids=["5xx", "malformed", "no-token"],
)
async def test_token_endpoint_failure_is_retryable_push_auth(
    provider: FcmPushProvider, server: FcmTestServer, reply: FcmReply, detail: str
) -> None:
    """No access token → retryable PUSH_AUTH and no message is posted."""
    server.token_reply_with(reply)
    outcome = await provider.send(_message())
    _assert_failure(outcome, "PUSH_AUTH", retryable=True)
    assert outcome.detail == detail
    assert server.requests == []


async def test_token_endpoint_timeout_is_retryable_push_auth(
    impatient: FcmPushProvider, server: FcmTestServer
) -> None:
    """A token endpoint slower than the read timeout → retryable PUSH_AUTH, nothing posted."""
    server.token_reply_with(FcmReply(delay_seconds=5.0))
    outcome = await impatient.send(_message())
    _assert_failure(outcome, "PUSH_AUTH", retryable=True)
    assert outcome.detail == "token_timeout"
    assert server.requests == []


async def test_token_endpoint_unreachable_is_retryable_push_auth(
    account_file: Path, server: FcmTestServer
) -> None:
    """The token endpoint refusing connections is retryable PUSH_AUTH."""
    settings = _settings(
        account_file, server, token_url=f"http://127.0.0.1:{smtp_free_port()}/token"
    )
    provider = FcmPushProvider(settings)
    try:
        outcome = await provider.send(_message())
    finally:
        await provider.aclose()
    _assert_failure(outcome, "PUSH_AUTH", retryable=True)
    assert outcome.detail == "token_connection"


async def test_detail_never_carries_fcm_text(
    provider: FcmPushProvider, server: FcmTestServer
) -> None:
    """R-PROVIDER-24, R-PROVIDER-25, R-STATE-15: an FCM answer echoing the body (an OTP) and an
    unknown errorCode leave only the fixed code and the status in the outcome."""
    body = f"Your code is {OTP}"
    server.reply_with(
        fcm_error(400, "INVALID_ARGUMENT", f"Rejected: {body}", error_code=f"X_{OTP}"),
        fcm_error(400, OTP, f"Rejected: {body} for {DEVICE_TOKEN}"),
    )
    for _ in range(2):
        outcome = await provider.send(_message(body=body))
        _assert_failure(outcome, "PUSH_REJECTED", retryable=False)
        assert outcome.detail in {"INVALID_ARGUMENT", "http_400"}
        for value in (outcome.error_code, outcome.detail, outcome.provider_status):
            assert OTP not in str(value)
            assert DEVICE_TOKEN[-12:] not in str(value)


async def test_logs_never_carry_tokens_or_the_body(
    impatient: FcmPushProvider, server: FcmTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Logs hold at most the device token's last 6 characters; never the access token, the
    private key or the body."""
    caplog.set_level(logging.DEBUG)
    body = f"Your code is {OTP}"
    server.reply_with(
        FcmReply(),
        fcm_error(404, "NOT_FOUND", f"{body} {DEVICE_TOKEN}", error_code="UNREGISTERED"),
        FcmReply(delay_seconds=5.0),
    )
    for _ in range(3):
        await impatient.send(_message(body=body))

    assert "push send failed" in caplog.text  # the failures were logged, masked
    assert mask_device_token(DEVICE_TOKEN) in caplog.text
    assert DEVICE_TOKEN not in caplog.text
    assert DEVICE_TOKEN[:-6] not in caplog.text
    assert OTP not in caplog.text
    for token in server.issued_tokens:
        assert token not in caplog.text
    assert "PRIVATE KEY" not in caplog.text


# -- pure helpers --------------------------------------------------------------------------------


def test_mask_device_token_keeps_at_most_six_characters() -> None:
    assert mask_device_token(DEVICE_TOKEN) == "***" + DEVICE_TOKEN[-6:]
    assert mask_device_token("short") == "***"


def test_parse_retry_after() -> None:
    """Retry-After is delta-seconds or an HTTP date; anything else is ignored; it is bounded."""
    assert parse_retry_after("12") == 12
    assert parse_retry_after("99999999") == 86_400
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None
    # Thu, 01 Jan 1970 00:01:40 GMT is 100 s after the epoch.
    assert parse_retry_after("Thu, 01 Jan 1970 00:01:40 GMT", now=40.0) == 60
    assert parse_retry_after("Thu, 01 Jan 1970 00:01:40 GMT", now=500.0) == 0


async def test_the_service_account_json_and_project_id_settings(key: KeyPair) -> None:
    """Issue 46 item 4: HERALD_FCM_SERVICE_ACCOUNT_JSON (what a tenant's provider account sets)
    stands in for the key file, and HERALD_FCM_PROJECT_ID sends to another project than the
    service account's own."""
    account = {
        "type": "service_account",
        "project_id": PROJECT,
        "private_key": key.private_pem,
        "client_email": CLIENT_EMAIL,
    }
    with fcm_server(key.public_pem, CLIENT_EMAIL, "school-a-project") as other:
        settings = _settings(None, other).model_copy(
            update={
                "fcm_service_account_json": json.dumps(account),
                "fcm_project_id": "school-a-project",
            }
        )
        provider = FcmPushProvider(settings)
        try:
            assert provider.is_configured()
            assert (await provider.send(_message())).outcome == "sent"
        finally:
            await provider.aclose()
    unusable = _settings(None).model_copy(update={"fcm_service_account_json": "{not json"})
    assert FcmPushProvider(unusable).is_configured() is False
