"""HTTP models of the trace.

Reasons are given twice: `reasonCode`, stable for machines, and `reason`, the same thing in words
an operator can read to a parent. Nothing here carries a name, an address, content or a secret.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


AudienceReason = Literal[
    "recipient",
    "not_matched",
    "deleted",
    "created_after_freeze",
    "not_fanned_out",
    "cancelled",
]


class TracePassedOver(_Model):
    provider: str
    # Why: `circuit_open`, or the error code of a failure that certainly sent nothing.
    reason: str


class TraceAttempt(_Model):
    number: int
    at: datetime
    # sent | failed | dead | skipped
    outcome: str
    provider_status: str | None
    # The provider's error code only, never its detail.
    error_code: str | None
    retry_delay_seconds: int | None
    # The provider that answered (`smtp`, `smtp_backup`, `resend`, `aakash`, `twilio`, `mock`…);
    # None for attempts recorded before Herald kept it, or when every provider's circuit was open.
    provider: str | None
    # The providers passed over in this attempt before `provider` answered (failover).
    passed_over: list[TracePassedOver]


class TraceDelivery(_Model):
    id: UUID
    channel: str
    status: str
    # A stable code for the reason, e.g. `preference_category_off`, `mock_provider`.
    reason_code: str
    reason: str
    # The provider's error code of the last failure, if any (never its detail).
    error_code: str | None
    queued_at: datetime
    sent_at: datetime | None
    delivered_at: datetime | None
    failed_at: datetime | None
    skipped_at: datetime | None
    dead_at: datetime | None
    next_attempt_at: datetime | None
    replay_of_delivery_id: UUID | None
    attempts: list[TraceAttempt]


class TraceEscalationStep(_Model):
    """One later step of the kind's escalation plan for this recipient (docs/escalation.md)."""

    step: int
    channel: str
    # pending | sent | skipped | stopped
    state: str
    # waiting | stops_at_due_time | sent | already_sent | preference | read | recipient_gone |
    # event_cancelled
    reason_code: str
    reason: str
    # When the step is (or was) due; a pending step waits until then.
    due_at: datetime
    decided_at: datetime | None
    # The delivery the step sent (its trace is among `deliveries`).
    delivery_id: UUID | None


class RecipientTrace(_Model):
    event_id: UUID
    kind: str
    category: str
    external_id: str
    in_audience: bool
    audience_reason_code: AudienceReason
    audience_reason: str
    # Whether the person opened it in the inbox; None when they were not a recipient.
    read_in_inbox: bool | None
    read_at: datetime | None
    deliveries: list[TraceDelivery]
    # The escalation plan's later steps, in order; empty for a kind without a plan.
    escalation: list[TraceEscalationStep] = []


class PersonDelivery(_Model):
    id: UUID
    event_id: UUID
    kind: str
    category: str
    occurred_at: datetime
    channel: str
    status: str
    reason_code: str
    reason: str
    error_code: str | None
    attempts: int
    queued_at: datetime
    read_in_inbox: bool


class PersonDeliveryPage(_Model):
    items: list[PersonDelivery]
    next_cursor: str | None
