"""HTTP models of the reminder admin (`/v1/admin/reminders`, DESIGN.md §5.2).

The request models are applied by the service, not by FastAPI, so every refused field is a 400
NOTIFICATION_REMINDER_INVALID naming it (never the generic 422): the shape checks here, the
time, zone, weekday and send-path checks in the service.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StringConstraints
from pydantic.alias_generators import to_camel

# One line of text, no control characters (NUL included, which text cannot store).
Name = Annotated[
    str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]*$")
]
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=200)]
Version = Annotated[StrictInt, Field(ge=1, le=2**31 - 1)]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


# ---------------------------------------------------------------------------------------------
# Inputs


class ReminderInput(_Model):
    """A whole schedule, as created or as replaced by an update."""

    name: Name
    kind: ShortText
    variables: dict[str, Any] = Field(default_factory=dict)
    channels: list[str] | None = Field(default=None, max_length=10)
    audience: dict[str, Any]
    timezone: ShortText
    local_time: ShortText
    weekdays: list[StrictInt] = Field(max_length=7)
    enabled: StrictBool = True


class ReminderUpdate(ReminderInput):
    """The whole schedule again, with the version the client read (a stale one is a 409)."""

    version: Version


# ---------------------------------------------------------------------------------------------
# Outputs


class ReminderOut(_Model):
    id: UUID
    name: str
    kind: str
    variables: dict[str, str]
    channels: list[str] | None
    audience: dict[str, Any]
    timezone: str
    local_time: str
    weekdays: list[int]
    enabled: bool
    # The next occurrence (UTC); None while the schedule is disabled.
    next_run_at: datetime | None
    version: int
    created_by: str | None
    updated_by: str | None
    created_at: datetime
    updated_at: datetime


class ReminderPage(_Model):
    items: list[ReminderOut]
    # None on the last page.
    next_cursor: str | None


class OccurrenceOut(_Model):
    # The UTC instant, and the same instant on the schedule's wall clock, with its offset.
    at: datetime
    local_at: str


class OccurrencePage(_Model):
    items: list[OccurrenceOut]


class RunOut(_Model):
    occurrence: datetime
    event_id: UUID | None
    state: Literal["fired", "missed", "failed"]
    error_code: str | None
    recorded_at: datetime


class RunPage(_Model):
    items: list[RunOut]
    next_cursor: str | None
