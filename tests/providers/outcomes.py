"""The check every provider test makes of a refused send, whichever channel's codes it uses."""

from __future__ import annotations

from collections.abc import Collection

from herald.channels.base import ProviderOutcome


def assert_failed(
    outcome: ProviderOutcome, code: str, *, codes: Collection[str], retryable: bool
) -> None:
    """The send failed with `code`, one of the channel's documented `codes`, and is retried or
    not as `retryable` says."""
    assert outcome.outcome == "failed"
    assert outcome.error_code == code
    assert outcome.error_code in codes
    assert outcome.retryable is retryable
