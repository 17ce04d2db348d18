"""herald.values.value: the per-delivery objects stay values (equal and hashed by their fields)
while costing a slotted dataclass's construction (docs/scaling.md, the worker)."""

from __future__ import annotations

import pytest

from herald.channels.base import Message, ProviderOutcome
from herald.rendering.render import Rendered
from herald.values import value


def test_value_objects_compare_and_hash_by_their_fields() -> None:
    a, b = ProviderOutcome.sent("m1", "250"), ProviderOutcome.sent("m1", "250")
    assert a == b and hash(a) == hash(b)
    assert a != ProviderOutcome.sent("m2", "250")
    assert len({Rendered("t", "b"), Rendered("t", "b"), Rendered("t", "c")}) == 2


def test_value_objects_are_slotted_so_a_misspelt_field_cannot_be_added() -> None:
    message = Message(channel="email", to="a@example.com", body="hello")
    assert not hasattr(message, "__dict__")
    with pytest.raises(AttributeError):
        message.subjet = "typo"  # type: ignore[attr-defined]


def test_a_value_class_keeps_defaults_and_field_specifiers() -> None:
    from dataclasses import field

    @value
    class Pair:
        left: int
        right: list[int] = field(default_factory=list)

    assert Pair(1) == Pair(1, [])
    assert Pair(1).right is not Pair(1).right
