"""The Web Push provider against a local push service that checks what a real one checks.

The server (tests.providers.servers.WebPushTestServer) holds each subscription's private key and
auth secret, as a browser does; it verifies the VAPID JWT under the key in the Authorization
header and decrypts the aes128gcm body, so a push it accepts is one a browser could read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from herald.channels.base import Message
from herald.channels.push import PushProvider
from herald.channels.webpush import (
    MAX_PAYLOAD_BYTES,
    WebPushProvider,
    classify_webpush_response,
    key_file,
    load_or_create_vapid,
    payload,
    public_key,
)
from herald.config import Settings
from herald.errors import ConfigurationError
from tests.providers.servers import WebPushReply, WebPushTestServer, webpush_server

OTP = "OTP-884213"


@pytest.fixture
def server() -> Iterator[WebPushTestServer]:
    with webpush_server() as running:
        yield running


def settings_for(tmp_path: Path, **extra: object) -> Settings:
    values: dict[str, object] = {
        "webpush_vapid_subject": "mailto:ops@school.example",
        "data_dir": tmp_path,
        "vault_key": Fernet.generate_key().decode(),
        "webhook_allow_loopback": True,
        "provider_connect_timeout_seconds": 2.0,
        "provider_read_timeout_seconds": 2.0,
    } | extra
    return Settings(**values)  # type: ignore[arg-type]


def message_to(subscription_json: dict[str, object], **extra: object) -> Message:
    keys = subscription_json["keys"]
    assert isinstance(keys, dict)
    values: dict[str, object] = {
        "channel": "push",
        "to": subscription_json["endpoint"],
        "title": "School closed",
        "body": "The school is closed tomorrow.",
        "action_url": "https://school.example/notices/12",
        "platform": "webpush",
        "push_keys": (keys["p256dh"], keys["auth"]),
        "kind": "announcement.general",
    } | extra
    return Message(**values)  # type: ignore[arg-type]


async def test_a_push_arrives_signed_and_readable(
    tmp_path: Path, server: WebPushTestServer
) -> None:
    settings = settings_for(tmp_path)
    provider = WebPushProvider(settings)
    subscription = server.subscribe()
    try:
        outcome = await provider.send(message_to(subscription.as_json(), priority="high"))
    finally:
        await provider.aclose()
    assert server.refused == []
    assert outcome.outcome == "sent", outcome
    [push] = server.received
    assert push.json() == {
        "title": "School closed",
        "body": "The school is closed tomorrow.",
        "url": "https://school.example/notices/12",
        "kind": "announcement.general",
    }
    assert push.claims["aud"] == server.origin
    assert push.claims["sub"] == "mailto:ops@school.example"
    assert push.headers["urgency"] == "high"
    assert push.headers["ttl"] == str(settings.webpush_ttl_seconds)
    # The browser subscribed with the key GET /v1/webpush/vapid-public-key publishes.
    assert push.vapid_key == public_key(load_or_create_vapid(settings))


async def test_the_vapid_key_is_made_once_and_kept_encrypted(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    first = public_key(load_or_create_vapid(settings))
    assert public_key(load_or_create_vapid(settings)) == first
    stored = key_file(settings).read_bytes()
    assert b"PRIVATE KEY" not in stored
    assert key_file(settings).stat().st_mode & 0o077 == 0
    # Another vault key cannot read it: refused at start-up, with the file named.
    other = settings_for(tmp_path, vault_key=Fernet.generate_key().decode())
    with pytest.raises(ConfigurationError, match=r"webpush-vapid\.key"):
        load_or_create_vapid(other)


async def test_a_gone_subscription_is_invalidated(
    tmp_path: Path, server: WebPushTestServer
) -> None:
    provider = WebPushProvider(settings_for(tmp_path))
    subscription = server.subscribe()
    try:
        server.reply_with(WebPushReply(410))
        gone = await provider.send(message_to(subscription.as_json()))
        server.reply_with(WebPushReply(404))
        missing = await provider.send(message_to(subscription.as_json()))
    finally:
        await provider.aclose()
    for outcome in (gone, missing):
        assert outcome.outcome == "failed"
        assert outcome.error_code == "PUSH_TOKEN_INVALID"
        assert outcome.invalidate_token and not outcome.retryable


async def test_rate_limits_and_outages_are_retried_after_their_time(
    tmp_path: Path, server: WebPushTestServer
) -> None:
    provider = WebPushProvider(settings_for(tmp_path))
    subscription = server.subscribe()
    try:
        server.reply_with(WebPushReply(429, {"Retry-After": "120"}), WebPushReply(503))
        limited = await provider.send(message_to(subscription.as_json()))
        down = await provider.send(message_to(subscription.as_json()))
    finally:
        await provider.aclose()
    assert (limited.error_code, limited.retryable, limited.retry_after_seconds) == (
        "PUSH_TRANSPORT",
        True,
        120,
    )
    assert (down.error_code, down.retryable, down.invalidate_token) == (
        "PUSH_TRANSPORT",
        True,
        False,
    )


async def test_an_unreachable_push_service_is_a_retryable_transport_failure(
    tmp_path: Path,
) -> None:
    provider = WebPushProvider(settings_for(tmp_path))
    with webpush_server() as stopped:
        subscription = stopped.subscribe()
    try:
        outcome = await provider.send(message_to(subscription.as_json()))
    finally:
        await provider.aclose()
    assert outcome.outcome == "failed"
    assert outcome.error_code == "PUSH_TRANSPORT" and outcome.retryable


async def test_a_private_endpoint_is_refused_at_send_time(
    tmp_path: Path, server: WebPushTestServer
) -> None:
    """Loopback was allowed when the device was registered; a process that does not allow it
    refuses to send there and drops the device."""
    provider = WebPushProvider(settings_for(tmp_path, webhook_allow_loopback=False))
    subscription = server.subscribe()
    try:
        outcome = await provider.send(message_to(subscription.as_json()))
    finally:
        await provider.aclose()
    assert outcome.error_code == "PUSH_TOKEN_INVALID" and outcome.invalidate_token
    assert server.received == [] and server.refused == []


async def test_secrets_in_the_message_reach_only_the_ciphertext(
    tmp_path: Path, server: WebPushTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    provider = WebPushProvider(settings_for(tmp_path))
    subscription = server.subscribe()
    try:
        outcome = await provider.send(message_to(subscription.as_json(), body=f"Code {OTP}"))
    finally:
        await provider.aclose()
    assert outcome.outcome == "sent"
    assert OTP in server.received[0].plaintext.decode()
    assert OTP not in repr(outcome) and OTP not in caplog.text
    assert subscription.endpoint not in caplog.text


def test_a_long_body_is_cut_to_fit_one_push() -> None:
    long = Message(channel="push", to="x", title="Notice", body="परीक्षा " * 2000)
    encoded = payload(long)
    assert len(encoded) <= MAX_PAYLOAD_BYTES
    document = json.loads(encoded)
    assert document["title"] == "Notice" and document["body"].endswith("…")


def test_push_service_answers_are_sorted() -> None:
    assert classify_webpush_response(201, {}).outcome == "sent"
    assert classify_webpush_response(400, {}).error_code == "PUSH_REJECTED"
    assert classify_webpush_response(413, {}).error_code == "PUSH_REJECTED"
    assert classify_webpush_response(403, {}).error_code == "PUSH_AUTH"
    assert classify_webpush_response(500, {}).retryable


async def test_the_push_channel_sends_each_device_through_its_service(
    tmp_path: Path, server: WebPushTestServer
) -> None:
    """Browsers through their push service; a phone, with FCM unconfigured, is skipped
    unconfigured (the backfill sends it once FCM is). Each outcome names the service that gave
    it, so the attempt evidence and the metrics count FCM and Web Push apart."""
    settings = settings_for(tmp_path)
    from herald.channels.fcm import FcmPushProvider

    push = PushProvider(FcmPushProvider(settings), WebPushProvider(settings))
    assert push.is_configured() and push.name == "webpush"
    subscription = server.subscribe()
    try:
        browser = await push.send(message_to(subscription.as_json()))
        phone = await push.send(Message(channel="push", to="fcm-token", body="x", platform="ios"))
    finally:
        await push.aclose()
    assert (browser.outcome, browser.provider) == ("sent", "webpush")
    assert (phone.outcome, phone.skip_reason, phone.provider) == ("skipped", "unconfigured", "fcm")


def test_unset_subject_means_unconfigured(tmp_path: Path) -> None:
    provider = WebPushProvider(settings_for(tmp_path, webpush_vapid_subject=None))
    assert not provider.is_configured()
    assert not key_file(settings_for(tmp_path)).exists()


def test_a_subject_must_be_mailto_or_https(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="HERALD_WEBPUSH_VAPID_SUBJECT"):
        settings_for(tmp_path, webpush_vapid_subject="ops@school.example")
