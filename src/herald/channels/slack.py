"""Slack over the Web API's chat.postMessage with a bot token (slack_sdk's AsyncWebClient).

The message is Block Kit: the title as a header block (plain text), the body as a mrkdwn section
with `&`, `<` and `>` escaped, so neither the wording nor a value can make a link, a mention
(`<!channel>`) or a formatted span; an https action URL becomes one button in an actions block.
`text` carries the same escaped words for notifications and clients without blocks.

Answers sort into sent, retryable (`ratelimited` with its Retry-After, a token Slack refuses —
the operator fixes it and the worker's retries send — 5xx, timeouts) and permanent
(unreachable: the channel or user is gone, the bot not in the channel; rejected: the message
itself), with codes from SLACK_ERROR_CODES and a detail that is Slack's own error token (a fixed
vocabulary, matched against a table, never free text).

The bot token rides in the Authorization header only. slack_sdk redacts that header from its
debug log, but it logs request and response bodies at debug; its logger is held at INFO so a
message's words never reach a log line, and exceptions are mapped on their type and Slack's
error token, never their text.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from typing import Any, Final, Literal, get_args

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from herald.channels.base import Message, ProviderOutcome
from herald.config import Settings
from herald.rendering.urls import is_safe_action_url

logger = logging.getLogger(__name__)
# slack_sdk's own logger: debug lines carry request and response bodies (the message's words).
_SDK_LOGGER: Final = logging.getLogger("herald.channels.slack.sdk")
_SDK_LOGGER.setLevel(logging.INFO)

SlackErrorCode = Literal[
    "SLACK_RATE_LIMITED",  # 429 ratelimited: retry no earlier than Retry-After
    "SLACK_TRANSPORT",  # 5xx, timeout, connection, a non-JSON answer
    "SLACK_UNREACHABLE",  # the channel or user is gone or closed to the bot: permanent
    "SLACK_AUTH",  # the token is wrong, revoked or its workspace inactive: fixable, so retried
    "SLACK_REJECTED",  # the message itself: too long, blocks refused, any other error token
    "SLACK_RESPONSE_INVALID",  # a 2xx answer that is not the Web API's
]
SLACK_ERROR_CODES: Final[tuple[str, ...]] = get_args(SlackErrorCode)

UNREACHABLE_ERRORS: Final[tuple[str, ...]] = (
    "channel_not_found",
    "not_in_channel",
    "is_archived",
    "user_not_found",
    "user_disabled",
    "cannot_dm_bot",
)
AUTH_ERRORS: Final[tuple[str, ...]] = (
    "invalid_auth",
    "not_authed",
    "token_revoked",
    "token_expired",
    "account_inactive",
    "missing_scope",
)
REJECTED_ERRORS: Final[tuple[str, ...]] = (
    "msg_too_long",
    "invalid_blocks",
    "invalid_blocks_format",
    "no_text",
    "too_many_attachments",
)
MAX_RETRY_AFTER_SECONDS: Final = 86_400
# Block Kit's limits: a header's text 150 characters, a section's 3,000.
MAX_HEADER = 150
MAX_SECTION = 3000

# A Slack user (U, W), channel (C, G) or direct-message (D) id, as the directory accepts it.
SLACK_ID_PATTERN: Final = r"^[UWCGD][A-Z0-9]{8,20}$"
_SLACK_ID = re.compile(SLACK_ID_PATTERN)
_ERROR_TOKEN = re.compile(r"^[a-z0-9_]{1,60}$")


class SlackProvider:
    """The Slack provider: configured when HERALD_SLACK_BOT_TOKEN is set."""

    channel = "slack"
    name = "slack"

    def __init__(self, settings: Settings, *, button_text: str = "Open") -> None:
        self._settings = settings
        self._token = (settings.slack_bot_token or "").strip() or None
        self._button_text = button_text
        self._session: aiohttp.ClientSession | None = None
        self._client: AsyncWebClient | None = None

    def is_configured(self) -> bool:
        return self._token is not None

    @property
    def is_mock(self) -> bool:
        return False

    async def send(self, message: Message) -> ProviderOutcome:
        if self._token is None:
            return ProviderOutcome.unconfigured()
        target = message.to.strip()
        if not target:
            return ProviderOutcome(outcome="skipped", skip_reason="no_destination")
        payload = build_post_message(message, button_text=self._button_text)
        try:
            response = await self._web().chat_postMessage(**payload)
        except SlackApiError as exc:
            answer = exc.response
            data = answer.data if isinstance(answer.data, dict) else None
            outcome = classify_slack_answer(answer.status_code, data, answer.headers)
        # Exception text can carry the request; map on the type only.
        except (TimeoutError, aiohttp.ServerTimeoutError):
            outcome = ProviderOutcome.failure("SLACK_TRANSPORT", retryable=True, detail="timeout")
        except (aiohttp.ClientError, SlackClientError, OSError, ValueError):
            outcome = ProviderOutcome.failure(
                "SLACK_TRANSPORT", retryable=True, detail="connection"
            )
        else:
            data = response.data if isinstance(response.data, dict) else None
            outcome = classify_slack_answer(response.status_code, data, response.headers)
        if outcome.outcome == "sent":
            logger.debug("slack message sent to %s", mask_slack_id(target))
        else:
            logger.warning(
                "slack send failed: code=%s detail=%s retryable=%s to=%s",
                outcome.error_code,
                outcome.detail,
                outcome.retryable,
                mask_slack_id(target),
            )
        return outcome

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
            self._client = None

    def _web(self) -> AsyncWebClient:
        if self._client is None:
            settings = self._settings
            timeout = aiohttp.ClientTimeout(
                total=settings.provider_connect_timeout_seconds
                + settings.provider_read_timeout_seconds,
                connect=settings.provider_connect_timeout_seconds,
            )
            self._session = aiohttp.ClientSession(timeout=timeout)
            self._client = AsyncWebClient(
                token=self._token,
                base_url=settings.slack_base_url,
                timeout=math.ceil(timeout.total or 13),
                session=self._session,
                logger=_SDK_LOGGER,
                # The worker schedules retries (backoff, attempts, dead letters), not the SDK.
                retry_handlers=[],
            )
        return self._client


def escape_mrkdwn(text: str) -> str:
    """Slack's three control characters in text objects: `&`, `<`, `>` (links, mentions)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def build_post_message(message: Message, *, button_text: str = "Open") -> dict[str, Any]:
    """chat.postMessage's arguments: header, mrkdwn section, and an https button."""
    body = escape_mrkdwn(message.body)
    title = (message.title or "").strip()
    blocks: list[dict[str, Any]] = []
    if title:
        # A header is plain_text: Slack shows it as written, nothing to escape.
        blocks.append(
            {"type": "header", "text": {"type": "plain_text", "text": _clip(title, MAX_HEADER)}}
        )
    section = _clip(body, MAX_SECTION)
    # A cut through an escape (`&am…`) would show as written: drop the broken entity.
    section = re.sub(r"&[a-z]{0,3}…$", "…", section)
    blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": section}})
    url = message.action_url
    if url and is_safe_action_url(url) and url.lower().startswith("https://"):
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": button_text},
                        "url": url,
                    }
                ],
            }
        )
    fallback = f"{escape_mrkdwn(title)}\n{body}" if title else body
    return {
        "channel": message.to.strip(),
        "text": fallback,
        "blocks": blocks,
        "unfurl_links": False,
        "unfurl_media": False,
    }


