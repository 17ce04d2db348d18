"""`value`: the dataclass of the objects the worker makes for every delivery.

Frozen to the type checker (mypy rejects any assignment to a field, as with
`@dataclass(frozen=True)`), a plain slotted dataclass at run time. A frozen dataclass sets each
field in `__init__` through `object.__setattr__`: 1.15 µs for a ten-field Message against 0.33 µs
slotted, and a delivery makes five of them (Message, ProviderOutcome, Rendered, Prepared,
Result) — about a tenth of the worker's Python a delivery with a fast provider
(docs/scaling.md, the worker). `unsafe_hash` keeps them hashable by value, as frozen ones are.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from typing_extensions import dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def value(cls: type[T]) -> type[T]:
    return dataclasses.dataclass(slots=True, unsafe_hash=True)(cls)
