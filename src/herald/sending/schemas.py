"""HTTP models of the events surface (DESIGN.md §5.1)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel


def _moment_text(value: Any) -> Any:
    """A moment travels as an ISO 8601 string with its offset, as the schema says; pydantic's lax
    mode would also read a number as seconds since 1970 (`scheduledFor: 0`), which no client
    means."""
    if value is None or isinstance(value, str | datetime):
        return value
    raise ValueError("an ISO 8601 date-time string with its offset is required")


# An aware date-time given as text (never a number of seconds).
Moment = Annotated[AwareDatetime, BeforeValidator(_moment_text)]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class DeliverAt(_Model):
    """Deliver at each recipient's own wall-clock time, in their IANA zone from the directory
    (HERALD_DEFAULT_TIMEZONE for a person with none): `localTime` HH:MM, optionally on one local
    `date` (YYYY-MM-DD); without a date, the next such time at or after the event's fan-out.
    Not together with `scheduledFor`."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"localTime": "09:00", "date": "2026-12-08"}]}
    )

    # Published as the shapes they must have; checked by the service (400
    # NOTIFICATION_DELIVER_AT_INVALID), which also refuses a date passed on every clock.
    local_time: Annotated[
        str,
        Field(min_length=1, max_length=16),
        WithJsonSchema({"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"}),
    ]
    date: Annotated[
        str | None,
        Field(min_length=1, max_length=32),
        WithJsonSchema({"type": "string", "format": "date"}),
    ] = None


class EventCreate(_Model):
    kind: str = Field(min_length=1, max_length=200)
    audience: dict[str, Any]
    channels: list[str] | None = Field(default=None, max_length=10)
    variables: dict[str, Any] = Field(default_factory=dict)
    action_url: str | None = Field(default=None, max_length=2048)
    scheduled_for: Moment | None = None
    deliver_at: DeliverAt | None = None


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
