"""The one shape every provider speaks: a Message in, a ProviderOutcome out.

A provider never raises for a delivery problem: it sorts every answer into sent, failed
(retryable or not) or skipped, with an error code from its channel's fixed table and at most a
bounded, allowlisted detail — never provider text, which can echo the message (an OTP) back
(R-PROVIDER-24, R-STATE-15). An unconfigured provider answers skipped/unconfigured (R-PROVIDER-14).
"""

from __future__ import annotations

import logging
import re
from typing import Any, Literal, Protocol

import httpx

from herald.config import Settings
from herald.values import value

Outcome = Literal["sent", "failed", "skipped"]
SkipReason = Literal["unconfigured", "mock", "no_destination"]
# Why a failure is certainly not a send, so another provider of the channel may take the message
# with no risk of a second copy (herald.channels.failover): "provider" — this provider is down or
# refused us before taking anything (connection refused, TLS, an SMTP refusal before the message
# was accepted, 429/503, our credentials or balance); "destination" — this provider cannot serve
# this destination (Aakash outside Nepal), which says nothing about its health.
NotSent = Literal["provider", "destination"]

MAX_DETAIL = 80
_DETAIL_ALLOWED = re.compile(r"[^A-Za-z0-9_.:\- ]")


@value
class TemplateCall:
    """A provider-side template to send instead of words (WhatsApp's approved message templates):
    its name, language code, and the body's parameter values in the template's order."""

    name: str
    language: str
    parameters: tuple[str, ...] = ()


@value
class Message:
    """One rendered message to one destination. Bodies live only in memory for the send."""

    channel: str
    to: str  # email address, E.164 number (SMS, WhatsApp), push token, or Telegram chat id
    body: str  # plain text (email text part, SMS, push body) or Telegram HTML
    title: str | None = None  # email subject, push title
    body_html: str | None = None  # email only, every value already escaped
    action_url: str | None = None  # already through the safety check
    platform: str | None = None  # push: android | ios | web | webpush
    # webpush: the subscription's (p256dh, auth) keys, base64url; `to` is its endpoint URL.
    push_keys: tuple[str, str] | None = None
    idempotency_key: str | None = None  # stable per delivery attempt chain (Resend Idempotency-Key)
    kind: str | None = None
    priority: str = "normal"
    # whatsapp: the approved template this message is sent as (`body` is its rendered text).
    template: TemplateCall | None = None


@value
class ProviderOutcome:
    outcome: Outcome
    retryable: bool = False
    error_code: str | None = None
    detail: str | None = None
    provider_message_id: str | None = None
    provider_status: str | None = None
    retry_after_seconds: int | None = None
    skip_reason: SkipReason | None = None
    invalidate_token: bool = False  # push: the token is dead (UNREGISTERED, invalid)
    recipient_blocked: bool = False  # telegram: the person blocked the bot (slack, teams: gone)
    # email, sms, whatsapp: the provider says this address or number can never take a message (Aakash's
    # data.invalid): the recorder marks it undeliverable, as a hard-bounce receipt does.
    destination_undeliverable: bool = False
    # Set only when the provider certainly did not take the message (NotSent); None for a send, a
    # verdict on the message itself (an invalid address) and every ambiguous failure (a timeout
    # or a dropped connection after the message was handed over), which never fail over.
    not_sent: NotSent | None = None
    # The provider that gave this answer (set by the worker or the failover provider), and those
    # a failover passed over in this attempt, each as `name:reason`: the attempt's evidence.
    provider: str | None = None
    passed_over: tuple[str, ...] = ()

    @staticmethod
    def sent(message_id: str | None = None, status: str | None = None) -> ProviderOutcome:
        return ProviderOutcome(
            outcome="sent", provider_message_id=message_id, provider_status=status
        )

    @staticmethod
    def unconfigured() -> ProviderOutcome:
        return ProviderOutcome(outcome="skipped", skip_reason="unconfigured")

    @staticmethod
    def failure(
        code: str,
        *,
        retryable: bool,
        detail: str | None = None,
        status: str | None = None,
        retry_after_seconds: int | None = None,
        invalidate_token: bool = False,
        recipient_blocked: bool = False,
        destination_undeliverable: bool = False,
        not_sent: NotSent | None = None,
    ) -> ProviderOutcome:
        return ProviderOutcome(
            outcome="failed",
            retryable=retryable,
            error_code=code,
            detail=bounded_detail(detail),
            provider_status=status,
            retry_after_seconds=retry_after_seconds,
            invalidate_token=invalidate_token,
            recipient_blocked=recipient_blocked,
            destination_undeliverable=destination_undeliverable,
            not_sent=not_sent,
        )


