"""HTTP models of the broadcast admin (`/v1/admin/broadcasts`, DESIGN.md §5.2).

The request models are applied by the service, not by FastAPI, so every refused field is a 400
NOTIFICATION_BROADCAST_INVALID naming it (never the generic 422).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StringConstraints
from pydantic.alias_generators import to_camel

from herald.sending.schemas import Moment
from herald.vocabulary import BroadcastState

# One line of text, no control characters (NUL included, which text cannot store).
Title = Annotated[
    str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]*$")
]
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=200)]
Version = Annotated[StrictInt, Field(ge=1, le=2**31 - 1)]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class BroadcastInput(_Model):
    """A whole draft, as created or as replaced by an update."""

    title: Title
    kind: ShortText
    variables: dict[str, Any] = Field(default_factory=dict)
    channels: list[str] | None = Field(default=None, max_length=10)
    audience: dict[str, Any]
    scheduled_for: Moment | None = None


class BroadcastUpdate(BroadcastInput):
    """The whole draft again, with the version the client read (a stale one is a 409)."""

    version: Version


class ApproveInput(_Model):
    """The version the approver read: they approve exactly what they saw."""

    version: Version


class BroadcastOut(_Model):
    id: Any
    state: BroadcastState
    title: str
    kind: str
    audience: dict[str, Any]
    channels: list[str] | None
    variables: dict[str, str]
    scheduled_for: datetime | None
    created_by: str
    approved_by: str | None
    approved_at: datetime | None
    audience_frozen_at: datetime | None
    event_id: Any | None
    cancelled_at: datetime | None
    cancelled_by: str | None
    completed_at: datetime | None
    # Nothing of it is left in flight (completed, or cancelled with every unclaimed delivery
    # cancelled and every call in flight recorded).
    settled_at: datetime | None
    # {status: n}, counted from the delivery rows (R-BCAST-10).
    counts: dict[str, int]
    recipient_count: int
    version: int
    created_at: datetime
    updated_at: datetime


class BroadcastPage(_Model):
    items: list[BroadcastOut]
    # None on the last page.
    next_cursor: str | None


class PreviewPerson(_Model):
    external_id: str
    full_name: str | None


class AudiencePreview(_Model):
    count: int
    sample: list[PreviewPerson]


class BroadcastReport(_Model):
    id: Any
    state: BroadcastState
    recipient_count: int
    delivery_count: int
    # {channel: {status: n}}, rebuilt from the delivery rows (R-BCAST-10).
    counts: dict[str, dict[str, int]]


class DraftAudienceReach(_Model):
    """How many people an unsaved draft's audience reaches, and the spec as it would be saved."""

    count: int
    audience: dict[str, Any]
    sample: list[PreviewPerson]
