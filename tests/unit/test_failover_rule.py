"""The failover rule as a property (issue 45 item 4): over any sequence of provider answers and
clock moves, one send never reaches a second provider unless every provider before it certainly
took nothing, and the answer names who answered and who was passed over, in order.

The members are scripted at the Provider boundary (each real adapter's classification is tested
against its own local server in tests/providers, and the two together in test_failover.py).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from herald.channels.base import Message, ProviderOutcome
from herald.channels.failover import FailoverProvider

# What a member may answer: (outcome, its kind for the invariants).
ANSWERS = {
    "sent": ProviderOutcome.sent("id-1", "250"),
    "refused": ProviderOutcome.failure("EMAIL_TRANSPORT", retryable=True, not_sent="provider"),
    "cannot_serve": ProviderOutcome.failure(
        "EMAIL_REJECTED:region", retryable=False, not_sent="destination"
    ),
    "ambiguous": ProviderOutcome.failure("EMAIL_TRANSPORT", retryable=True),
    "verdict": ProviderOutcome.failure("EMAIL_REJECTED:smtp_550", retryable=False),
}
TOOK_NOTHING = {"refused", "cannot_serve"}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Scripted:
    name: str
    answers: list[str]
    channel: str = "email"
    is_mock: bool = False
    calls: list[str] = field(default_factory=list)  # the kind answered, per call

    def is_configured(self) -> bool:
        return True

    async def send(self, message: Message) -> ProviderOutcome:
        kind = self.answers[len(self.calls) % len(self.answers)]
        self.calls.append(kind)
        return ANSWERS[kind]

    async def aclose(self) -> None:
        return None


kinds = st.sampled_from(sorted(ANSWERS))


@settings(max_examples=300, deadline=None)
@given(
    scripts=st.lists(st.lists(kinds, min_size=1, max_size=6), min_size=2, max_size=3),
    steps=st.lists(st.floats(min_value=0, max_value=20), min_size=1, max_size=25),
    threshold=st.integers(min_value=1, max_value=3),
)
def test_one_send_reaches_a_second_provider_only_after_a_certain_non_send(
    scripts: list[list[str]], steps: list[float], threshold: int
) -> None:
    members = [Scripted(f"p{i}", script) for i, script in enumerate(scripts)]
    clock = Clock()
    provider = FailoverProvider("email", members, threshold=threshold, cooldown=10, clock=clock)
    message = Message(channel="email", to="a@example.com", body="x")
    for step in steps:
        clock.now += step
        before = [len(m.calls) for m in members]
        outcome = asyncio.run(provider.send(message))
        called = [m for m, n in zip(members, before, strict=True) if len(m.calls) > n]
        answers = [m.calls[-1] for m in called]
        # Each member is called at most once a send, in the list's order.
        assert all(len(m.calls) - n <= 1 for m, n in zip(members, before, strict=True))
        assert [members.index(m) for m in called] == sorted(members.index(m) for m in called)
        # Every member called before the last one took nothing: no duplicate within a send.
        assert all(kind in TOOK_NOTHING for kind in answers[:-1])
        # The answer names the last member called, and those passed over, in order.
        passed = [entry.split(":", 1)[0] for entry in outcome.passed_over]
        if called:
            last, kind = called[-1], answers[-1]
            assert outcome.provider == last.name
            if kind in TOOK_NOTHING:
                # Nobody took it: the last refusal stands, every other member passed over.
                assert passed == [m.name for m in members if m is not last]
            else:
                # The answer to keep: exactly the member's, and only those before it passed.
                assert passed == [m.name for m in members[: members.index(last)]]
                answer = ANSWERS[kind]
                assert (outcome.outcome, outcome.error_code, outcome.retryable) == (
                    answer.outcome,
                    answer.error_code,
                    answer.retryable,
                )
        else:
            # Nothing called: every circuit was open, and the send is retried later.
            assert outcome.outcome == "failed" and outcome.retryable
            assert outcome.detail == "circuit_open"
            assert passed == [m.name for m in members]
        # Passed over without a call means its circuit was open.
        for entry in outcome.passed_over:
            name, reason = entry.split(":", 1)
            if all(m.name != name for m in called):
                assert reason == "circuit_open"
