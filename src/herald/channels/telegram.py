"""Telegram over the Bot API's sendMessage, paced below Telegram's flood limits.

The body is already Telegram HTML (allowlisted tags, escaped values: R-RENDER-29..35); an https
action URL becomes one inline-keyboard button of type url or mini_app (R-RENDER-37..39). Answers
sort into sent, retryable (429 with its retry_after, 5xx, timeouts: R-TG-3..5) and permanent
(blocked, chat not found, rejected: R-TG-6), with codes from TELEGRAM_ERROR_CODES and a detail
chosen from fixed tokens, never Telegram's description, which can echo the text.

The bot token is part of every request URL. It must never reach a log line, an error or an
exception message: exceptions are mapped on their type only (their text can carry the URL), and
a filter on httpx's logger redacts the token from httpx's own request log.

Sending is paced (R-TG-9, decision 4) at HERALD_TELEGRAM_RATE_PER_SECOND across all chats, and at
most one message a second to any one chat. Each process paces itself smoothly (a token bucket on
an injectable clock); with HERALD_REDIS_URL set, every send also takes a slot in a moving window
shared by all worker processes (the `limits` library over Redis), so N workers together stay
within the bot's one budget instead of N times it. Without Redis the pace is per process, and N
workers may send N times the rate (docs/tenancy-and-security.md, "Security").
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal, get_args
from urllib.parse import quote

import httpx
import limits
from typing_extensions import override

from herald.channels.base import Message, ProviderOutcome, http_client, opaque_transport_failure
from herald.config import Settings
from herald.ratelimit import RateLimits
from herald.rendering.urls import is_safe_action_url

logger = logging.getLogger(__name__)

TelegramErrorCode = Literal[
    "TELEGRAM_RATE_LIMITED",  # 429: retry no earlier than retry_after (R-TG-3, R-TG-5)
    "TELEGRAM_TRANSPORT",  # 5xx, timeout, connection (R-TG-4)
    "TELEGRAM_BLOCKED",  # 403: the person blocked the bot, or is gone (R-TG-6)
    "TELEGRAM_CHAT_NOT_FOUND",  # 400 chat not found (R-TG-6)
    "TELEGRAM_REJECTED",  # any other 4xx about the message, e.g. unparsable HTML (R-TG-6)
    "TELEGRAM_AUTH",  # 401/404: the bot token or base URL is wrong; fixable, so retried
    "TELEGRAM_RESPONSE_INVALID",  # a 2xx answer that is not the Bot API's
]
TELEGRAM_ERROR_CODES: Final[tuple[str, ...]] = get_args(TelegramErrorCode)

ButtonKind = Literal["url", "mini_app"]
MAX_RETRY_AFTER_SECONDS: Final = 86_400
PER_CHAT_INTERVAL_SECONDS: Final = 1.0

# Telegram's descriptions are matched to pick a fixed detail token; the text itself is never kept.
_FORBIDDEN_REASONS: Final[tuple[tuple[str, str], ...]] = (
    ("blocked by the user", "blocked_by_user"),
    ("user is deactivated", "user_deactivated"),
    ("can't initiate conversation", "cannot_initiate"),
    ("kicked", "kicked"),
    ("not a member", "not_a_member"),
)
_CHAT_NOT_FOUND: Final[tuple[str, ...]] = ("chat not found", "user not found", "peer_id_invalid")
_REJECTED_REASONS: Final[tuple[tuple[str, str], ...]] = (
    ("can't parse entities", "cant_parse_entities"),
    ("message is too long", "message_too_long"),
    ("text must be non-empty", "empty_text"),
    ("button_url_invalid", "button_url_invalid"),
    ("wrong http url", "button_url_invalid"),
)
_TOKEN_PATTERN: Final = re.compile(r"bot\d+:[A-Za-z0-9_-]+")


class TelegramRateLimiter:
    """A global token bucket plus a per-chat minimum spacing, on an injectable clock.

    `acquire` waits until both allow a send and then takes the slot. Waiters are not queued in
    order: a message to a chat that must wait its second does not hold up other chats. A 429's
    retry_after holds its chat (`hold_chat`); `held_seconds` lets the caller fail fast instead of
    waiting that long. The per-chat map is bounded, dropping the longest-unused chat first.
    """

    def __init__(
        self,
        rate_per_second: float,
        *,
        per_chat_interval: float = PER_CHAT_INTERVAL_SECONDS,
        burst: float = 1.0,
        max_chats: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        shared: RateLimits | None = None,
        shared_rate: limits.RateLimitItem | None = None,
        bot: str = "bot",
    ) -> None:
        if rate_per_second <= 0 or burst < 1 or max_chats < 1:
            raise ValueError("rate_per_second must be > 0, burst >= 1 and max_chats >= 1")
        self._rate = rate_per_second
        self._burst = burst
        self._per_chat = per_chat_interval
        self._max_chats = max_chats
        self._clock = clock
        self._sleep = sleep
        self._tokens = burst
        self._refilled_at = clock()
        self._chat_next: OrderedDict[str, float] = OrderedDict()
        # The budget shared by every worker process (Redis), and the windows it is counted in.
        self._shared = shared
        self._shared_rate = shared_rate or _per_second_item(rate_per_second)
        self._shared_per_chat = _per_second_item(1 / per_chat_interval)
        # Whose budget: the bot's numeric id (the public half of its token), so two deployments
        # with different bots sharing a Redis do not share a budget.
        self._bot = bot

    async def acquire(self, chat: str) -> None:
        while True:
            now = self._clock()
            self._refill(now)
            chat_wait = self._chat_next.get(chat, now) - now
            token_wait = 0.0 if self._tokens >= 1 - 1e-9 else (1 - self._tokens) / self._rate
            wait = max(chat_wait, token_wait)
            if wait <= 0:
                self._tokens = max(0.0, self._tokens - 1)
                self._set_chat_next(chat, now + self._per_chat)
                break
            await self._sleep(wait)
        if self._shared is not None:
            # This process's pace allows it; now the bot's budget across every process must too.
            await self._shared.acquire(self._shared_per_chat, "telegram", self._bot, chat)
            await self._shared.acquire(self._shared_rate, "telegram", self._bot)

    @property
    def shared(self) -> bool:
        """Whether sends are also counted in a budget shared by every worker process."""
        return self._shared is not None and self._shared.shared

    async def aclose(self) -> None:
        if self._shared is not None:
            await self._shared.aclose()

    def hold_chat(self, chat: str, seconds: float) -> None:
        """Telegram asked for `seconds` of quiet on this chat (a 429's retry_after)."""
        until = self._clock() + seconds
        self._set_chat_next(chat, max(until, self._chat_next.get(chat, until)))

    def held_seconds(self, chat: str) -> int | None:
        """Whole seconds this chat is held beyond the normal spacing, or None."""
        remaining = self._chat_next.get(chat, 0.0) - self._clock()
        if remaining > self._per_chat:
            return math.ceil(remaining)
        return None

    @property
    def rate_per_second(self) -> float:
        return self._rate

    @property
    def tracked_chats(self) -> int:
        return len(self._chat_next)

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._refilled_at)
        self._tokens = min(self._burst, self._tokens + elapsed * self._rate)
        self._refilled_at = now

    def _set_chat_next(self, chat: str, when: float) -> None:
        self._chat_next[chat] = when
        self._chat_next.move_to_end(chat)
        while len(self._chat_next) > self._max_chats:
            self._chat_next.popitem(last=False)


