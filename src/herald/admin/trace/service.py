"""The trace: was this person in the event's audience, and what happened on each channel, in
words an operator understands.

Gate: NotificationHistory_READ, answered as the history screen answers it — without the
permission every event and every person is "not found" (404), as is another tenant's.

What each reason is read from:
- the audience: the recipient row (written by the fan-out), else the person row's lifecycle
  (deleted; created after a broadcast's freeze), else the event's state (not fanned out yet,
  cancelled), else "not matched by the audience specification";
- a delivery: its status, `last_error` (code part only) and its attempt rows. A
  `skipped_unconfigured` row with a `skipped` attempt was handed to the mock provider, which
  delivers nothing; one without any attempt never reached a provider because none is configured;
- `skipped_preference`: the fan-out records the status, not the rule that decided it, so the
  rule is recomputed from the person's preferences as they stand now (the same resolver the
  fan-out used) and the reason says so. If the preferences now allow the channel, the reason says
  they were changed since.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.admin.history import service as history
from herald.admin.history.service import PageParams
from herald.admin.trace import queries
from herald.admin.trace.queries import PersonDeliveryFilters
from herald.admin.trace.reasons import (
    PreferenceView,
    delivery_reason,
    error_code_of,
)
from herald.admin.trace.schemas import (
    PersonDelivery,
    PersonDeliveryPage,
    RecipientTrace,
    TraceAttempt,
    TraceDelivery,
    TraceEscalationStep,
    TracePassedOver,
)
from herald.auth.service import Operator
from herald.errors import EventNotFound, NotFound, PersonNotFound
from herald.kinds import Registry

READ = history.READ
FAILURE_READ = "NotificationFailure_READ"


class DeliveryNotFound(NotFound):
    """No such delivery."""

    code = "DELIVERY_NOT_FOUND"


def _attempt(row: Mapping[str, Any]) -> TraceAttempt:
    return TraceAttempt(
        number=row["attempt_number"],
        at=row["created_at"],
        outcome=row["outcome"],
        provider_status=row["provider_status"],
        error_code=error_code_of(row["error_code"]),
        retry_delay_seconds=row["retry_delay_seconds"],
        provider=row["provider"],
        passed_over=[
            TracePassedOver(provider=name, reason=reason)
            for name, _, reason in (
                entry.partition(":") for entry in (row["passed_over"] or "").split(",") if entry
            )
        ],
    )


def _event_uuid(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise EventNotFound() from None


# What an external id can be (the directory's rule): anything else names nobody, and is never
# sent to the database (a NUL byte would not even reach a text comparison).
_EXTERNAL_ID = re.compile(r"^[^\x00-\x1f\x7f]{1,255}$")


async def readable_person(
    conn: AsyncConnection, operator: Operator, external_id: str
) -> dict[str, Any]:
    if not operator.may(READ) or not _EXTERNAL_ID.match(external_id):
        raise PersonNotFound()
    person = await queries.find_person(conn, operator.tenant_id, external_id)
    if person is None:
        raise PersonNotFound()
    return person


def _not_recipient(event: Mapping[str, Any], person: Mapping[str, Any]) -> tuple[str, str]:
    if event["cancelled_at"] is not None and event["fanout_claimed_at"] is None:
        return "cancelled", "The event was cancelled before anyone was sent it."
    if event["fanout_completed_at"] is None:
        if event["fanout_claimed_at"] is None:
            return "not_fanned_out", "The event has not been sent out yet."
        return "not_fanned_out", "The event is still being sent out; this person is not done yet."
    if person["deleted_at"] is not None:
        return "deleted", "The person was deleted from the directory, so they were not included."
    frozen = event["audience_frozen_at"]
    if frozen is not None and person["created_at"] > frozen:
        return (
            "created_after_freeze",
            "The person was added after this broadcast's audience was frozen "
            "(a broadcast goes to the people who existed when it was approved for release).",
        )
    return (
        "not_matched",
        "The person was not matched by the event's audience (not in the group, role or list "
        "the event was sent to).",
    )


async def trace_recipient(
    conn: AsyncConnection,
    operator: Operator,
    registry: Registry,
    event_id: str,
    external_id: str,
) -> RecipientTrace:
    public_id = _event_uuid(event_id)
    if not operator.may(READ):
        raise EventNotFound()
    event = await queries.find_event(conn, operator.tenant_id, public_id)
    if event is None:
        raise EventNotFound()
    person = await readable_person(conn, operator, external_id)
    recipient = await queries.find_recipient(
        conn, operator.tenant_id, event["id"], person["public_id"]
    )
    if recipient is None:
        code, words = _not_recipient(event, person)
        return RecipientTrace(
            event_id=event["public_id"],
            kind=event["kind"],
            category=event["category"],
            external_id=external_id,
            in_audience=False,
            audience_reason_code=code,
            audience_reason=words,
            read_in_inbox=None,
            read_at=None,
            deliveries=[],
        )
    rows = await queries.recipient_deliveries(conn, operator.tenant_id, recipient["id"])
    tried = await queries.attempts(conn, operator.tenant_id, [row["id"] for row in rows])
    preferences = (
        await PreferenceView.load(conn, operator.tenant_id, person["id"])
        if any(row["status"] == "skipped_preference" for row in rows)
        else None
    )
    if any(row["status"] == "queued" for row in rows):
        # A queued row due later waits for its deliverAt moment or the end of quiet hours.
        moment = await queries.now(conn)
        rows = [
            {**row, "waiting_until": row["next_attempt_at"]}
            if row["status"] == "queued" and row["next_attempt_at"] > moment
            else row
            for row in rows
        ]
    deliveries = [
        _trace_delivery(row, tried[row["id"]], event, preferences, registry) for row in rows
    ]
    steps = await queries.escalation_steps(conn, operator.tenant_id, recipient["id"])
    read = recipient["read_at"] is not None
    return RecipientTrace(
        event_id=event["public_id"],
        kind=event["kind"],
        category=event["category"],
        external_id=external_id,
        in_audience=True,
        audience_reason_code="recipient",
        audience_reason="The person was in the event's audience.",
        read_in_inbox=recipient["read_at"] is not None,
        read_at=recipient["read_at"],
        deliveries=deliveries,
        escalation=[_escalation_step(step, read=read) for step in steps],
    )


_STEP_WORDS = {
    "waiting": "Waiting: sent on this channel at its due time if the person has not read it by then.",
    "stops_at_due_time": "The person has read it: at its due time this step stops and sends "
    "nothing.",
    "sent": "Sent: the person had not read it by the step's due time.",
    "already_sent": "Due unread, but a delivery on this channel existed already; none was added.",
    "preference": "Skipped: the person's preferences turn this channel off; the plan moved on.",
    "read": "Stopped: the person read it before this step was due.",
    "recipient_gone": "Stopped: the person was erased, deleted or suspended before it was due.",
    "event_cancelled": "Stopped: the event was cancelled before this step was due.",
}


def _escalation_step(row: Mapping[str, Any], *, read: bool) -> TraceEscalationStep:
    if row["state"] == "pending":
        code = "stops_at_due_time" if read else "waiting"
    else:
        code = row["reason"] or row["state"]
    return TraceEscalationStep(
        step=row["step_index"],
        channel=row["channel"],
        state=row["state"],
        reason_code=code,
        reason=_STEP_WORDS[code],
        due_at=row["due_at"],
        decided_at=row["decided_at"],
        delivery_id=row["delivery_public_id"],
    )


def _trace_delivery(
    row: Mapping[str, Any],
    attempt_rows: Sequence[Mapping[str, Any]],
    event: Mapping[str, Any],
    preferences: PreferenceView | None,
    registry: Registry,
) -> TraceDelivery:
    code, words = delivery_reason(row, event["category"], preferences, registry, event["kind"])
    return TraceDelivery(
        id=row["public_id"],
        channel=row["channel"],
        status=row["status"],
        reason_code=code,
        reason=words,
        error_code=error_code_of(row["last_error"]),
        queued_at=row["queued_at"],
        sent_at=row["sent_at"],
        delivered_at=row["delivered_at"],
        failed_at=row["failed_at"],
        skipped_at=row["skipped_at"],
        dead_at=row["dead_at"],
        next_attempt_at=row["next_attempt_at"] if row["status"] in ("queued", "failed") else None,
        replay_of_delivery_id=row["replay_of_delivery_id"],
        attempts=[_attempt(a) for a in attempt_rows],
    )


async def person_deliveries(
    conn: AsyncConnection,
    operator: Operator,
    registry: Registry,
    external_id: str,
    filters: PersonDeliveryFilters,
    page: PageParams,
) -> PersonDeliveryPage:
    person = await readable_person(conn, operator, external_id)
    rows = await queries.person_deliveries(
        conn, operator.tenant_id, person["id"], filters, after=page.after, limit=page.limit + 1
    )
    shown, more = rows[: page.limit], len(rows) > page.limit
    preferences = (
        await PreferenceView.load(conn, operator.tenant_id, person["id"])
        if any(row["status"] == "skipped_preference" for row in shown)
        else None
    )
    items = []
    for row in shown:
        code, words = delivery_reason(row, row["category"], preferences, registry, row["kind"])
        items.append(
            PersonDelivery(
                id=row["public_id"],
                event_id=row["event_public_id"],
                kind=row["kind"],
                category=row["category"],
                occurred_at=row["occurred_at"],
                channel=row["channel"],
                status=row["status"],
                reason_code=code,
                reason=words,
                error_code=error_code_of(row["last_error"]),
                attempts=row["attempts"],
                queued_at=row["queued_at"],
                read_in_inbox=row["read_at"] is not None,
            )
        )
    return PersonDeliveryPage(
        items=items,
        next_cursor=(
            history.encode_cursor(shown[-1]["queued_at"], shown[-1]["id"]) if more else None
        ),
    )


def _delivery_uuid(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise DeliveryNotFound() from None


async def locate_delivery(
    conn: AsyncConnection, operator: Operator, delivery_id: str
) -> tuple[uuid.UUID, str | None]:
    """(event id, the person's external id or None once erased) of one delivery; 404 without
    NotificationHistory_READ, as for a delivery that does not exist."""
    public_id = _delivery_uuid(delivery_id)
    if not operator.may(READ):
        raise DeliveryNotFound()
    found = await queries.locate_delivery(conn, operator.tenant_id, public_id)
    if found is None:
        raise DeliveryNotFound()
    return found["event_public_id"], found["external_id"]


@dataclass(frozen=True)
class DeliveryState:
    id: uuid.UUID
    channel: str
    status: str
    error_code: str | None
    attempts: int

    @property
    def in_flight(self) -> bool:
        return self.status in vocabulary.IN_FLIGHT_STATUSES


async def delivery_status(
    conn: AsyncConnection, operator: Operator, delivery_id: str
) -> DeliveryState:
    """One delivery's current status (for a replay's result); readable with history or failure
    permission, 404 otherwise."""
    public_id = _delivery_uuid(delivery_id)
    if not (operator.may(READ) or operator.may(FAILURE_READ)):
        raise DeliveryNotFound()
    found = await queries.locate_delivery(conn, operator.tenant_id, public_id)
    if found is None:
        raise DeliveryNotFound()
    return DeliveryState(
        id=found["public_id"],
        channel=found["channel"],
        status=found["status"],
        error_code=error_code_of(found["last_error"]),
        attempts=found["attempts"],
    )
