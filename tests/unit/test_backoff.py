"""Backoff: exponential, capped, finite for any failure count."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from herald.delivery.backoff import backoff_seconds


def test_doubles_from_the_base() -> None:
    """R-STATE-11, R-STATE-19: base · 2^(failures − 1)."""
    assert [backoff_seconds(n, base=30, ceiling=3600) for n in range(1, 6)] == [
        30,
        60,
        120,
        240,
        480,
    ]


def test_capped_at_one_hour() -> None:
    """R-STATE-20, R-STATE-11: never more than the ceiling (one hour by default)."""
    assert backoff_seconds(8, base=30, ceiling=3600) == 3600
    assert backoff_seconds(50, base=30, ceiling=3600) == 3600


@given(st.integers(min_value=-5, max_value=10**9))
def test_finite_for_any_failure_count(failures: int) -> None:
    """R-STATE-12: the exponent is clamped, so even 10,000 failures give a finite delay."""
    delay = backoff_seconds(failures, base=30, ceiling=3600)
    assert 1 <= delay <= 3600


def test_retry_after_honoured_within_the_ceiling() -> None:
    """R-STATE-20: a provider's Retry-After lengthens the wait, but never past the ceiling."""
    assert backoff_seconds(1, base=30, ceiling=3600, retry_after=120) == 120
    assert backoff_seconds(1, base=30, ceiling=3600, retry_after=10) == 30
    assert backoff_seconds(1, base=30, ceiling=3600, retry_after=99_999) == 3600
