"""HTTP models of the events surface (DESIGN.md §5.1)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class EventCreate(_Model):
    kind: str = Field(min_length=1, max_length=200)
    audience: dict[str, Any]
    channels: list[str] | None = Field(default=None, max_length=10)
    variables: dict[str, Any] = Field(default_factory=dict)
    action_url: str | None = Field(default=None, max_length=2048)
    scheduled_for: AwareDatetime | None = None


class EventCreated(_Model):
    id: uuid.UUID
    created: bool


class EventStatus(_Model):
    id: uuid.UUID
    kind: str
    state: str
    recipient_count: int | None
    deliveries: dict[str, int]


class EventCancelled(_Model):
    id: uuid.UUID
    kind: str
    state: str
    cancelled_at: datetime
