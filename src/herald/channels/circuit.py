"""A circuit breaker per provider, for failover within a channel (herald.channels.failover).

Closed: every send goes to the provider. After `threshold` failures in a row it opens: for
`cooldown` seconds nothing is sent to it, and the channel's next provider takes the traffic. Then
it is half-open: exactly one send (the probe) goes through; a success closes it, a failure opens it
for another cooldown. Meanwhile every other send passes it by, as while open.

The state is this process's, like the outage states of herald.outages: each worker process finds
out for itself, with at most `threshold` failed sends (and one probe a cooldown) of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Literal

log = logging.getLogger(__name__)

State = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    """One provider's circuit. `clock` is time.monotonic unless a test gives its own."""

    def __init__(
        self,
        name: str,
        *,
        threshold: int,
        cooldown: float,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[State], None] | None = None,
    ) -> None:
        if threshold < 1 or cooldown <= 0:
            raise ValueError("a circuit needs a threshold of at least 1 and a cooldown above 0")
        self.name = name
        self.threshold = threshold
        self.cooldown = cooldown
        self._clock = clock
        self._on_change = on_change
        self.failures = 0  # in a row, while closed
        self._opened_at: float | None = None
        self._probing = False

    @property
    def state(self) -> State:
        if self._opened_at is None:
            return "closed"
        if self._probing or self._clock() - self._opened_at >= self.cooldown:
            return "half_open"
        return "open"

    def seconds_until_probe(self) -> float:
        """How long until this circuit lets a probe through (0 when it would now)."""
        if self._opened_at is None or self._probing:
            return 0.0
        return max(0.0, self.cooldown - (self._clock() - self._opened_at))

    def allow(self) -> bool:
        """May a send go to this provider now? While half-open the first caller gets the probe
        and must report its result (success, failure or release); every other caller is told no."""
        if self._opened_at is None:
            return True
        if self._probing or self._clock() - self._opened_at < self.cooldown:
            return False
        self._probing = True
        self._changed("half_open")
        return True

    def success(self) -> None:
        """The provider answered (sent, or a verdict on the message): it works."""
        self.failures = 0
        if self._opened_at is not None:
            log.warning("%s: the probe succeeded; sending through it again", self.name)
            self._opened_at, self._probing = None, False
            self._changed("closed")

    def failure(self) -> None:
        """The provider failed the send (down, refused, timed out)."""
        if self._opened_at is not None:
            # The probe failed (or a send allowed before the circuit opened came back late).
            self._opened_at, self._probing = self._clock(), False
            self._changed("open")
            return
        self.failures += 1
        if self.failures >= self.threshold:
            log.warning(
                "%s: %d failures in a row; passing it by for %.0f s",
                self.name,
                self.failures,
                self.cooldown,
            )
            self._opened_at, self.failures = self._clock(), 0
            self._changed("open")

    def release(self) -> None:
        """The send allowed by allow() told nothing about the provider's health (it refused the
        destination without a call): a probe's place is given back, nothing else changes."""
        if self._probing:
            self._probing = False
            self._changed(self.state)

    def _changed(self, state: State) -> None:
        if self._on_change is not None:
            self._on_change(state)
