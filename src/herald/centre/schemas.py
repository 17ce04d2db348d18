"""HTTP models of the consumer notification centre (DESIGN.md §5.1)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from herald.centre.queries import UNREAD_COUNT_CAP


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class NotificationItem(_Model):
    id: UUID
    kind: str
    category: str
    priority: str
    # Nullable because the rendered columns are (R-CENTRE-12).
    title: str | None
    body: str | None
    action_url: str | None
    occurred_at: datetime
    read_at: datetime | None


class NotificationPage(_Model):
    items: list[NotificationItem]
    # None on the last page.
    next_cursor: str | None


class UnreadCount(_Model):
    # Counting stops at UNREAD_COUNT_CAP (100), so the count costs the same however long a
    # person's unread history is: a badge shows "99+" when `capped` is true.
    count: int = Field(
        ge=0,
        le=UNREAD_COUNT_CAP,
        description=(
            f"Unread notifications, counted up to {UNREAD_COUNT_CAP}: exact while `capped` is "
            f"false; {UNREAD_COUNT_CAP} with `capped` true means at least that many."
        ),
    )
    capped: bool = Field(
        description=(
            f"True when counting stopped at {UNREAD_COUNT_CAP}: there are at least that many "
            '(show e.g. "99+").'
        ),
    )


class ReadReceipt(_Model):
    id: UUID
    read_at: datetime


class ReadAllResult(_Model):
    updated: int