def classify_slack_answer(
    status: int, data: Mapping[str, Any] | None, headers: Mapping[str, str]
) -> ProviderOutcome:
    """Sort a Web API answer; the detail is Slack's error token or the HTTP status, the message
    id Slack's ts."""
    status_text = str(status)
    error = data.get("error") if data is not None else None
    token = error if isinstance(error, str) and _ERROR_TOKEN.fullmatch(error) else None
    if status == 429 or token == "ratelimited":
        return ProviderOutcome.failure(
            "SLACK_RATE_LIMITED",
            retryable=True,
            detail="ratelimited",
            status=status_text,
            retry_after_seconds=_retry_after(headers),
        )
    if status >= 500 or data is None:
        return ProviderOutcome.failure(
            "SLACK_TRANSPORT",
            retryable=True,
            detail=f"http_{status}",
            status=status_text,
            retry_after_seconds=_retry_after(headers),
        )
    if 200 <= status < 300 and data.get("ok") is True:
        ts = data.get("ts")
        if not isinstance(ts, str) or not ts:
            return ProviderOutcome.failure(
                "SLACK_RESPONSE_INVALID", retryable=True, detail=f"http_{status}"
            )
        # ts alone (unique within its channel): the channel id is the person's, and a message
        # id outlives an erasure.
        return ProviderOutcome.sent(ts, status=status_text)
    if token in UNREACHABLE_ERRORS:
        return ProviderOutcome.failure(
            "SLACK_UNREACHABLE",
            retryable=False,
            detail=token,
            status=status_text,
            recipient_blocked=True,
        )
    if token in AUTH_ERRORS:
        return ProviderOutcome.failure(
            "SLACK_AUTH", retryable=True, detail=token, status=status_text
        )
    if token is None and 200 <= status < 300:
        return ProviderOutcome.failure(
            "SLACK_RESPONSE_INVALID", retryable=True, detail=f"http_{status}"
        )
    return ProviderOutcome.failure(
        "SLACK_REJECTED",
        retryable=False,
        detail=token if token in REJECTED_ERRORS else (token or f"http_{status}"),
        status=status_text,
    )


def is_slack_id(value: str) -> bool:
    return _SLACK_ID.fullmatch(value) is not None


def mask_slack_id(value: str) -> str:
    """The id's kind letter and its last 3 characters, for logs and hints."""
    if len(value) <= 6:
        return "***"
    return f"{value[0]}…{value[-3:]}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _retry_after(headers: Mapping[str, str]) -> int | None:
    value = ""
    for name, raw in headers.items():
        if name.lower() == "retry-after":
            value = str(raw).strip()
            break
    if value.isdigit():
        return min(int(value), MAX_RETRY_AFTER_SECONDS)
    return None
