"""HTTP models of follow-ups (DESIGN.md §5.2)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt
from pydantic.alias_generators import to_camel

from herald.vocabulary import FollowupState

# What a key may hold: it travels in the URL path, so no slash and no space.
KEY_PATTERN = r"^[A-Za-z0-9._:@~+=-]{1,200}$"
# A month: a grace or delay longer than that is a mistake, not a plan.
MAX_DELAY_SECONDS = 31 * 24 * 3600


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class FollowupArm(_Model):
    key: str = Field(pattern=KEY_PATTERN)
    kind: str = Field(min_length=1, max_length=200)
    reminder_kind: str = Field(min_length=1, max_length=200)
    audience: dict[str, Any]
    variables: dict[str, Any] = Field(default_factory=dict)
    # None: HERALD_FOLLOWUP_GRACE_MINUTES / HERALD_FOLLOWUP_REMINDER_DELAY_MINUTES.
    grace_seconds: StrictInt | None = Field(default=None, ge=0, le=MAX_DELAY_SECONDS)
    reminder_delay_seconds: StrictInt | None = Field(default=None, ge=0, le=MAX_DELAY_SECONDS)
    covered: StrictBool = False


class FollowupOut(_Model):
    key: str
    state: FollowupState
    arm_at: datetime | None
    notified_at: datetime | None
    escalate_at: datetime | None
    reminded_at: datetime | None
    notify_event_id: uuid.UUID | None
    reminder_event_id: uuid.UUID | None
