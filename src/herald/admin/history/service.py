"""The admin history screen: what was sent, how each delivery ended, and cancellation.

Gates (R-ADMIN-2, R-SEC-4, R-SEC-7): the list needs NotificationHistory_READ and answers an empty
page without it; an id-addressed read needs the same permission and answers 404 without it, the
same 404 as for an event that does not exist, so a clerk learns nothing from an id; cancelling
needs NotificationHistory_UPDATE. The checks live here, not only in the routes, so no caller of
this module can skip them.

Everything is read fresh from the database on every request: there is no cache (R-ADMIN-17).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.admin.history import queries
from herald.admin.history.queries import EventFilters
from herald.admin.history.schemas import (
    DeliveryPage,
    EventCancelled,
    HistoryDelivery,
    HistoryEvent,
    HistoryPage,
)
from herald.admin.trace.reasons import delivery_reason
from herald.audit.service import record_audit
from herald.auth.service import Operator
from herald.centre import service as centre
from herald.errors import EventNotFound, PaginationRequired, ValidationFailed
from herald.sending import service as sending

READ = "NotificationHistory_READ"
UPDATE = "NotificationHistory_UPDATE"

# Exactly these count as failures (R-ADMIN-14); a skipped_* status never does (R-OBS-1, R-OBS-6).
FAILED_STATUSES = ("failed", "dead")
UNCONFIGURED_STATUS = "skipped_unconfigured"
MAX_KIND_LENGTH = 200
# A kind filter: 1 to 200 characters, none of them a control character (the route publishes it).
KIND_FILTER_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]{1,200}$"
KIND_FILTER = re.compile(KIND_FILTER_PATTERN)
_PAGINATION_ON = ("true", "1")


@dataclass(frozen=True)
class PageParams:
    limit: int
    # The keyset position (timestamp, internal id) of the last row of the previous page.
    after: tuple[datetime, int] | None


def parse_page(
    *, limit: str | int | None, cursor: str | None, pagination: str | None
) -> PageParams:
    """Paging parameters of every admin list: `pagination=false` is refused (R-ADMIN-9), `limit`
    is 1..100 (default 20) and `cursor` is an opaque keyset position. The limit and cursor rules
    are the centre's, reused so every list in Herald refuses the same things the same way."""
    if pagination is not None and pagination.strip().lower() not in _PAGINATION_ON:
        # These tables only grow; no ceiling makes an unbounded read safe to buffer at once.
        raise PaginationRequired("admin lists are paged; pagination cannot be disabled")
    parsed = centre.parse_list_params(limit=limit, cursor=cursor, unread_only=None, pagination=None)
    return PageParams(limit=parsed.limit, after=parsed.after)


def encode_cursor(moment: datetime, row_id: int) -> str:
    return centre.encode_cursor(moment, row_id)


def parse_event_filters(
    *,
    kind: str | None,
    category: str | None,
    status: str | None,
    occurred_from: str | datetime | None,
    occurred_to: str | datetime | None,
) -> EventFilters:
    """Validate the history filters; every refusal is a 400 with a code."""
    if kind is not None and not KIND_FILTER.match(kind):
        raise ValidationFailed(f"kind must be 1 to {MAX_KIND_LENGTH} printable characters")
    if category is not None and category not in vocabulary.CATEGORIES:
        raise ValidationFailed(f"category must be one of {', '.join(vocabulary.CATEGORIES)}")
    if status is not None and status not in vocabulary.EVENT_STATES:
        raise ValidationFailed(f"status must be one of {', '.join(vocabulary.EVENT_STATES)}")
    start = _parse_moment("from", occurred_from)
    end = _parse_moment("to", occurred_to)
    if start is not None and end is not None and start >= end:
        raise ValidationFailed("from must be earlier than to")
    return EventFilters(
        kind=kind, category=category, state=status, occurred_from=start, occurred_to=end
    )


def _parse_moment(name: str, raw: str | datetime | None) -> datetime | None:
    if raw is None:
        return None
    if isinstance(raw, datetime):
        if raw.tzinfo is None:
            raise ValidationFailed(f"{name} must carry a time zone")
        return raw
    try:
        moment = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise ValidationFailed(f"{name} must be an ISO 8601 timestamp with a time zone") from None
    if moment.tzinfo is None:
        raise ValidationFailed(f"{name} must carry a time zone")
    return moment


def _event_id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise EventNotFound() from None