def _per_second_item(rate: float) -> limits.RateLimitItem:
    """`rate` a second as a moving-window item: N per second, or 1 per N seconds below one."""
    if rate >= 1:
        return limits.RateLimitItemPerSecond(math.floor(rate))
    return limits.RateLimitItemPerSecond(1, math.ceil(1 / rate))


class TelegramProvider:
    """The Telegram provider: configured when HERALD_TELEGRAM_BOT_TOKEN is set."""

    channel = "telegram"
    name = "telegram"

    def __init__(
        self,
        settings: Settings,
        *,
        limiter: TelegramRateLimiter | None = None,
        button_kind: ButtonKind = "url",
        button_text: str = "Open",
    ) -> None:
        self._settings = settings
        self._token = settings.telegram_bot_token or None
        self._limiter = limiter or TelegramRateLimiter(
            settings.telegram_rate_per_second,
            shared=RateLimits.build(settings.redis_url) if settings.redis_url else None,
            bot=(self._token or "").split(":", 1)[0] or "bot",
        )
        self._button_kind = button_kind
        self._button_text = button_text
        self._client: httpx.AsyncClient | None = None
        if self._token:
            _TOKEN_REDACTOR.add(self._token)
            _TOKEN_REDACTOR.add(quote(self._token, safe=":"))

    def is_configured(self) -> bool:
        return self._token is not None

    @property
    def limiter(self) -> TelegramRateLimiter:
        return self._limiter

    @property
    def is_mock(self) -> bool:
        return False

    async def send(self, message: Message) -> ProviderOutcome:
        token = self._token
        if token is None:
            return ProviderOutcome.unconfigured()
        chat = message.to.strip()
        if not chat:
            return ProviderOutcome(outcome="skipped", skip_reason="no_destination")
        held = self._limiter.held_seconds(chat)
        if held is not None:
            # Telegram already told us to leave this chat alone for a while (R-TG-5).
            outcome = ProviderOutcome.failure(
                "TELEGRAM_RATE_LIMITED",
                retryable=True,
                detail="chat_held",
                retry_after_seconds=held,
            )
            self._log_failure(outcome, chat)
            return outcome
        await self._limiter.acquire(chat)
        payload = build_send_message(
            message, button_kind=self._button_kind, button_text=self._button_text
        )
        try:
            # The leading slash matters: `bot123:abc/…` alone would parse as a URL scheme.
            response = await self._http().post(
                f"/bot{quote(token, safe=':')}/sendMessage", json=payload
            )
        # httpx puts the URL, and so the bot token, in exception text: map on the type only.
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            outcome = opaque_transport_failure("TELEGRAM_TRANSPORT", exc)
        else:
            outcome = classify_telegram_response(
                response.status_code, response.content, response.headers
            )
        if outcome.error_code == "TELEGRAM_RATE_LIMITED" and outcome.retry_after_seconds:
            self._limiter.hold_chat(chat, outcome.retry_after_seconds)
        if outcome.outcome == "sent":
            logger.debug("telegram message sent to chat %s", mask_chat_id(chat))
        else:
            self._log_failure(outcome, chat)
        return outcome

    async def aclose(self) -> None:
        await self._limiter.aclose()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = http_client(self._settings, self._settings.telegram_base_url)
        return self._client

    def _log_failure(self, outcome: ProviderOutcome, chat: str) -> None:
        logger.warning(
            "telegram send failed: code=%s detail=%s retryable=%s chat=%s",
            outcome.error_code,
            outcome.detail,
            outcome.retryable,
            mask_chat_id(chat),
        )


