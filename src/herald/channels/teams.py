"""Microsoft Teams over a person's incoming webhook or Workflows webhook, with an Adaptive Card.

The card (version 1.4) holds the title and the body as TextRun elements of RichTextBlocks:
TextRun shows its text as written and interprets no markdown, so neither the wording nor a value
can make a link or a mention. An https action URL becomes one Action.OpenUrl.

Answers: 200/202 sent; 429 (or the old connectors' 200 that says "HTTP error 429") retry after;
5xx, timeouts retry; 404/410 the webhook was deleted: unreachable, permanent; 400 and any other
4xx the card was refused: permanent. Codes from TEAMS_ERROR_CODES.

A webhook URL is a credential: whoever holds it can post into that chat. It is never logged —
httpx's request log line is rewritten while this provider sends — nor put in an error, a detail
or a hint (the hint names the host only). Redirects are not followed.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Mapping
from typing import Any, Final, Literal, get_args
from urllib.parse import urlsplit

import httpx
from typing_extensions import override

from herald.channels import destination
from herald.channels.base import Message, ProviderOutcome, http_client, opaque_transport_failure
from herald.config import Settings
from herald.rendering.urls import is_safe_action_url

logger = logging.getLogger(__name__)

TeamsErrorCode = Literal[
    "TEAMS_RATE_LIMITED",  # 429: retry no earlier than Retry-After
    "TEAMS_TRANSPORT",  # 5xx, timeout, connection
    "TEAMS_UNREACHABLE",  # 404/410: the webhook was deleted (permanent)
    "TEAMS_REJECTED",  # 400 or another 4xx: the card was refused (permanent)
    "TEAMS_WEBHOOK_INVALID",  # the stored URL is not an http(s) URL at all (permanent)
]
TEAMS_ERROR_CODES: Final[tuple[str, ...]] = get_args(TeamsErrorCode)

CARD_CONTENT_TYPE: Final = "application/vnd.microsoft.card.adaptive"
CARD_VERSION: Final = "1.4"
MAX_RETRY_AFTER_SECONDS: Final = 86_400

# Set while this provider posts, so the filter on httpx's logger knows the URL is a webhook's.
_SENDING: contextvars.ContextVar[bool] = contextvars.ContextVar("teams_sending", default=False)


class TeamsProvider:
    """The Teams provider: configured when HERALD_TEAMS_PROVIDER=teams (each person's webhook URL
    is their destination; there is no deployment-wide credential)."""

    channel = "teams"
    name = "teams"

    def __init__(self, settings: Settings, *, button_text: str = "Open") -> None:
        self._settings = settings
        self._button_text = button_text
        self._client: httpx.AsyncClient | None = None

    def is_configured(self) -> bool:
        return self._settings.teams_provider == "teams"

    @property
    def is_mock(self) -> bool:
        return False

    async def send(self, message: Message) -> ProviderOutcome:
        if not self.is_configured():
            return ProviderOutcome.unconfigured()
        url = message.to.strip()
        if not url:
            return ProviderOutcome(outcome="skipped", skip_reason="no_destination")
        host = webhook_host(url)
        if host is None:
            outcome = ProviderOutcome.failure(
                "TEAMS_WEBHOOK_INVALID", retryable=False, detail="url"
            )
            self._log_failure(outcome, "?")
            return outcome
        # The URL was checked when the directory took it; checked again now, because a name that
        # resolved to a public address then may resolve to a private one today, and the post goes
        # to the address checked (the host in Host and SNI), as the webhook worker's does.
        try:
            target = await destination.resolve(url, self._settings)
        except (destination.WebhookUrlForbidden, destination.WebhookUrlInvalid):
            outcome = ProviderOutcome.failure(
                "TEAMS_WEBHOOK_INVALID", retryable=False, detail="forbidden"
            )
            self._log_failure(outcome, host)
            return outcome
        except destination.WebhookUrlUnresolvable:
            outcome = ProviderOutcome.failure("TEAMS_TRANSPORT", retryable=True, detail="dns")
            self._log_failure(outcome, host)
            return outcome
        card = build_card_message(message, button_text=self._button_text)
        token = _SENDING.set(True)
        try:
            response = await self._http().post(
                target.request_url(),
                json=card,
                headers={"host": target.host_header()},
                extensions={"sni_hostname": target.host} if target.scheme == "https" else {},
            )
        # httpx puts the URL, a credential here, in exception text: map on the type only.
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            outcome = opaque_transport_failure("TEAMS_TRANSPORT", exc)
        else:
            outcome = classify_teams_response(
                response.status_code, response.content, response.headers
            )
        finally:
            _SENDING.reset(token)
        if outcome.outcome == "sent":
            logger.debug("teams message sent to a webhook on %s", host)
        else:
            self._log_failure(outcome, host)
        return outcome

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = http_client(self._settings, "", follow_redirects=False)
        return self._client

    def _log_failure(self, outcome: ProviderOutcome, host: str) -> None:
        logger.warning(
            "teams send failed: code=%s detail=%s retryable=%s host=%s",
            outcome.error_code,
            outcome.detail,
            outcome.retryable,
            host,
        )


def _text_block(text: str, **run: Any) -> dict[str, Any]:
    return {"type": "RichTextBlock", "inlines": [{"type": "TextRun", "text": text, **run}]}


def build_card_message(message: Message, *, button_text: str = "Open") -> dict[str, Any]:
    """The webhook's JSON: a message with one Adaptive Card attachment."""
    body: list[dict[str, Any]] = []
    title = (message.title or "").strip()
    if title:
        body.append(_text_block(title, weight="Bolder", size="Medium"))
    body.append(_text_block(message.body))
    card: dict[str, Any] = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": CARD_VERSION,
        "body": body,
    }
    url = message.action_url
    if url and is_safe_action_url(url) and url.lower().startswith("https://"):
        card["actions"] = [{"type": "Action.OpenUrl", "title": button_text, "url": url}]
    return {
        "type": "message",
        "attachments": [{"contentType": CARD_CONTENT_TYPE, "contentUrl": None, "content": card}],
    }


