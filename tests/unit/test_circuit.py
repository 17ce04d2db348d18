"""The circuit breaker of provider failover (herald.channels.circuit): its state machine, on a
clock the test moves."""

from __future__ import annotations

import pytest

from herald.channels.circuit import CircuitBreaker, State


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def breaker(clock: Clock, changes: list[State] | None = None) -> CircuitBreaker:
    return CircuitBreaker(
        "email provider smtp",
        threshold=3,
        cooldown=30,
        clock=clock,
        on_change=changes.append if changes is not None else None,
    )


def test_opens_after_threshold_failures_in_a_row_and_not_before() -> None:
    """Issue 45: the circuit opens after N consecutive failures; a success in between starts the
    count again."""
    clock = Clock()
    circuit = breaker(clock)
    circuit.failure()
    circuit.failure()
    circuit.success()
    circuit.failure()
    circuit.failure()
    assert circuit.state == "closed" and circuit.allow()
    circuit.failure()
    assert circuit.state == "open"
    assert not circuit.allow()


def test_half_open_after_the_cooldown_lets_exactly_one_probe_through() -> None:
    clock = Clock()
    changes: list[State] = []
    circuit = breaker(clock, changes)
    for _ in range(3):
        circuit.failure()
    clock.now += 29.9
    assert not circuit.allow()
    assert circuit.seconds_until_probe() == pytest.approx(0.1)
    clock.now += 0.1
    assert circuit.state == "half_open"
    assert circuit.allow()  # the probe
    assert not circuit.allow()  # everyone else passes it by while the probe is out
    assert changes == ["open", "half_open"]


def test_a_successful_probe_closes_the_circuit() -> None:
    clock = Clock()
    changes: list[State] = []
    circuit = breaker(clock, changes)
    for _ in range(3):
        circuit.failure()
    clock.now += 30
    assert circuit.allow()
    circuit.success()
    assert circuit.state == "closed"
    assert circuit.allow() and circuit.allow()
    assert changes == ["open", "half_open", "closed"]
    # Closed again means the full threshold again before it opens.
    circuit.failure()
    circuit.failure()
    assert circuit.state == "closed"


def test_a_failed_probe_opens_it_for_another_cooldown() -> None:
    clock = Clock()
    circuit = breaker(clock)
    for _ in range(3):
        circuit.failure()
    clock.now += 30
    assert circuit.allow()
    circuit.failure()
    assert circuit.state == "open"
    clock.now += 29
    assert not circuit.allow()
    clock.now += 1
    assert circuit.allow()


def test_a_released_probe_gives_its_place_back() -> None:
    """A probe that said nothing about the provider (it refused the destination without a call)
    leaves the circuit half-open for the next send."""
    clock = Clock()
    circuit = breaker(clock)
    for _ in range(3):
        circuit.failure()
    clock.now += 30
    assert circuit.allow()
    circuit.release()
    assert circuit.state == "half_open"
    assert circuit.allow()
    assert not circuit.allow()


def test_release_while_closed_changes_nothing() -> None:
    clock = Clock()
    circuit = breaker(clock)
    circuit.failure()
    circuit.release()
    assert circuit.state == "closed" and circuit.failures == 1


@pytest.mark.parametrize(("threshold", "cooldown"), [(0, 30), (3, 0)])
def test_a_circuit_needs_a_threshold_and_a_cooldown(threshold: int, cooldown: float) -> None:
    with pytest.raises(ValueError, match="threshold"):
        CircuitBreaker("x", threshold=threshold, cooldown=cooldown)
