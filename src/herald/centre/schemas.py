"""HTTP models of the consumer notification centre (DESIGN.md §5.1)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


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
    count: int


class ReadReceipt(_Model):
    id: UUID
    read_at: datetime


class ReadAllResult(_Model):
    updated: int
