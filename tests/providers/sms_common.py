"""What the Aakash and Twilio provider tests share: the number and one-time code they send, the
message, their settings' shape, and the check that no outcome or log line carries a secret."""

from __future__ import annotations

from typing import Any

import pytest

from herald.channels.base import Message, ProviderOutcome
from herald.channels.sms import SMS_ERROR_CODES
from herald.config import Settings

TO = "+9779812345678"
OTP = "493817"
OTP_BODY = f"Your Herald code is {OTP}. It expires in 10 minutes."


def sms(body: str = OTP_BODY, to: str = TO) -> Message:
    return Message(channel="sms", to=to, body=body)


def sms_settings(values: dict[str, Any], overrides: dict[str, Any]) -> Settings:
    """One provider's `values` with a short read timeout (the local server's stalls must time
    out within the test), then the test's `overrides`."""
    return Settings(**{"provider_read_timeout_seconds": 0.5, **values, **overrides})


def assert_no_trace(
    outcome: ProviderOutcome, caplog: pytest.LogCaptureFixture, *secrets: str
) -> None:
    """Neither the outcome's code/detail/status nor any log line carries any of `secrets`."""
    assert outcome.error_code is None or outcome.error_code in SMS_ERROR_CODES
    for secret in secrets:
        for value in (outcome.error_code, outcome.detail, outcome.provider_status):
            assert secret not in (value or "")
        assert secret not in repr(outcome)
        assert secret not in caplog.text
