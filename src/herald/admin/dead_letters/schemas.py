"""HTTP models of the admin dead-letter screen. A dead letter holds a reference to the failed
work, never its payload (R-DLQ-3), and nothing else is shown."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class DeadLetterItem(_Model):
    id: UUID
    queue_name: str
    channel: str
    job_id: str
    attempts: int
    last_error: str | None
    failed_at: datetime
    replayed_at: datetime | None
    replayed_by: str | None
    # The delivery that died (from payload_ref), and the delivery its replay created.
    delivery_id: UUID | None
    replay_delivery_id: UUID | None


class DeadLetterPage(_Model):
    items: list[DeadLetterItem]
    # None on the last page.
    next_cursor: str | None


class ReplayResult(_Model):
    # The new delivery row the replay queued (R-DLQ-5, R-DLQ-12).
    delivery_id: UUID
