"""Failover within a channel: one Provider over an ordered list of providers, each behind its own
circuit breaker (herald.channels.circuit). Built when HERALD_EMAIL_PROVIDERS or
HERALD_SMS_PROVIDERS names more than one provider; a single provider is used as it is.

One delivery attempt walks the list in order and stops at the first provider that gives an answer
to keep. It moves on only when the provider certainly did not take the message
(`ProviderOutcome.not_sent`: connection refused, TLS, a refusal before the message was handed
over, 429/503, our credentials or balance, a destination it cannot serve) or when its circuit is
open. Everything else ends the attempt with that provider's answer:

- sent;
- a verdict on the message itself (an invalid address, content refused), never retried elsewhere;
- an ambiguous failure (a timeout or a lost connection once the message was handed over): the
  provider may have queued it, so it is a retryable failure of that provider, retried after the
  backoff like any other. This is the one duplicate failover can add: if by then the circuit
  of that provider is open, the retry goes to the next provider, and the recipient may get the
  message from both (docs/sending-and-delivery.md, "Provider failover").

The answer kept names its provider and the providers passed over (`name:reason`): the recorder
writes both on the attempt row.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from herald.channels.base import Message, Provider, ProviderOutcome
from herald.channels.circuit import CircuitBreaker, State
from herald.observability import metrics

log = logging.getLogger(__name__)

CIRCUIT_OPEN = "circuit_open"
TRANSPORT_CODES = {"email": "EMAIL_TRANSPORT", "sms": "SMS_TRANSPORT"}


class FailoverProvider:
    """The channel's provider when it lists several: the first that can take the message sends."""

    is_mock = False

    def __init__(
        self,
        channel: str,
        providers: Sequence[Provider],
        *,
        threshold: int,
        cooldown: float,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if len(providers) < 2:
            raise ValueError("failover needs at least two providers")
        self.channel = channel
        self.providers = list(providers)
        self.name = "+".join(p.name for p in self.providers)
        self.circuits = {
            p.name: CircuitBreaker(
                f"{channel} provider {p.name}",
                threshold=threshold,
                cooldown=cooldown,
                on_change=_gauge(channel, p.name),
                **({"clock": clock} if clock is not None else {}),
            )
            for p in self.providers
        }
        for p in self.providers:
            metrics.PROVIDER_CIRCUIT_OPEN.labels(channel, p.name).set(0)

    def is_configured(self) -> bool:
        return any(p.is_configured() for p in self.providers)

    async def aclose(self) -> None:
        for provider in self.providers:
            try:
                await provider.aclose()
            except Exception:
                log.warning("closing the %s provider failed", provider.name, exc_info=True)

    async def balance(self) -> float | None:
        """The credit of the first provider that reports one (Aakash), for the credit check."""
        for provider in self.providers:
            read = getattr(provider, "balance", None)
            if read is not None:
                value: float | None = await read()
                return value
        return None

    async def send(self, message: Message) -> ProviderOutcome:
        passed: list[str] = []
        last: tuple[str, ProviderOutcome] | None = None
        retry_later = False  # some provider passed over may take it on a later attempt
        for index, provider in enumerate(self.providers):
            circuit = self.circuits[provider.name]
            if not provider.is_configured():
                continue
            if not circuit.allow():
                passed.append(f"{provider.name}:{CIRCUIT_OPEN}")
                retry_later = True
                self._failed_over(provider.name, CIRCUIT_OPEN, index)
                continue
            outcome = await _call(provider, message)
            if outcome.outcome == "failed" and outcome.not_sent is not None:
                if outcome.not_sent == "provider":
                    circuit.failure()
                else:
                    circuit.release()  # it cannot serve this destination; its health is unknown
                entry = f"{provider.name}:{outcome.error_code or 'failed'}"
                passed.append(entry)
                retry_later = retry_later or outcome.retryable
                last = (entry, outcome)
                self._failed_over(provider.name, outcome.not_sent, index)
                continue
            if outcome.outcome == "failed" and outcome.retryable:
                circuit.failure()  # ambiguous: kept as this provider's answer, not failed over
            elif outcome.outcome == "skipped":
                circuit.release()
            else:
                circuit.success()
            return replace(outcome, provider=provider.name, passed_over=tuple(passed))
        return self._exhausted(last, passed, retry_later)

    def _exhausted(
        self, last: tuple[str, ProviderOutcome] | None, passed: list[str], retry_later: bool
    ) -> ProviderOutcome:
        """No provider took it. The last answer stands, retryable if any provider passed over
        may take it later (its circuit closes, its 429 passes); with every circuit open nothing
        was called, and the retry waits at least until the first one lets a probe through."""
        if last is None:
            if not passed:
                return ProviderOutcome.unconfigured()
            wait = min(c.seconds_until_probe() for c in self.circuits.values())
            return ProviderOutcome(
                outcome="failed",
                retryable=True,
                error_code=TRANSPORT_CODES.get(self.channel, "PROVIDER_UNKNOWN"),
                detail=CIRCUIT_OPEN,
                retry_after_seconds=max(1, math.ceil(wait)),
                provider=None,
                passed_over=tuple(passed),
                not_sent="provider",
            )
        entry, outcome = last
        return replace(
            outcome,
            retryable=outcome.retryable or retry_later,
            provider=entry.split(":", 1)[0],
            passed_over=tuple(p for p in passed if p != entry),
        )

    def _failed_over(self, name: str, reason: str, index: int) -> None:
        if index + 1 < len(self.providers):
            metrics.PROVIDER_FAILOVERS.labels(self.channel, name, reason).inc()

    def circuit_states(self) -> dict[str, State]:
        return {name: circuit.state for name, circuit in self.circuits.items()}


async def _call(provider: Provider, message: Message) -> ProviderOutcome:
    """One member's answer. A provider must not raise; one that does failed this send without a
    verdict, and whether it sent is unknown, so it is never failed over."""
    try:
        return await provider.send(message)
    except Exception as exc:
        log.error(
            "%s provider raised %s; treated as a retryable failure",
            provider.name,
            type(exc).__name__,
        )
        code = f"{provider.channel.upper()}_UNKNOWN"
        return ProviderOutcome.failure(code, retryable=True, detail=type(exc).__name__)


def _gauge(channel: str, name: str) -> Callable[[State], None]:
    child = metrics.PROVIDER_CIRCUIT_OPEN.labels(channel, name)

    def changed(state: State) -> None:
        child.set(0 if state == "closed" else 1)

    return changed
