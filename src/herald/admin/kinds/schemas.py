"""HTTP models of the kinds admin (`/v1/admin/kinds`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictInt
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class DigestEntry(_Model):
    window_seconds: int
    channels: list[str]


class EscalationStepEntry(_Model):
    step: int
    channel: str
    # What the tenant's plan uses: the override's delay, else the code's.
    after_seconds: int
    default_after_seconds: int


class EscalationEntry(_Model):
    steps: list[EscalationStepEntry]
    # Whether this tenant's delays differ from the code's (an override is in force).
    overridden: bool
    # The override's version (it counts on through reverts); None if never overridden.
    version: int | None
    updated_at: datetime | None
    updated_by: str | None


class KindSummary(_Model):
    kind: str
    category: str
    priority: str
    channels: list[str]
    dedupe: str
    unsuppressible: bool
    digest: DigestEntry | None
    escalation: EscalationEntry | None


class KindSummaryPage(_Model):
    items: list[KindSummary]
    next_cursor: str | None


class EscalationStepIn(_Model):
    channel: Annotated[str, Field(min_length=1, max_length=40)]
    # Seconds after the previous step's due time (the first: after the fan-out), 1..2592000.
    after_seconds: StrictInt


class EscalationOverrideIn(_Model):
    """The kind's plan with this tenant's delays: the code's channels, in the code's order."""

    steps: Annotated[list[EscalationStepIn], Field(min_length=1, max_length=20)]