def build_send_message(
    message: Message, *, button_kind: ButtonKind = "url", button_text: str = "Open"
) -> dict[str, Any]:
    """sendMessage's JSON: the HTML body and, for an https action URL, one button."""
    chat = message.to.strip()
    payload: dict[str, Any] = {
        "chat_id": int(chat) if re.fullmatch(r"-?\d+", chat) else chat,
        "text": message.body,
        "parse_mode": "HTML",
        "disable_web_page_preview": True,
    }
    url = message.action_url
    # Only https buttons (R-RENDER-39); an app-relative path has no host to open.
    if url and is_safe_action_url(url) and url.lower().startswith("https://"):
        button: dict[str, Any] = {"text": button_text}
        if button_kind == "mini_app":
            button["web_app"] = {"url": url}
        else:
            button["url"] = url
        payload["reply_markup"] = {"inline_keyboard": [[button]]}
    return payload


def classify_telegram_response(
    status: int, content: bytes, headers: Mapping[str, str]
) -> ProviderOutcome:
    """Sort a Bot API answer; the detail is a fixed token or the HTTP status, never its text."""
    body = _json_object(content)
    status_text = str(status)
    if 200 <= status < 300:
        result = body.get("result") if body is not None else None
        message_id = result.get("message_id") if isinstance(result, dict) else None
        if body is None or body.get("ok") is not True or not isinstance(message_id, int):
            return ProviderOutcome.failure(
                "TELEGRAM_RESPONSE_INVALID", retryable=True, detail=f"http_{status}"
            )
        return ProviderOutcome.sent(str(message_id), status=status_text)
    description = body.get("description") if body is not None else None
    reason = description.lower() if isinstance(description, str) else ""
    retry_after = _retry_after(body, headers)
    if status == 429:
        return ProviderOutcome.failure(
            "TELEGRAM_RATE_LIMITED",
            retryable=True,
            detail="http_429",
            status=status_text,
            retry_after_seconds=retry_after,
        )
    if status >= 500:
        return ProviderOutcome.failure(
            "TELEGRAM_TRANSPORT",
            retryable=True,
            detail=f"http_{status}",
            status=status_text,
            retry_after_seconds=retry_after,
        )
    if status == 403:
        return ProviderOutcome.failure(
            "TELEGRAM_BLOCKED",
            retryable=False,
            detail=_reason_token(reason, _FORBIDDEN_REASONS, "forbidden"),
            status=status_text,
            recipient_blocked=True,
        )
    if status == 400 and any(needle in reason for needle in _CHAT_NOT_FOUND):
        return ProviderOutcome.failure(
            "TELEGRAM_CHAT_NOT_FOUND", retryable=False, detail="chat_not_found", status=status_text
        )
    if status in (401, 404):
        return ProviderOutcome.failure(
            "TELEGRAM_AUTH", retryable=True, detail=f"http_{status}", status=status_text
        )
    return ProviderOutcome.failure(
        "TELEGRAM_REJECTED",
        retryable=False,
        detail=_reason_token(reason, _REJECTED_REASONS, f"http_{status}"),
        status=status_text,
    )


