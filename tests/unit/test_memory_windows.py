"""herald.ratelimit.MemoryWindows: the in-process moving windows that replaced `limits`'
`async+memory://` storage. Held to the library's own moving-window answers by a differential
property test, and to bounded memory by the prune."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import limits
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from limits.aio.storage import MemoryStorage
from limits.aio.strategies import MovingWindowRateLimiter

from herald.ratelimit import MemoryWindows, RateLimits, parse_limit


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_window_allows_its_amount_then_says_when_it_opens() -> None:
    clock = Clock()
    windows = MemoryWindows(clock)
    answers = []
    for _ in range(3):
        answers.append(windows.hit("k", 3, 10.0))
        clock.now += 1
    assert answers == [0.0, 0.0, 0.0]
    first = clock.now - 3
    # The fourth hit is refused until the first leaves the window, ten seconds after it came.
    assert windows.hit("k", 3, 10.0) == first + 10
    assert not windows.room("k", 3, 10.0)
    clock.now = first + 10  # a hit exactly at the window's edge still counts, as in `limits`
    assert windows.hit("k", 3, 10.0) == first + 10
    clock.now = first + 10.001
    assert windows.room("k", 3, 10.0)
    assert windows.hit("k", 3, 10.0) == 0.0
    # A moving window: one slot opened, not three.
    assert windows.hit("k", 3, 10.0) > 0


def test_keys_are_apart_and_clear_empties_one() -> None:
    windows = MemoryWindows(Clock())
    assert windows.hit("a", 1, 60.0) == 0.0
    assert windows.hit("a", 1, 60.0) > 0
    assert windows.hit("b", 1, 60.0) == 0.0
    windows.clear("a")
    assert windows.hit("a", 1, 60.0) == 0.0
    assert windows.hit("b", 1, 60.0) > 0


def test_room_takes_no_hit() -> None:
    windows = MemoryWindows(Clock())
    assert all(windows.room("k", 1, 1.0) for _ in range(5))
    assert windows.hit("k", 1, 1.0) == 0.0
    assert not windows.room("k", 1, 1.0)


def test_idle_keys_are_pruned_a_few_per_hit() -> None:
    """Memory is held for the people seen within the window, not for everyone ever seen; and no
    single hit walks every key (each looks at PRUNE_PER_HIT of them)."""
    clock = Clock()
    windows = MemoryWindows(clock)
    for n in range(10_000):
        windows.hit(f"old-{n}", 20, 1.0)
    assert len(windows) == 10_000
    clock.now += 2  # every old key's window is over
    windows.hit("new", 20, 1.0)
    assert len(windows) == 10_000 + 1 - MemoryWindows.PRUNE_PER_HIT
    for _ in range(10_000 // MemoryWindows.PRUNE_PER_HIT):
        windows.hit("new", 10**9, 1.0)
    assert len(windows) == 1


def test_a_live_key_is_never_pruned() -> None:
    clock = Clock()
    windows = MemoryWindows(clock)
    windows.hit("long", 1, 3600.0)
    for n in range(100):
        clock.now += 1
        windows.hit(f"short-{n}", 1, 0.5)
    # "long" was hit first (so it is first in line to be pruned) but its window is still open.
    assert windows.hit("long", 1, 3600.0) > 0


@settings(max_examples=200, deadline=None)
@given(
    amount=st.integers(min_value=1, max_value=5),
    window=st.sampled_from([1, 2, 5]),
    steps=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from([0.0, 0.25, 0.5, 1.0, 3.0])),
        max_size=60,
    ),
)
def test_the_same_answers_as_limits_moving_window(
    amount: int, window: int, steps: list[tuple[str, float]]
) -> None:
    """Differential: for any sequence of hits over a few keys, allowed-or-refused and the time
    the window opens agree with `limits`' MovingWindowRateLimiter over its memory storage, both
    reading the same clock.

    The steps are nudged off exact window edges (a ten-thousandth of a second more each step):
    at a hit exactly one window old, `limits` refuses the new hit (the old one counts) but dates
    the window from the hit after it; real clocks never tie, so only the untied answers are held
    equal."""
    clock = Clock(1_700_000_000.0)
    import limits.aio.storage.memory as library_memory

    item = limits.RateLimitItemPerSecond(amount, window)
    reference = MovingWindowRateLimiter(MemoryStorage())
    ours = MemoryWindows(clock)

    async def run() -> list[tuple[Any, ...]]:
        disagreements = []
        for step, (key, gap) in enumerate(steps, start=1):
            clock.now += gap + step / 10_000
            expected = await reference.hit(item, key)
            opens = 0.0
            if not expected:
                opens = (await reference.get_window_stats(item, key)).reset_time
            answer = ours.hit(item.key_for(key), item.amount, item.get_expiry())
            if (answer == 0.0) != expected or (
                not expected and answer != pytest.approx(opens, rel=0, abs=1e-6)
            ):
                disagreements.append((key, clock.now, expected, opens, answer))
        return disagreements

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(library_memory, "time", SimpleNamespace(time=clock))
        assert asyncio.run(run()) == []


async def test_rate_limits_without_redis_use_the_memory_windows() -> None:
    item = parse_limit("2/second")
    assert item is not None
    limiter = RateLimits.build(None)
    assert not limiter.shared
    assert [(await limiter.try_hit(item, "p")).allowed for _ in range(3)] == [True, True, False]
    assert not await limiter.would_allow(item, "p")
    await limiter.clear(item, "p")
    assert await limiter.would_allow(item, "p")
