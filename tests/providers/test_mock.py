"""The mock provider: configured, records every message, never reports a send as sent."""

from __future__ import annotations

import logging

import pytest

from herald.channels.base import Message
from herald.channels.mock import MAX_RECORDED, MockProvider
from herald.config import Settings
from herald.vocabulary import REMOTE_CHANNELS


def _message(channel: str, n: int = 0) -> Message:
    return Message(channel=channel, to=f"destination-{n}", body=f"body {n}", title="t")


@pytest.mark.parametrize("channel", REMOTE_CHANNELS)
async def test_mock_records_and_skips(channel: str, caplog: pytest.LogCaptureFixture) -> None:
    """R-PROVIDER-6, R-PROVIDER-18, R-OBS-4: for every channel the mock is configured and a
    mock, records the message, answers skipped/mock (never sent) and logs nothing per send."""
    caplog.set_level(logging.DEBUG)
    provider = MockProvider(channel, Settings())
    assert provider.is_configured() is True
    assert provider.is_mock is True
    assert (provider.channel, provider.name) == (channel, "mock")

    message = _message(channel)
    outcome = await provider.send(message)
    await provider.aclose()

    assert outcome.outcome == "skipped"
    assert outcome.skip_reason == "mock"
    assert outcome.error_code is None
    assert outcome.provider_message_id is None
    assert list(provider.sent_messages) == [message]
    assert caplog.records == []


async def test_mock_recording_is_bounded() -> None:
    """The recording keeps the newest MAX_RECORDED messages, so a long dev session cannot grow
    without bound."""
    provider = MockProvider("sms", Settings())
    for n in range(MAX_RECORDED + 5):
        await provider.send(_message("sms", n))
    assert len(provider.sent_messages) == MAX_RECORDED
    assert provider.sent_messages[0].to == "destination-5"
    assert provider.sent_messages[-1].to == f"destination-{MAX_RECORDED + 4}"


async def test_each_mock_keeps_its_own_recording() -> None:
    """Two channels' mocks do not share a recording."""
    email, push = MockProvider("email", Settings()), MockProvider("push", Settings())
    await email.send(_message("email"))
    assert len(email.sent_messages) == 1
    assert len(push.sent_messages) == 0
