"""The Slack provider (slack_sdk's AsyncWebClient) against a local server speaking the Web API's
chat.postMessage: the Block Kit it sends, its escaping, every row of its error table, and the bot
token kept out of every log line, outcome and detail."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from functools import partial

import pytest

from herald.channels.base import Message, ProviderOutcome
from herald.channels.providers import build_providers
from herald.channels.slack import (
    SLACK_ERROR_CODES,
    SlackProvider,
    build_post_message,
    escape_mrkdwn,
    mask_slack_id,
)
from herald.config import Settings
from tests.providers.outcomes import assert_failed
from tests.providers.servers import (
    ChatReply,
    ChatTestServer,
    slack_error,
    slack_server,
    smtp_free_port,
)

BOT_TOKEN = "xoxb-1234567890-0987654321-TestSlackBotTokenSecretValue"
SLACK_ID = "U0123ABCDEF"
TITLE = "Staff meeting moved"
BODY = "Room <b>12</b> & the <!channel> crowd: see <https://evil.example|here>"
ACTION_URL = "https://school.example/staff/42"


@pytest.fixture
def server() -> Iterator[ChatTestServer]:
    with slack_server(BOT_TOKEN) as running:
        yield running


def _settings(base_url: str, *, token: str | None = BOT_TOKEN) -> Settings:
    return Settings(
        slack_provider="slack",
        slack_bot_token=token,
        slack_base_url=base_url,
        provider_connect_timeout_seconds=2.0,
        provider_read_timeout_seconds=2.0,
    )


@pytest.fixture
async def provider(server: ChatTestServer) -> AsyncIterator[SlackProvider]:
    instance = SlackProvider(_settings(server.api_url))
    yield instance
    await instance.aclose()


_message = partial(
    Message,
    channel="slack",
    to=SLACK_ID,
    title=TITLE,
    body=BODY,
    action_url=ACTION_URL,
)


_assert_failure = partial(assert_failed, codes=SLACK_ERROR_CODES)


# -- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize("token", [None, "", "  "])
async def test_unconfigured_without_a_bot_token(token: str | None) -> None:
    """R-PROVIDER-13, R-PROVIDER-14: built without a token; send answers skipped/unconfigured."""
    provider = SlackProvider(_settings("http://127.0.0.1:9/api/", token=token))
    assert provider.is_configured() is False
    assert await provider.send(_message()) == ProviderOutcome.unconfigured()
    await provider.aclose()


def test_built_for_the_channel_and_mockable() -> None:
    providers = build_providers(Settings(slack_bot_token=BOT_TOKEN))
    assert isinstance(providers["slack"], SlackProvider)
    assert providers["slack"].is_configured()
    assert build_providers(Settings(slack_provider="mock"))["slack"].is_mock


# -- success -------------------------------------------------------------------------------------


async def test_post_message_with_escaped_blocks_and_a_button(
    provider: SlackProvider, server: ChatTestServer
) -> None:
    """chat.postMessage with the bearer token: a plain-text header, the body as mrkdwn with & < >
    escaped (no link, no mention, no formatting from the words), one https button; the message
    id is Slack's ts."""
    outcome = await provider.send(_message())

    assert outcome.outcome == "sent"
    assert outcome.provider_message_id is not None
    assert SLACK_ID not in outcome.provider_message_id  # ts only: the id is the person's
    [request] = server.requests
    assert request.path == "/api/chat.postMessage"
    assert request.headers["authorization"] == f"Bearer {BOT_TOKEN}"
    sent = request.json()
    escaped = (
        "Room &lt;b&gt;12&lt;/b&gt; &amp; the &lt;!channel&gt; crowd: see "
        "&lt;https://evil.example|here&gt;"
    )
    assert sent["channel"] == SLACK_ID
    assert sent["blocks"] == [
        {"type": "header", "text": {"type": "plain_text", "text": TITLE}},
        {"type": "section", "text": {"type": "mrkdwn", "text": escaped}},
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "text": {"type": "plain_text", "text": "Open"},
                    "url": ACTION_URL,
                }
            ],
        },
    ]
    assert sent["text"] == f"{TITLE}\n{escaped}"
    assert "<" not in sent["text"] and "<" not in sent["blocks"][1]["text"]["text"]
    assert sent["unfurl_links"] is False


@pytest.mark.parametrize(
    "action_url", [None, "/staff/42", "http://school.example/x", "javascript:alert(1)"]
)
def test_no_button_without_an_https_url(action_url: str | None) -> None:
    """R-RENDER-39: only an https URL becomes a button."""
    blocks = build_post_message(_message(action_url=action_url))["blocks"]
    assert [b["type"] for b in blocks] == ["header", "section"]


def test_no_header_without_a_title_and_long_bodies_are_cut_whole() -> None:
    blocks = build_post_message(_message(title=None, body="&" * 5000, action_url=None))["blocks"]
    assert [b["type"] for b in blocks] == ["section"]
    text = blocks[0]["text"]["text"]
    assert len(text) <= 3000 and text.endswith("&amp;…")


