"""Email over Resend's HTTP API (POST /emails): configured when HERALD_RESEND_API_KEY is set.

Every send carries `Idempotency-Key: <message.idempotency_key>`: Resend answers a repeated key
with the first answer instead of sending again, so a retry after an ambiguous failure (a timeout,
a garbled 2xx) cannot deliver twice.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from herald.channels import email
from herald.channels.base import (
    NOT_TAKEN_STATUSES,
    Message,
    ProviderOutcome,
    http_client,
    never_reached,
)
from herald.config import Settings

log = logging.getLogger(__name__)

MAX_IDEMPOTENCY_KEY = 256  # Resend refuses longer keys (invalid_idempotency_key)
MAX_RETRY_AFTER_SECONDS = 86_400
# Resend ids are UUIDs; anything else in a 2xx is treated as a garbled answer.
_RESEND_ID = re.compile(r"[A-Za-z0-9_.:-]{1,200}")
# Answers that say nothing about this message: the key is missing, wrong or may not send
# (401/403), or the same key is still being processed (409). Rejecting the message for them would
# kill mail that the next attempt (after the operator fixes the key) would deliver.
_NOT_ABOUT_THE_MESSAGE = frozenset(
    {"missing_api_key", "invalid_api_key", "restricted_api_key", "concurrent_idempotent_requests"}
)


class ResendEmailProvider:
    """The email channel over Resend. Constructed with or without a key (R-PROVIDER-13)."""

    channel = "email"
    name = "resend"

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._client: httpx.AsyncClient | None = None
        if settings.resend_api_key:
            self._client = http_client(
                settings,
                settings.resend_base_url,
                headers={"Authorization": f"Bearer {settings.resend_api_key}"},
            )

    def is_configured(self) -> bool:
        return self._client is not None

    @property
    def is_mock(self) -> bool:
        return False

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def send(self, message: Message) -> ProviderOutcome:
        if self._client is None:
            return ProviderOutcome.unconfigured()  # quietly (R-PROVIDER-14, R-OBS-4)
        problem = email.address_problem(message)
        if problem is not None:
            return problem
        try:
            built = email.build_email(message, self._settings)
            response = await self._client.post(
                "/emails",
                json={
                    "from": built.sender,
                    "to": [built.to],
                    "subject": built.subject,
                    "html": built.html,
                    "text": built.text,
                },
                headers=_idempotency_header(message.idempotency_key),
            )
        except httpx.RequestError as exc:
            # Connect/read/write timeouts, refused connections, DNS and TLS failures. httpx's
            # own texts name the fault, never a response body, so they are logged (R-PROVIDER-9).
            log.warning(
                "email via resend to %s failed (transport, will retry): %s: %s",
                email.mask_email(message.to),
                type(exc).__name__,
                email.scrub(str(exc), message),
            )
            return email.transport_failure(
                detail=type(exc).__name__, not_sent="provider" if never_reached(exc) else None
            )
        except Exception as exc:
            return email.unknown_failure(log, self.name, message, exc)
        return self._outcome(message, response)

    def _outcome(self, message: Message, response: httpx.Response) -> ProviderOutcome:
        """Sort Resend's answer. Only the status and the error NAME are read: the error `message`
        can echo the address or the content (an OTP) and is never used (R-PROVIDER-24)."""
        status = response.status_code
        if 200 <= status < 300:
            message_id = _sent_id(response)
            if message_id is not None:
                return ProviderOutcome.sent(message_id, status=str(status))
            # A 2xx we cannot read is ambiguous: the email may or may not be queued. Retrying is
            # the safe side because the Idempotency-Key makes Resend answer the retry with the
            # first result rather than sending a second email; giving up could lose a password
            # reset that never went out.
            self._log_failure(message, status, None, "unreadable success answer, will retry")
            return email.transport_failure(detail="malformed_response", status=str(status))
        name = _error_name(response)
        detail = f"http_{status} {name}" if name else f"http_{status}"
        if status == 429 or status >= 500:
            # Rate limit, quota or Resend's own trouble: nothing was decided about this message.
            self._log_failure(message, status, name, "will retry")
            return email.transport_failure(
                detail=detail,
                status=str(status),
                retry_after_seconds=_retry_after(response.headers.get("Retry-After")),
                not_sent="provider" if status in NOT_TAKEN_STATUSES else None,
            )
        if status == 401 or name in _NOT_ABOUT_THE_MESSAGE:
            self._log_failure(message, status, name, "not about this message, will retry")
            # Our key was refused: nothing was taken. A 409 for the same key still in progress
            # is the one exception: the first request with that key may yet send.
            refused = name != "concurrent_idempotent_requests"
            return email.transport_failure(
                detail=detail, status=str(status), not_sent="provider" if refused else None
            )
        if 400 <= status < 500:
            self._log_failure(message, status, name, "rejected")
            return email.rejected(
                name, fallback=f"http_{status}", detail=detail, status=str(status)
            )
        # 1xx/3xx: Resend never sends these for POST /emails; nothing was accepted.
        self._log_failure(message, status, name, "unexpected status, will retry")
        return email.transport_failure(detail=detail, status=str(status))

    def _log_failure(self, message: Message, status: int, name: str | None, what: str) -> None:
        log.warning(
            "email via resend to %s: HTTP %s %s: %s",
            email.mask_email(message.to),
            status,
            name or "-",
            what,
        )


def _idempotency_header(key: str | None) -> dict[str, str]:
    if not key:
        return {}
    if len(key) > MAX_IDEMPOTENCY_KEY:
        # Still stable per key, so retries keep deduplicating.
        key = hashlib.sha256(key.encode()).hexdigest()
    return {"Idempotency-Key": key}


def _sent_id(response: httpx.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    message_id = body.get("id") if isinstance(body, dict) else None
    if isinstance(message_id, str) and _RESEND_ID.fullmatch(message_id):
        return message_id
    return None


def _error_name(response: httpx.Response) -> str | None:
    """The `name` of Resend's error body, kept only if it is a short lowercase token."""
    try:
        body = response.json()
    except ValueError:
        return None
    return email.allowlisted_name(body.get("name")) if isinstance(body, dict) else None


def _retry_after(value: str | None) -> int | None:
    """Retry-After as seconds (RFC 9110: a number of seconds or an HTTP date), bounded."""
    if not value:
        return None
    value = value.strip()
    seconds: float
    if value.isdigit():
        seconds = int(value)
    else:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0, min(MAX_RETRY_AFTER_SECONDS, math.ceil(seconds)))
