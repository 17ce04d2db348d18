"""HTTP model of the live stream's `notification` event (DESIGN.md §5.1)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from herald.realtime.service import Notice


class StreamNotification(BaseModel):
    """Exactly the five keys of R-REALTIME-7: enough to refresh a badge, nothing renderable."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    recipient_id: UUID
    kind: str
    category: str
    priority: str
    occurred_at: datetime

    @classmethod
    def of(cls, notice: Notice) -> StreamNotification:
        return cls(
            recipient_id=UUID(notice.recipient_id),
            kind=notice.kind,
            category=notice.category,
            priority=notice.priority,
            occurred_at=notice.occurred_at,
        )