def _history_event(row: Mapping[str, Any], counts: Mapping[str, int]) -> HistoryEvent:
    return HistoryEvent(
        id=row["public_id"],
        kind=row["kind"],
        category=row["category"],
        priority=row["priority"],
        state=sending.event_state(row),
        occurred_at=row["occurred_at"],
        scheduled_for=row["scheduled_for"],
        cancelled_at=row["cancelled_at"],
        recipient_count=row["recipient_count"],
        delivery_counts=dict(counts),
        failed_delivery_count=sum(counts.get(status, 0) for status in FAILED_STATUSES),
        unconfigured_count=counts.get(UNCONFIGURED_STATUS, 0),
    )


async def list_history(
    conn: AsyncConnection, operator: Operator, filters: EventFilters, page: PageParams
) -> HistoryPage:
    """One page of events, newest first, each with its delivery counts by status."""
    if not operator.may(READ):
        # A list without the permission is empty, not an error (HELPERS: lists vs ids).
        return HistoryPage(items=[], next_cursor=None)
    # One extra row says whether another page follows, without a count.
    rows = await queries.list_events(
        conn, operator.tenant_id, filters, after=page.after, limit=page.limit + 1
    )
    shown, more = rows[: page.limit], len(rows) > page.limit
    counts = await queries.delivery_counts(conn, operator.tenant_id, [r["id"] for r in shown])
    return HistoryPage(
        items=[_history_event(row, counts[row["id"]]) for row in shown],
        next_cursor=encode_cursor(shown[-1]["occurred_at"], shown[-1]["id"]) if more else None,
    )


async def get_history_event(
    conn: AsyncConnection, operator: Operator, event_id: str
) -> HistoryEvent:
    """One event with its counts; 404 when absent or when the caller may not read history."""
    event = await _readable_event(conn, operator, event_id)
    counts = await queries.delivery_counts(conn, operator.tenant_id, [event["id"]])
    return _history_event(event, counts[event["id"]])


async def list_event_deliveries(
    conn: AsyncConnection,
    operator: Operator,
    event_id: str,
    page: PageParams,
    *,
    channel: str | None = None,
    status: str | None = None,
) -> DeliveryPage:
    """One page of an event's deliveries in queue order, replays after what they replace."""
    event = await _readable_event(conn, operator, event_id)
    rows = await queries.list_deliveries(
        conn,
        operator.tenant_id,
        event["id"],
        channel=channel,
        status=status,
        after=page.after,
        limit=page.limit + 1,
    )
    shown, more = rows[: page.limit], len(rows) > page.limit
    return DeliveryPage(
        items=[_history_delivery(row) for row in shown],
        next_cursor=encode_cursor(shown[-1]["queued_at"], shown[-1]["id"]) if more else None,
    )


def _history_delivery(row: Mapping[str, Any]) -> HistoryDelivery:
    reason_code, reason = delivery_reason(row, "", None)
    return HistoryDelivery(
        id=row["public_id"],
        channel=row["channel"],
        status=row["status"],
        attempts=row["attempts"],
        failure_count=row["failure_count"],
        lease_expiry_count=row["lease_expiry_count"],
        queued_at=row["queued_at"],
        sent_at=row["sent_at"],
        delivered_at=row["delivered_at"],
        failed_at=row["failed_at"],
        skipped_at=row["skipped_at"],
        dead_at=row["dead_at"],
        last_error=row["last_error"],
        provider=row["provider"],
        provider_message_id=row["provider_message_id"],
        template_version=row["template_version"],
        rendered_hash=row["rendered_hash"],
        replay_of_delivery_id=row["replay_of_delivery_id"],
        reason_code=reason_code,
        reason=reason,
    )


async def _readable_event(
    conn: AsyncConnection, operator: Operator, event_id: str
) -> dict[str, Any]:
    public_id = _event_id(event_id)
    # Without the permission every id is "not found", so the answer says nothing about the id.
    if not operator.may(READ):
        raise EventNotFound()
    event = await queries.find_event(conn, operator.tenant_id, public_id)
    if event is None:
        raise EventNotFound()
    return event


async def cancel_event(conn: AsyncConnection, operator: Operator, event_id: str) -> EventCancelled:
    """Cancel an event before its fan-out starts (R-ADMIN-4): the sending stage's compare-and-set
    (R-ADMIN-15, R-ADMIN-16), recorded as the operator's and audited in the same transaction."""
    public_id = _event_id(event_id)
    if not operator.may(UPDATE):
        raise EventNotFound()
    cancelled = await sending.cancel_event(
        conn, operator.tenant_id, public_id, actor=operator.actor_id
    )
    await record_audit(
        conn,
        operator,
        "cancel",
        "notification_event",
        str(public_id),
        {
            "cancelled_at": {"before": None, "after": cancelled["cancelled_at"]},
            "cancelled_by": {"before": None, "after": operator.actor_id},
        },
    )
    return EventCancelled(**cancelled)