def test_escape_mrkdwn_and_masking() -> None:
    assert escape_mrkdwn("a & <b> > c") == "a &amp; &lt;b&gt; &gt; c"
    assert mask_slack_id("U0123ABCDEF") == "U…DEF"
    assert SLACK_ID not in mask_slack_id(SLACK_ID)


# -- failures ------------------------------------------------------------------------------------


async def test_ratelimited_is_retryable_after_retry_after(
    provider: SlackProvider, server: ChatTestServer
) -> None:
    """`ratelimited` (HTTP 429 with Retry-After) → retry no earlier than Slack says."""
    server.reply_with(slack_error("ratelimited", status=429, retry_after=30))
    outcome = await provider.send(_message())
    _assert_failure(outcome, "SLACK_RATE_LIMITED", retryable=True)
    assert outcome.retry_after_seconds == 30


@pytest.mark.parametrize(
    "error",
    [
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "user_not_found",
        "user_disabled",
        "cannot_dm_bot",
    ],
)
async def test_a_gone_destination_is_permanent_and_unreachable(
    provider: SlackProvider, server: ChatTestServer, error: str
) -> None:
    server.reply_with(slack_error(error))
    outcome = await provider.send(_message())
    _assert_failure(outcome, "SLACK_UNREACHABLE", retryable=False)
    assert outcome.detail == error
    assert outcome.recipient_blocked is True


@pytest.mark.parametrize("error", ["token_revoked", "account_inactive"])
async def test_a_refused_token_is_retryable_auth(
    provider: SlackProvider, server: ChatTestServer, error: str
) -> None:
    """The operator fixes the token; the worker's retries then send."""
    server.reply_with(slack_error(error))
    outcome = await provider.send(_message())
    _assert_failure(outcome, "SLACK_AUTH", retryable=True)
    assert outcome.detail == error


async def test_a_wrong_token_is_invalid_auth(server: ChatTestServer) -> None:
    provider = SlackProvider(_settings(server.api_url, token="xoxb-wrong-token"))
    try:
        outcome = await provider.send(_message())
    finally:
        await provider.aclose()
    _assert_failure(outcome, "SLACK_AUTH", retryable=True)
    assert outcome.detail == "invalid_auth"


@pytest.mark.parametrize("error", ["msg_too_long", "invalid_blocks"])
async def test_a_refused_message_is_rejected(
    provider: SlackProvider, server: ChatTestServer, error: str
) -> None:
    server.reply_with(slack_error(error))
    outcome = await provider.send(_message())
    _assert_failure(outcome, "SLACK_REJECTED", retryable=False)
    assert outcome.detail == error


@pytest.mark.parametrize(
    "reply",
    [
        ChatReply(status=500, body={"ok": False, "error": "internal_error"}),
        ChatReply(status=503, body=b"<html>upstream</html>"),
    ],
    ids=["500", "503-html"],
)
async def test_5xx_is_a_retryable_transport_failure(
    provider: SlackProvider, server: ChatTestServer, reply: ChatReply
) -> None:
    server.reply_with(reply)
    outcome = await provider.send(_message())
    _assert_failure(outcome, "SLACK_TRANSPORT", retryable=True)
    assert outcome.detail == f"http_{reply.status}"


async def test_a_timeout_is_a_retryable_transport_failure(server: ChatTestServer) -> None:
    settings = _settings(server.api_url).model_copy(
        update={"provider_connect_timeout_seconds": 0.2, "provider_read_timeout_seconds": 0.3}
    )
    provider = SlackProvider(settings)
    server.reply_with(ChatReply(delay_seconds=5))
    try:
        outcome = await provider.send(_message())
    finally:
        await provider.aclose()
    _assert_failure(outcome, "SLACK_TRANSPORT", retryable=True)
    assert outcome.detail == "timeout"


async def test_nothing_listening_is_a_retryable_transport_failure() -> None:
    provider = SlackProvider(_settings(f"http://127.0.0.1:{smtp_free_port()}/api/"))
    try:
        outcome = await provider.send(_message())
    finally:
        await provider.aclose()
    _assert_failure(outcome, "SLACK_TRANSPORT", retryable=True)
    assert outcome.detail == "connection"


async def test_the_token_never_reaches_a_log_line_or_an_outcome(
    server: ChatTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A provider secret never appears in a log line, an error or a detail — with every logger
    at DEBUG, through a success, an auth failure, a rate limit and a gone channel."""
    server.reply_with(
        ChatReply(),
        slack_error("token_revoked"),
        slack_error("ratelimited", status=429, retry_after=3),
        slack_error("channel_not_found"),
    )
    provider = SlackProvider(_settings(server.api_url))
    outcomes = []
    try:
        with caplog.at_level(logging.DEBUG):
            for _ in range(4):
                outcomes.append(await provider.send(_message()))
    finally:
        await provider.aclose()
    assert [o.outcome for o in outcomes] == ["sent", "failed", "failed", "failed"]
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "slack send failed" in text
    assert BOT_TOKEN not in text
    assert BODY not in text and "crowd" not in text  # the SDK's body logging is held back
    assert SLACK_ID not in text
    for outcome in outcomes:
        assert BOT_TOKEN not in repr(outcome)
