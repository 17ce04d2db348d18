"""HTTP models of the admin history screen.

Nothing here carries a name, an address, variables or rendered content: the queries never read
them (R-ADMIN-11..13), so there is nothing to leave out.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class HistoryEvent(_Model):
    id: UUID
    kind: str
    category: str
    priority: str
    # scheduled | pending | fanning_out | completed | cancelled
    state: str
    occurred_at: datetime
    scheduled_for: datetime | None
    cancelled_at: datetime | None
    # None until the fan-out completes.
    recipient_count: int | None
    # Every status present, skipped_* included, each under its own name.
    delivery_counts: dict[str, int]
    # Exactly `failed` + `dead`; never a skipped_* status (R-ADMIN-14, R-OBS-1, R-OBS-6).
    failed_delivery_count: int
    # `skipped_unconfigured`, surfaced as a state of its own, not a failure (R-OBS-1).
    unconfigured_count: int


class HistoryPage(_Model):
    items: list[HistoryEvent]
    # None on the last page.
    next_cursor: str | None


class HistoryDelivery(_Model):
    id: UUID
    channel: str
    status: str
    attempts: int
    failure_count: int
    lease_expiry_count: int
    queued_at: datetime
    sent_at: datetime | None
    delivered_at: datetime | None
    failed_at: datetime | None
    skipped_at: datetime | None
    dead_at: datetime | None
    last_error: str | None
    # The provider of the latest attempt (`smtp`, `resend`, `aakash`…; with failover, the one of
    # the channel's providers that answered); None before any attempt, or before Herald kept it.
    provider: str | None
    provider_message_id: str | None
    template_version: int | None
    rendered_hash: str | None
    # The public id of the delivery this one replays, if it is a replay.
    replay_of_delivery_id: UUID | None
    # Why the delivery stands where it does, as a stable code and in an operator's words (the
    # same reasons as the trace, GET /v1/admin/events/{id}/recipients/{externalId}, which also
    # names the preference rule: history reads no person, so here it says only "preferences").
    # `skipped_unconfigured` reads "mock provider, not delivered" when a mock provider was called
    # and "no provider configured" when none was.
    reason_code: str
    reason: str


class DeliveryPage(_Model):
    items: list[HistoryDelivery]
    next_cursor: str | None


class EventCancelled(_Model):
    id: UUID
    kind: str
    state: str
    cancelled_at: datetime
