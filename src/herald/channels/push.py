"""The push channel: one provider that sends each device through the service its platform uses.

Phones (and FCM web clients) go through Firebase Cloud Messaging; browsers subscribed with the
Push API (platform `webpush`) through their own push service (herald.channels.webpush). Either
may be configured without the other: a device whose service is not configured is skipped
unconfigured, and the backfill sends it once that service is configured (R-BACKFILL-2).
"""

from __future__ import annotations

from herald.channels.base import Message, Provider, ProviderOutcome


class PushProvider:
    channel = "push"

    def __init__(self, fcm: Provider, webpush: Provider) -> None:
        self.fcm = fcm
        self.webpush = webpush
        # The label of logs and metrics: the services this process can reach.
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
        return await self.for_platform(message.platform).send(message)

    async def aclose(self) -> None:
        await self.fcm.aclose()
        await self.webpush.aclose()
