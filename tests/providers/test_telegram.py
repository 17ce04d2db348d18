"""The Telegram provider against a local server speaking the Bot API, and its rate limiter on a
virtual clock (no real time passes in the limiter tests)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from functools import partial
from typing import Any

import limits
import pytest

from herald.channels.base import Message, ProviderOutcome
from herald.channels.telegram import (
    TELEGRAM_ERROR_CODES,
    TelegramProvider,
    TelegramRateLimiter,
    build_send_message,
    mask_chat_id,
)
from herald.config import Settings
from herald.ratelimit import RateLimits
from tests.providers.outcomes import assert_failed
from tests.providers.servers import (
    TelegramReply,
    TelegramTestServer,
    smtp_free_port,
    telegram_error,
    telegram_server,
)

BOT_TOKEN = "7123456789:AAHk-test_bot_token-Zx9yW8vU7tS6rQ5p"
CHAT_ID = "987654321"
OTP = "OTP-884213"
# An upper bound against hangs, never an expectation.
WAIT_SECONDS = 10.0
BODY = "<b>Sports day moved</b>: it is now on Friday &amp; Saturday."
ACTION_URL = "https://school.example/announcements/42"


class VirtualClock:
    """A clock and an asyncio-compatible sleep on virtual time.

    `sleep` parks the caller until `run` advances time to its wake-up; `run` drives coroutines
    to completion, letting everything runnable run before jumping to the next wake-up."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._seq), future))
        await future

    async def run(self, *coros: Coroutine[Any, Any, Any]) -> list[Any]:
        tasks = [asyncio.ensure_future(c) for c in coros]
        while not all(t.done() for t in tasks):
            for _ in range(10):
                await asyncio.sleep(0)
            if self._sleepers and not all(t.done() for t in tasks):
                wake, _, future = heapq.heappop(self._sleepers)
                self.now = max(self.now, wake)
                future.set_result(None)
        return [t.result() for t in tasks]