def bounded_detail(detail: str | None) -> str | None:
    """An allowlisted, bounded detail: letters, digits and `_.:- `, at most 80 characters."""
    if not detail:
        return None
    return _DETAIL_ALLOWED.sub("", detail)[:MAX_DETAIL] or None


class Provider(Protocol):
    """What a channel worker calls. One instance per provider per process (R-PROVIDER-3)."""

    channel: str
    name: str

    def is_configured(self) -> bool: ...

    @property
    def is_mock(self) -> bool: ...

    async def send(self, message: Message) -> ProviderOutcome: ...

    async def aclose(self) -> None: ...


def never_reached(exc: BaseException) -> bool:
    """True for an httpx error raised before any byte of the request left: the connection was
    refused or timed out, DNS or the TLS handshake failed, or no pooled connection came free. The
    provider cannot have taken the message (a read timeout or a dropped answer can have)."""
    return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)


# HTTP answers that mean the provider refused the request before taking it: too many requests,
# and "unavailable" — what a provider's front door says while it cannot take work. 500, 502 and
# 504 are left out: a gateway can say them after the message was taken.
NOT_TAKEN_STATUSES = frozenset({429, 503})


def http_client(settings: Settings, base_url: str, **kwargs: object) -> httpx.AsyncClient:
    """The HTTP client every HTTP provider uses: 3 s connect, 10 s read (R-PROVIDER-22/23)."""
    timeout = httpx.Timeout(
        settings.provider_read_timeout_seconds, connect=settings.provider_connect_timeout_seconds
    )
    return httpx.AsyncClient(base_url=base_url, timeout=timeout, **kwargs)  # type: ignore[arg-type]


def json_object(response: httpx.Response) -> dict[str, Any] | None:
    """The answer's body when it is a JSON object, else None: a proxy page, a truncated or
    non-UTF-8 body (json.JSONDecodeError and UnicodeDecodeError are both ValueErrors)."""
    try:
        payload = response.json()
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def transport_failure(
    code: str, exc: httpx.HTTPError, *, log: logging.Logger, provider: str, to: str
) -> ProviderOutcome:
    """The outcome of a send whose request raised instead of answering, logged with the masked
    destination `to`: retried, with `timeout` or the error's type name as detail (never its text,
    which can carry the URL), failing over only when the request never left (never_reached)."""
    name = type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        log.warning("%s send timed out to=%s error=%s", provider, to, name)
        detail = "timeout"
    else:
        log.warning("%s transport error to=%s error=%s", provider, to, name)
        detail = name
    return ProviderOutcome.failure(
        code,
        retryable=True,
        detail=detail,
        not_sent="provider" if never_reached(exc) else None,
    )


def opaque_transport_failure(code: str, exc: Exception) -> ProviderOutcome:
    """The outcome of a send whose request raised, for a provider whose URL carries a credential
    (a bot token, a webhook, an OAuth'd project): retried, with only `timeout` or `connection` as
    detail and no not_sent mark."""
    detail = "timeout" if isinstance(exc, httpx.TimeoutException) else "connection"
    return ProviderOutcome.failure(code, retryable=True, detail=detail)


def log_send_failure(
    log: logging.Logger,
    provider: str,
    to: str,
    response: httpx.Response,
    outcome: ProviderOutcome,
) -> None:
    """The one warning line for a refused send: status and the fixed code and detail, never the
    answer's text, which can echo the number or the message (R-STATE-15)."""
    log.warning(
        "%s send failed to=%s http=%d code=%s detail=%s retryable=%s",
        provider,
        to,
        response.status_code,
        outcome.error_code,
        outcome.detail,
        outcome.retryable,
    )