def classify_teams_response(
    status: int, content: bytes, headers: Mapping[str, str]
) -> ProviderOutcome:
    """Sort a webhook's answer; the detail is the HTTP status, never the answer's text."""
    status_text = str(status)
    if 200 <= status < 300:
        # The old Office 365 connectors answer 200 with "… returned HTTP error 429" in the body.
        text = content[:300].decode("utf-8", "replace")
        if "HTTP error 429" in text:
            return ProviderOutcome.failure(
                "TEAMS_RATE_LIMITED", retryable=True, detail="http_200_429", status=status_text
            )
        if "HTTP error" in text:
            return ProviderOutcome.failure(
                "TEAMS_REJECTED", retryable=False, detail="http_200_error", status=status_text
            )
        return ProviderOutcome.sent(None, status=status_text)
    if status == 429:
        return ProviderOutcome.failure(
            "TEAMS_RATE_LIMITED",
            retryable=True,
            detail="http_429",
            status=status_text,
            retry_after_seconds=_retry_after(headers),
        )
    if status >= 500:
        return ProviderOutcome.failure(
            "TEAMS_TRANSPORT",
            retryable=True,
            detail=f"http_{status}",
            status=status_text,
            retry_after_seconds=_retry_after(headers),
        )
    if status in (404, 410):
        return ProviderOutcome.failure(
            "TEAMS_UNREACHABLE",
            retryable=False,
            detail=f"http_{status}",
            status=status_text,
            recipient_blocked=True,
        )
    return ProviderOutcome.failure(
        "TEAMS_REJECTED", retryable=False, detail=f"http_{status}", status=status_text
    )


def webhook_host(url: str) -> str | None:
    """The webhook URL's host (what logs and hints may show), or None for no http(s) URL."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return None
    return parts.hostname


def _retry_after(headers: Mapping[str, str]) -> int | None:
    value = headers.get("retry-after", "").strip()
    if value.isdigit():
        return min(int(value), MAX_RETRY_AFTER_SECONDS)
    return None


class _WebhookUrlRedactor(logging.Filter):
    """Rewrites httpx's "HTTP Request: POST <url> …" line while a Teams send is in flight."""

    @override
    def filter(self, record: logging.LogRecord) -> bool:
        if _SENDING.get() and isinstance(record.args, tuple) and len(record.args) >= 2:
            args = list(record.args)
            host = webhook_host(str(args[1]))
            args[1] = f"<teams webhook on {host or '?'}>"
            record.args = tuple(args)
        return True


logging.getLogger("httpx").addFilter(_WebhookUrlRedactor())