class ImmediateClock:
    """A clock whose sleep advances it at once (for sequential callers)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def server() -> Iterator[TelegramTestServer]:
    with telegram_server(BOT_TOKEN) as running:
        yield running


def _settings(
    base_url: str, *, token: str | None = BOT_TOKEN, read_timeout: float = 5.0
) -> Settings:
    return Settings(
        telegram_provider="telegram",
        telegram_bot_token=token,
        telegram_base_url=base_url,
        provider_connect_timeout_seconds=2.0,
        provider_read_timeout_seconds=read_timeout,
    )


def _limiter() -> TelegramRateLimiter:
    clock = ImmediateClock()
    return TelegramRateLimiter(25, clock=clock, sleep=clock.sleep)


@pytest.fixture
async def provider(server: TelegramTestServer) -> AsyncIterator[TelegramProvider]:
    instance = TelegramProvider(_settings(server.base_url), limiter=_limiter())
    yield instance
    await instance.aclose()


_message = partial(
    Message,
    channel="telegram",
    to=CHAT_ID,
    body=BODY,
    action_url=ACTION_URL,
)


_assert_failure = partial(assert_failed, codes=TELEGRAM_ERROR_CODES)


# -- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize("token", [None, ""])
async def test_unconfigured_without_a_bot_token(token: str | None) -> None:
    """R-PROVIDER-13, R-PROVIDER-14: built without a token; send answers skipped/unconfigured."""
    provider = TelegramProvider(_settings("http://127.0.0.1:9", token=token))
    assert provider.is_configured() is False
    assert provider.is_mock is False
    assert await provider.send(_message()) == ProviderOutcome.unconfigured()
    await provider.aclose()


def test_configured_with_a_bot_token() -> None:
    """R-PROVIDER-13, R-TG-9: a token configures it; the limiter takes the configured rate."""
    provider = TelegramProvider(Settings(telegram_bot_token=BOT_TOKEN, telegram_rate_per_second=5))
    assert provider.is_configured() is True
    assert (provider.channel, provider.name) == ("telegram", "telegram")
    assert provider.limiter.rate_per_second == 5


# -- success -------------------------------------------------------------------------------------


async def test_send_with_a_url_button(
    provider: TelegramProvider, server: TelegramTestServer
) -> None:
    """sendMessage carries the HTML body, parse_mode HTML, no preview and one https url button."""
    outcome = await provider.send(_message())

    assert outcome.outcome == "sent"
    assert outcome.provider_message_id is not None
    assert outcome.provider_message_id.isdigit()
    [request] = server.requests
    assert request.path == f"/bot{BOT_TOKEN}/sendMessage"
    assert request.json() == {
        "chat_id": int(CHAT_ID),
        "text": BODY,
        "parse_mode": "HTML",
        "disable_web_page_preview": True,
        "reply_markup": {"inline_keyboard": [[{"text": "Open", "url": ACTION_URL}]]},
    }


async def test_send_with_a_mini_app_button(server: TelegramTestServer) -> None:
    """R-RENDER-37: the button may be a mini_app (web_app) button instead."""
    provider = TelegramProvider(
        _settings(server.base_url), limiter=_limiter(), button_kind="mini_app", button_text="Go"
    )
    try:
        assert (await provider.send(_message())).outcome == "sent"
    finally:
        await provider.aclose()
    markup = server.requests[0].json()["reply_markup"]
    assert markup == {"inline_keyboard": [[{"text": "Go", "web_app": {"url": ACTION_URL}}]]}


@pytest.mark.parametrize(
    "action_url",
    [None, "/announcements/42", "http://school.example/x", "javascript:alert(1)"],
)
def test_no_button_without_an_https_url(action_url: str | None) -> None:
    """R-RENDER-39: only an https URL becomes a button."""
    assert "reply_markup" not in build_send_message(_message(action_url=action_url))


def test_a_channel_username_is_sent_as_a_string() -> None:
    assert build_send_message(_message(to="@school_news"))["chat_id"] == "@school_news"
    assert build_send_message(_message(to="-1001234567890"))["chat_id"] == -1001234567890


# -- failures ------------------------------------------------------------------------------------


async def test_429_is_retryable_with_retry_after_and_holds_the_chat(
    provider: TelegramProvider, server: TelegramTestServer
) -> None:
    """R-TG-3, R-TG-5: a 429 is retryable with Telegram's retry_after; until it passes, further
    sends to that chat fail the same way without calling Telegram, other chats go ahead."""
    server.reply_with(telegram_error(429, "Too Many Requests: retry after 17", retry_after=17))
    outcome = await provider.send(_message())
    _assert_failure(outcome, "TELEGRAM_RATE_LIMITED", retryable=True)
    assert outcome.retry_after_seconds == 17

    again = await provider.send(_message())
    _assert_failure(again, "TELEGRAM_RATE_LIMITED", retryable=True)
    assert again.retry_after_seconds is not None
    assert 15 <= again.retry_after_seconds <= 17
    assert len(server.requests) == 1

    assert (await provider.send(_message(to="111222333"))).outcome == "sent"


@pytest.mark.parametrize(
    "reply",
    [
        telegram_error(500, "Internal Server Error"),
        telegram_error(502, "Bad Gateway"),
        TelegramReply(status=503, body=b"<html>nginx</html>"),
    ],
    ids=["500", "502", "503-html"],
)
async def test_5xx_is_retryable(
    provider: TelegramProvider, server: TelegramTestServer, reply: TelegramReply
) -> None:
    """R-TG-4: a 5xx leaves the delivery to be retried."""
    server.reply_with(reply)
    outcome = await provider.send(_message())
    _assert_failure(outcome, "TELEGRAM_TRANSPORT", retryable=True)
    assert outcome.detail == f"http_{reply.status}"


@pytest.mark.parametrize(
    ("description", "detail"),
    [
        ("Forbidden: bot was blocked by the user", "blocked_by_user"),
        ("Forbidden: user is deactivated", "user_deactivated"),
        ("Forbidden: bot can't initiate conversation with a user", "cannot_initiate"),
    ],
)
async def test_403_is_a_permanent_block(
    provider: TelegramProvider, server: TelegramTestServer, description: str, detail: str
) -> None:
    """R-TG-6: a block fails without retry and tells the caller the person blocked the bot."""
    server.reply_with(telegram_error(403, description))
    outcome = await provider.send(_message())
    _assert_failure(outcome, "TELEGRAM_BLOCKED", retryable=False)
    assert outcome.recipient_blocked is True
    assert outcome.detail == detail


async def test_chat_not_found_is_permanent(
    provider: TelegramProvider, server: TelegramTestServer
) -> None:
    """R-TG-6: chat not found fails without retry."""
    server.reply_with(telegram_error(400, "Bad Request: chat not found"))
    outcome = await provider.send(_message())
    _assert_failure(outcome, "TELEGRAM_CHAT_NOT_FOUND", retryable=False)
    assert outcome.recipient_blocked is False


async def test_a_rejection_echoing_the_text_leaves_nothing_of_it(
    provider: TelegramProvider, server: TelegramTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    """R-TG-6, R-PROVIDER-24, R-STATE-15: a 400 whose description echoes the message (an OTP)
    is a permanent TELEGRAM_REJECTED; its text reaches no code, detail or log line."""
    caplog.set_level(logging.DEBUG)
    text = f"Your code is <b>{OTP}</b>"
    server.reply_with(
        telegram_error(400, f"Bad Request: can't parse entities: {text} at byte offset 13"),
        telegram_error(400, f"Bad Request: {text}"),
    )
    first = await provider.send(_message(body=text))
    second = await provider.send(_message(body=text))

    _assert_failure(first, "TELEGRAM_REJECTED", retryable=False)
    _assert_failure(second, "TELEGRAM_REJECTED", retryable=False)
    assert first.detail == "cant_parse_entities"
    assert second.detail == "http_400"
    for outcome in (first, second):
        for value in (outcome.error_code, outcome.detail, outcome.provider_status):
            assert OTP not in str(value)
    assert OTP not in caplog.text


async def test_a_read_timeout_is_retryable(server: TelegramTestServer) -> None:
    """R-PROVIDER-23: a read timeout ends the call and is retryable."""
    provider = TelegramProvider(_settings(server.base_url, read_timeout=0.5), limiter=_limiter())
    server.reply_with(TelegramReply(delay_seconds=5.0))
    try:
        outcome = await provider.send(_message())
    finally:
        await provider.aclose()
    _assert_failure(outcome, "TELEGRAM_TRANSPORT", retryable=True)
    assert outcome.detail == "timeout"


async def test_connection_refused_is_retryable() -> None:
    """No Telegram answering at all → retryable TELEGRAM_TRANSPORT, no exception."""
    provider = TelegramProvider(
        _settings(f"http://127.0.0.1:{smtp_free_port()}"), limiter=_limiter()
    )
    try:
        outcome = await provider.send(_message())
    finally:
        await provider.aclose()
    _assert_failure(outcome, "TELEGRAM_TRANSPORT", retryable=True)
    assert outcome.detail == "connection"


async def test_a_wrong_bot_token_is_retryable_auth(server: TelegramTestServer) -> None:
    """A token Telegram does not know (401) is a configuration fault: retried, never 'sent'."""
    provider = TelegramProvider(
        _settings(server.base_url, token="1:wrong-token"), limiter=_limiter()
    )
    try:
        outcome = await provider.send(_message())
    finally:
        await provider.aclose()
    _assert_failure(outcome, "TELEGRAM_AUTH", retryable=True)


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"ok": true}', b'{"ok": false, "result": {"message_id": 1}}'],
    ids=["not-json", "no-result", "not-ok"],
)
async def test_a_malformed_success_is_not_sent(
    provider: TelegramProvider, server: TelegramTestServer, body: bytes
) -> None:
    """R-TG-7: a 200 that is not the Bot API's answer is retried (at-least-once), not 'sent'."""
    server.reply_with(TelegramReply(status=200, body=body))
    outcome = await provider.send(_message())
    _assert_failure(outcome, "TELEGRAM_RESPONSE_INVALID", retryable=True)


