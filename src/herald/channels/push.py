"""The push channel: one provider that sends each device through the service its platform uses.

Phones (and FCM web clients) go through Firebase Cloud Messaging; browsers subscribed with the
Push API (platform `webpush`) through their own push service (herald.channels.webpush). Either
may be configured without the other: a device whose service is not configured is skipped
unconfigured, and the backfill sends it once that service is configured (R-BACKFILL-2).
"""

from __future__ import annotations

from dataclasses import replace

from herald.channels.base import Message, Provider, ProviderOutcome


class PushProvider:
    channel = "push"

    def __init__(self, fcm: Provider, webpush: Provider) -> None:
        self.fcm = fcm
        self.webpush = webpush
        # The label of the worker's own lines; each send's outcome names the service that
        # answered, so the metrics and the attempt evidence count FCM and Web Push apart.
        configured = [p.name for p in (fcm, webpush) if p.is_configured()]
        self.name = "+".join(configured) or fcm.name

    def is_configured(self) -> bool:
        return self.fcm.is_configured() or self.webpush.is_configured()

    @property
    def is_mock(self) -> bool:
        return False

    def for_platform(self, platform: str | None) -> Provider:
        return self.webpush if platform == "webpush" else self.fcm

    async def send(self, message: Message) -> ProviderOutcome:
        service = self.for_platform(message.platform)
        outcome = await service.send(message)
        return outcome if outcome.provider else replace(outcome, provider=service.name)

    async def aclose(self) -> None:
        await self.fcm.aclose()
        await self.webpush.aclose()


def token_gone(detail: str, status: str, error_code: str = "PUSH_TOKEN_INVALID") -> ProviderOutcome:
    """The device's token or subscription can never take a message: the recorder deactivates the
    device in the same send (R-CHAN-16)."""
    return ProviderOutcome.failure(
        error_code, retryable=False, detail=detail, status=status, invalidate_token=True
    )


def failure_by_status(
    status: int, detail: str, retry_after: int | None, *, transient: bool = False
) -> ProviderOutcome:
    """The rows FCM and Web Push share once a token is known to be alive: 401/403 our
    credentials (retried: an operator mends them), 429 and 5xx — or a body the service calls
    transient — later, honouring Retry-After; anything else a refusal of this message."""
    text = str(status)
    if status in (401, 403):
        return ProviderOutcome.failure("PUSH_AUTH", retryable=True, detail=detail, status=text)
    if status == 429 or status >= 500 or transient:
        return ProviderOutcome.failure(
            "PUSH_TRANSPORT",
            retryable=True,
            detail=detail,
            status=text,
            retry_after_seconds=retry_after,
        )
    return ProviderOutcome.failure("PUSH_REJECTED", retryable=False, detail=detail, status=text)
