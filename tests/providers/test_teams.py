"""The Teams provider against a local webhook receiver: the Adaptive Card it posts (text as
TextRun, so no markdown is interpreted), every row of its error table, and the webhook URL — a
credential — kept out of every log line and outcome."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from functools import partial
from typing import Any

import pytest

from herald.channels.base import Message, ProviderOutcome
from herald.channels.providers import build_providers
from herald.channels.teams import (
    TEAMS_ERROR_CODES,
    TeamsProvider,
    build_card_message,
    webhook_host,
)
from herald.config import Settings
from tests.providers.outcomes import assert_failed
from tests.providers.servers import ChatReply, ChatTestServer, smtp_free_port, teams_server

TITLE = "Staff meeting moved"
BODY = "**Now** at [15:30](https://evil.example) <at>everyone</at>\nin the library"
ACTION_URL = "https://school.example/staff/42"


@pytest.fixture
def server() -> Iterator[ChatTestServer]:
    with teams_server() as running:
        yield running


def _settings(**overrides: Any) -> Settings:
    fields: dict[str, Any] = {
        "teams_provider": "teams",
        # The local receiver is on loopback, which only `herald dev` allows.
        "webhook_allow_loopback": True,
        "provider_connect_timeout_seconds": 2.0,
        "provider_read_timeout_seconds": 2.0,
    }
    fields.update(overrides)
    return Settings(**fields)


@pytest.fixture
async def provider() -> AsyncIterator[TeamsProvider]:
    instance = TeamsProvider(_settings())
    yield instance
    await instance.aclose()


def _message(to: str, **overrides: Any) -> Message:
    fields: dict[str, Any] = {
        "channel": "teams",
        "to": to,
        "title": TITLE,
        "body": BODY,
        "action_url": ACTION_URL,
    }
    fields.update(overrides)
    return Message(**fields)


_assert_failure = partial(assert_failed, codes=TEAMS_ERROR_CODES)


# -- configuration -------------------------------------------------------------------------------


async def test_unconfigured_unless_turned_on() -> None:
    """R-PROVIDER-13, R-PROVIDER-14: Teams has no deployment credential; it sends once
    HERALD_TEAMS_PROVIDER=teams, and answers skipped/unconfigured before."""
    provider = TeamsProvider(Settings())
    assert provider.is_configured() is False
    assert await provider.send(_message("https://x.example/hook")) == ProviderOutcome.unconfigured()
    assert build_providers(Settings(teams_provider="teams"))["teams"].is_configured()
    assert build_providers(Settings(teams_provider="mock"))["teams"].is_mock


# -- success -------------------------------------------------------------------------------------


async def test_posts_an_adaptive_card(provider: TeamsProvider, server: ChatTestServer) -> None:
    """A message with one Adaptive Card 1.4: title and body as TextRun elements (shown as
    written, no markdown, no mention), the https action as Action.OpenUrl; 202 is sent."""
    url = server.webhook_url("staff-room")
    outcome = await provider.send(_message(url))

    assert outcome.outcome == "sent"
    assert outcome.provider_status == "202"
    [request] = server.requests
    assert request.path == url.removeprefix(server.base_url)
    assert request.headers["content-type"] == "application/json"
    sent = request.json()
    assert sent["type"] == "message"
    [attachment] = sent["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert (card["type"], card["version"]) == ("AdaptiveCard", "1.4")
    assert card["body"] == [
        {
            "type": "RichTextBlock",
            "inlines": [{"type": "TextRun", "text": TITLE, "weight": "Bolder", "size": "Medium"}],
        },
        {"type": "RichTextBlock", "inlines": [{"type": "TextRun", "text": BODY}]},
    ]
    # No element that interprets markdown anywhere in the card.
    assert '"type":"TextBlock"' not in request.body.decode().replace(" ", "")
    assert card["actions"] == [{"type": "Action.OpenUrl", "title": "Open", "url": ACTION_URL}]


async def test_an_old_connector_200_is_sent(
    provider: TeamsProvider, server: ChatTestServer
) -> None:
    server.reply_with(ChatReply(status=200, body=b"1"))
    assert (await provider.send(_message(server.webhook_url("a")))).outcome == "sent"


@pytest.mark.parametrize(
    "action_url", [None, "/staff/42", "http://school.example/x", "javascript:alert(1)"]
)
def test_no_action_without_an_https_url(action_url: str | None) -> None:
    card = build_card_message(_message("https://x.example/h", action_url=action_url))
    assert "actions" not in card["attachments"][0]["content"]


# -- failures ------------------------------------------------------------------------------------


async def test_429_is_retryable_after_retry_after(
    provider: TeamsProvider, server: ChatTestServer
) -> None:
    server.reply_with(ChatReply(status=429, body=b"", headers={"Retry-After": "12"}))
    outcome = await provider.send(_message(server.webhook_url("a")))
    _assert_failure(outcome, "TEAMS_RATE_LIMITED", retryable=True)
    assert outcome.retry_after_seconds == 12


async def test_a_connector_200_saying_429_is_retryable(
    provider: TeamsProvider, server: ChatTestServer
) -> None:
    server.reply_with(
        ChatReply(
            status=200,
            body=b"Webhook message delivery failed with error: Microsoft Teams endpoint "
            b"returned HTTP error 429 with ContextId tcid=0",
        )
    )
    outcome = await provider.send(_message(server.webhook_url("a")))
    _assert_failure(outcome, "TEAMS_RATE_LIMITED", retryable=True)


@pytest.mark.parametrize("status", [404, 410])
async def test_a_deleted_webhook_is_permanent_and_unreachable(
    provider: TeamsProvider, server: ChatTestServer, status: int
) -> None:
    server.reply_with(ChatReply(status=status, body=b"Not Found"))
    outcome = await provider.send(_message(server.webhook_url("a")))
    _assert_failure(outcome, "TEAMS_UNREACHABLE", retryable=False)
    assert outcome.recipient_blocked is True
    assert outcome.detail == f"http_{status}"


async def test_400_is_rejected(provider: TeamsProvider, server: ChatTestServer) -> None:
    server.reply_with(ChatReply(status=400, body=b"Bad payload: card text echoed here"))
    outcome = await provider.send(_message(server.webhook_url("a")))
    _assert_failure(outcome, "TEAMS_REJECTED", retryable=False)
    assert outcome.detail == "http_400"


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_5xx_is_retryable(
    provider: TeamsProvider, server: ChatTestServer, status: int
) -> None:
    server.reply_with(ChatReply(status=status, body=b"oops"))
    outcome = await provider.send(_message(server.webhook_url("a")))
    _assert_failure(outcome, "TEAMS_TRANSPORT", retryable=True)


async def test_a_timeout_and_a_closed_port_are_retryable(server: ChatTestServer) -> None:
    provider = TeamsProvider(
        _settings(provider_connect_timeout_seconds=0.2, provider_read_timeout_seconds=0.3)
    )
    server.reply_with(ChatReply(status=202, body=b"", delay_seconds=5))
    try:
        slow = await provider.send(_message(server.webhook_url("a")))
        closed = await provider.send(_message(f"http://127.0.0.1:{smtp_free_port()}/webhook/x"))
    finally:
        await provider.aclose()
    _assert_failure(slow, "TEAMS_TRANSPORT", retryable=True)
    assert slow.detail == "timeout"
    _assert_failure(closed, "TEAMS_TRANSPORT", retryable=True)
    assert closed.detail == "connection"


async def test_a_stored_value_that_is_no_url_is_permanent(provider: TeamsProvider) -> None:
    outcome = await provider.send(_message("not a url"))
    _assert_failure(outcome, "TEAMS_WEBHOOK_INVALID", retryable=False)


async def test_the_webhook_url_never_reaches_a_log_line_or_an_outcome(
    server: ChatTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The URL is a credential: with every logger at DEBUG (httpx's request line included),
    through a success, a 404 and a 500, no line and no outcome holds its path."""
    url = server.webhook_url("secret-room")
    secret = url.removeprefix(server.base_url)
    server.reply_with(
        ChatReply(status=202, body=b""),
        ChatReply(status=404, body=url.encode()),
        ChatReply(status=500, body=url.encode()),
    )
    provider = TeamsProvider(_settings())
    outcomes = []
    try:
        with caplog.at_level(logging.DEBUG):
            for _ in range(3):
                outcomes.append(await provider.send(_message(url)))
    finally:
        await provider.aclose()
    assert [o.outcome for o in outcomes] == ["sent", "failed", "failed"]
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "HTTP Request: POST <teams webhook on 127.0.0.1>" in text
    assert "teams send failed" in text
    assert secret not in text and "secret-room" not in text
    for outcome in outcomes:
        assert secret not in repr(outcome)
    assert webhook_host(url) == "127.0.0.1"


async def test_a_webhook_now_resolving_to_a_private_address_is_not_posted_to(
    server: ChatTestServer,
) -> None:
    """Checked again at send time (SSRF): a URL on a loopback or private address is refused
    without a request, permanently, under a process that does not allow it."""
    strict = TeamsProvider(_settings(webhook_allow_loopback=False))
    try:
        outcome = await strict.send(_message(server.webhook_url("x")))
        private = await strict.send(_message("https://10.1.2.3/webhookb2/x"))
    finally:
        await strict.aclose()
    _assert_failure(outcome, "TEAMS_WEBHOOK_INVALID", retryable=False)
    _assert_failure(private, "TEAMS_WEBHOOK_INVALID", retryable=False)
    assert server.requests == []