async def test_logs_never_carry_the_bot_token(
    server: TelegramTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The bot token is in every request URL, yet no log line (httpx's own included), code or
    detail carries it — through success, failure, timeout and a refused connection."""
    caplog.set_level(logging.DEBUG)
    provider = TelegramProvider(_settings(server.base_url, read_timeout=0.5), limiter=_limiter())
    refused = TelegramProvider(
        _settings(f"http://127.0.0.1:{smtp_free_port()}"), limiter=_limiter()
    )
    server.reply_with(
        TelegramReply(),
        telegram_error(400, f"Bad Request: chat not found for bot{BOT_TOKEN}"),
        TelegramReply(delay_seconds=5.0),
    )
    outcomes = [await provider.send(_message()) for _ in range(3)]
    outcomes.append(await refused.send(_message()))
    await provider.aclose()
    await refused.aclose()

    assert "HTTP Request: POST" in caplog.text  # httpx logged the requests, redacted
    assert "telegram send failed" in caplog.text
    secret = BOT_TOKEN.split(":", 1)[1]
    assert secret not in caplog.text
    assert CHAT_ID not in caplog.text
    for record in caplog.records:
        assert secret not in record.getMessage()
    for outcome in outcomes:
        assert secret not in str(outcome)


def test_mask_chat_id() -> None:
    assert mask_chat_id(CHAT_ID) == "***4321"
    assert mask_chat_id("12345") == "***"


# -- rate limiter (virtual time) -----------------------------------------------------------------


async def test_global_rate_spaces_sends_across_chats() -> None:
    """R-TG-9: across chats, sends are spaced by 1/rate (25 a second)."""
    clock = ImmediateClock()
    limiter = TelegramRateLimiter(25, clock=clock, sleep=clock.sleep)
    granted = []
    for index in range(60):
        await limiter.acquire(f"chat-{index}")
        granted.append(clock.now)

    gaps = [b - a for a, b in itertools.pairwise(granted)]
    assert min(gaps) >= 1 / 25 - 1e-9
    for start in granted:  # never more than 25 (+1 at the window's closed end) in a second
        assert sum(1 for t in granted if start <= t < start + 1.0) <= 25
    assert granted[-1] == pytest.approx(59 / 25)


async def test_one_message_a_second_per_chat() -> None:
    """R-TG-9 (decision 4): one chat gets at most one message a second."""
    clock = ImmediateClock()
    limiter = TelegramRateLimiter(25, clock=clock, sleep=clock.sleep)
    granted = []
    for _ in range(4):
        await limiter.acquire("chat-a")
        granted.append(clock.now)
    assert granted == pytest.approx([0.0, 1.0, 2.0, 3.0])


async def test_a_waiting_chat_does_not_hold_up_other_chats() -> None:
    """While one chat waits out its second, sends to other chats proceed at the global rate."""
    clock = VirtualClock()
    limiter = TelegramRateLimiter(25, clock=clock, sleep=clock.sleep)
    granted: dict[str, list[float]] = {}

    async def send(chat: str) -> None:
        await limiter.acquire(chat)
        granted.setdefault(chat, []).append(clock.now)

    await clock.run(send("a"), send("a"), send("b"), send("c"))

    assert granted["a"] == pytest.approx([0.0, 1.0])
    assert granted["b"][0] < 1.0
    assert granted["c"][0] < 1.0
    times = sorted(t for ts in granted.values() for t in ts)
    assert min(b - a for a, b in itertools.pairwise(times)) >= 1 / 25 - 1e-9


async def test_concurrent_sends_to_one_chat_are_serialised() -> None:
    """Concurrent sends to the same chat still leave a second between them."""
    clock = VirtualClock()
    limiter = TelegramRateLimiter(25, clock=clock, sleep=clock.sleep)
    granted: list[float] = []

    async def send() -> None:
        await limiter.acquire("chat-a")
        granted.append(clock.now)

    await clock.run(*(send() for _ in range(5)))
    granted.sort()
    assert min(b - a for a, b in itertools.pairwise(granted)) >= 1.0 - 1e-9


async def test_hold_chat_after_retry_after() -> None:
    """R-TG-5: a chat held by retry_after reports the remaining seconds; others are unaffected."""
    clock = ImmediateClock()
    limiter = TelegramRateLimiter(25, clock=clock, sleep=clock.sleep)
    await limiter.acquire("chat-a")
    assert limiter.held_seconds("chat-a") is None  # the normal one-second spacing is no hold
    limiter.hold_chat("chat-a", 30)
    assert limiter.held_seconds("chat-a") == 30
    assert limiter.held_seconds("chat-b") is None
    clock.now += 29.5
    assert limiter.held_seconds("chat-a") is None  # within the spacing: acquire just waits
    await limiter.acquire("chat-a")
    assert clock.now == pytest.approx(30.0)


async def test_the_per_chat_map_is_bounded() -> None:
    """The per-chat map forgets the longest-unused chats beyond its bound."""
    clock = ImmediateClock()
    limiter = TelegramRateLimiter(1000, max_chats=10, clock=clock, sleep=clock.sleep)
    for index in range(50):
        await limiter.acquire(f"chat-{index}")
    assert limiter.tracked_chats == 10


async def test_the_provider_paces_sends_through_its_limiter(server: TelegramTestServer) -> None:
    """R-TG-9: the provider waits its limiter out before calling Telegram."""
    clock = ImmediateClock()
    limiter = TelegramRateLimiter(25, clock=clock, sleep=clock.sleep)
    provider = TelegramProvider(_settings(server.base_url), limiter=limiter)
    try:
        for _ in range(3):
            assert (await provider.send(_message())).outcome == "sent"
    finally:
        await provider.aclose()
    assert clock.slept == pytest.approx([1.0, 1.0])
    assert len(server.requests) == 3


# -- the budget shared by worker processes (Redis) ------------------------------------------------


@pytest.mark.redis
async def test_with_redis_worker_processes_share_one_bot_budget(redis_url: str) -> None:
    """R-TG-9: with Redis, the bot's rate is one budget for every worker process, not one each:
    once one process's limiter has used the window, another process's limiter waits for it.
    Here the budget is 3 a minute, so "waits" is unmistakable."""
    budget = limits.RateLimitItemPerMinute(3)
    bot = f"bot-{uuid.uuid4().hex}"  # a window of this test's own in Redis
    one, two = (
        TelegramRateLimiter(1000, shared=RateLimits.build(redis_url), shared_rate=budget, bot=bot)
        for _ in range(2)
    )
    try:
        assert one.shared and two.shared
        for chat in ("a", "b"):
            await asyncio.wait_for(one.acquire(chat), WAIT_SECONDS)
        await asyncio.wait_for(two.acquire("c"), WAIT_SECONDS)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(two.acquire("d"), 1.0)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(one.acquire("e"), 1.0)
    finally:
        await one.aclose()
        await two.aclose()


@pytest.mark.redis
async def test_with_redis_one_chat_gets_one_message_a_second_across_processes(
    redis_url: str,
) -> None:
    """R-TG-9 (decision 4): the one-message-a-second spacing of a chat holds across processes:
    right after one process sent to a chat, another process's send to it has to wait."""
    chat = f"chat-{uuid.uuid4().hex}"
    one, two = (
        TelegramRateLimiter(1000, per_chat_interval=60, shared=RateLimits.build(redis_url))
        for _ in range(2)
    )
    try:
        await asyncio.wait_for(one.acquire(chat), WAIT_SECONDS)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(two.acquire(chat), 1.0)
        await asyncio.wait_for(two.acquire(f"{chat}-other"), WAIT_SECONDS)
    finally:
        await one.aclose()
        await two.aclose()


def test_without_redis_the_pace_is_per_process() -> None:
    """R-TG-9 (documented): without HERALD_REDIS_URL the provider paces its own process only."""
    provider = TelegramProvider(_settings("http://127.0.0.1:9"))
    assert not provider.limiter.shared
    shared = TelegramProvider(
        _settings("http://127.0.0.1:9").model_copy(update={"redis_url": "redis://127.0.0.1:1/0"})
    )
    assert shared.limiter.shared