def mask_chat_id(chat: str) -> str:
    """At most the last 4 characters of a chat id, for logs."""
    if len(chat) <= 6:
        return "***"
    return f"***{chat[-4:]}"


def _reason_token(reason: str, table: tuple[tuple[str, str], ...], default: str) -> str:
    for needle, token in table:
        if needle in reason:
            return token
    return default


def _retry_after(body: dict[str, Any] | None, headers: Mapping[str, str]) -> int | None:
    parameters = body.get("parameters") if body is not None else None
    value = parameters.get("retry_after") if isinstance(parameters, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return min(value, MAX_RETRY_AFTER_SECONDS)
    header = headers.get("retry-after", "").strip()
    if header.isdigit():
        return min(int(header), MAX_RETRY_AFTER_SECONDS)
    return None


def _json_object(content: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(content)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


class _BotTokenRedactor(logging.Filter):
    """Redacts bot tokens from httpx's request log ("HTTP Request: POST …/bot<token>/…")."""

    def __init__(self) -> None:
        super().__init__()
        self._tokens: set[str] = set()

    def add(self, token: str) -> None:
        self._tokens.add(token)

    @override
    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        redacted = _TOKEN_PATTERN.sub("bot<redacted>", text)
        for token in self._tokens:
            redacted = redacted.replace(token, "<redacted>")
        if redacted != text:
            record.msg = redacted
            record.args = None
        return True


_TOKEN_REDACTOR: Final = _BotTokenRedactor()
logging.getLogger("httpx").addFilter(_TOKEN_REDACTOR)
