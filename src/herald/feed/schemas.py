"""HTTP models of the admin operations feed.

Only shapes here: lengths, the link's safety and the permission code's form are checked by the
service, which the library path shares, so both answer the same 400 codes.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import AwareDatetime, BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class FeedPublish(_Model):
    """POST /v1/feed: one operational event and the permission a viewer must hold."""

    kind: str
    title: str
    body: str | None = None
    link: str | None = None
    permission_code: str
    # When the event happened, if not now (a host publishing after the fact).
    occurred_at: AwareDatetime | None = None


class FeedPublished(_Model):
    id: UUID


class FeedItem(_Model):
    id: UUID
    kind: str
    title: str
    body: str | None
    link: str | None
    permission_code: str
    occurred_at: datetime
    # The caller's own receipt; None when unread, and always None for an API key.
    read_at: datetime | None


class FeedPage(_Model):
    items: list[FeedItem]
    # None on the last page.
    next_cursor: str | None


class FeedUnreadCount(_Model):
    count: int


class FeedReadReceipt(_Model):
    id: UUID
    read_at: datetime


class FeedReadAllResult(_Model):
    updated: int
