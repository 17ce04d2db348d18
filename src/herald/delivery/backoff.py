"""Retry delay: min(max, base * 2^(failures - 1)), finite for any failure count (R-STATE-11/12)."""

from __future__ import annotations

MAX_EXPONENT = 30


def backoff_seconds(
    failure_count: int, *, base: int, ceiling: int, retry_after: int | None = None
) -> int:
    """Seconds to wait before the next attempt after the `failure_count`-th failure.

    The exponent is clamped at 30, so even failure_count = 10,000 gives a finite delay and a
    non-NULL next_attempt_at (R-STATE-12); the result never exceeds `ceiling` (R-STATE-20). A
    provider's own Retry-After is honoured when it asks for longer, still within the ceiling.
    """
    exponent = min(max(failure_count, 1) - 1, MAX_EXPONENT)
    delay: int = min(ceiling, base * (2**exponent))
    if retry_after is not None and retry_after > delay:
        delay = min(ceiling, retry_after)
    return max(1, delay)
