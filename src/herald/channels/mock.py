"""A provider for any channel that records messages instead of sending them.

It reports itself configured (R-PROVIDER-18) but every send is `skipped` with reason `mock`,
never `sent` (R-PROVIDER-6): a mocked send recorded as sent would look healthy and deliver
nothing. The one warning about it is logged at start-up by whoever builds the providers
(R-OBS-2); a send logs nothing (R-OBS-4).
"""

from __future__ import annotations

from collections import deque
from typing import Final

from herald.channels.base import Message, ProviderOutcome
from herald.config import Settings

MAX_RECORDED: Final = 1_000


class MockProvider:
    """Records what would have been sent, for `herald dev` to show. One per channel per process
    (R-PROVIDER-3), so the recording is the one everybody reads."""

    name = "mock"

    def __init__(self, channel: str, settings: Settings) -> None:
        self.channel = channel
        self._settings = settings
        # Bounded: a long-running dev process must not grow without limit; oldest go first.
        self.sent_messages: deque[Message] = deque(maxlen=MAX_RECORDED)

    def is_configured(self) -> bool:
        return True

    @property
    def is_mock(self) -> bool:
        return True

    async def send(self, message: Message) -> ProviderOutcome:
        self.sent_messages.append(message)
        return ProviderOutcome(outcome="skipped", skip_reason="mock")

    async def aclose(self) -> None:
        """Nothing to close; the recording stays readable."""
