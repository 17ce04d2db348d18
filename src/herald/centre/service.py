"""The consumer notification centre: a person's own inbox, as their active role may see it.

Every function reads or writes through herald.centre.queries, whose `visible_to` carries the four
access predicates (ownership, active role, staff liveness, delivered in-app). There is no other
access control on these routes (R-CENTRE-5, R-CENTRE-25), so nothing here bypasses it.

"Expired" items (R-CENTRE-23, R-CENTRE-24): recipients have no expiry yet, so every visible item
is current and read-all covers all of them.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from pydantic_core import to_json
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.auth.service import Actor
from herald.centre import queries
from herald.centre.schemas import (
    ReadAllResult,
    ReadReceipt,
    UnreadCount,
)
from herald.db.compiled import Driver
from herald.errors import (
    CursorInvalid,
    NotificationNotFound,
    PaginationRequired,
    ValidationFailed,
)

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
_TRUE = ("true", "1")
_FALSE = ("false", "0")


@dataclass(frozen=True)
class ListParams:
    limit: int
    # The keyset position (occurred_at, recipient id) of the last item of the previous page.
    after: tuple[datetime, int] | None
    unread_only: bool


def parse_list_params(
    *,
    limit: str | int | None,
    cursor: str | None,
    unread_only: str | bool | None,
    pagination: str | None,
) -> ListParams:
    """Validate the list's query string; every refusal is a 400 with its own code."""
    if pagination is not None:
        # R-CENTRE-14: the inbox only grows, so it is never returned in one piece.
        raise PaginationRequired("the notification list is paged; pagination cannot be disabled")
    return ListParams(
        limit=_parse_limit(limit),
        after=decode_cursor(cursor) if cursor is not None else None,
        unread_only=_parse_flag("unreadOnly", unread_only),
    )


def _parse_limit(raw: str | int | None) -> int:
    if raw is None:
        return DEFAULT_LIMIT
    try:
        limit = int(raw)
    except ValueError:
        raise ValidationFailed(f"limit must be an integer from 1 to {MAX_LIMIT}") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise ValidationFailed(f"limit must be an integer from 1 to {MAX_LIMIT}")
    return limit


def _parse_flag(name: str, raw: str | bool | None) -> bool:
    if raw is None:
        return False
    if isinstance(raw, bool):
        return raw
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValidationFailed(f"{name} must be true or false")


def encode_cursor(occurred_at: datetime, recipient_id: int) -> str:
    raw = json.dumps([occurred_at.isoformat(), recipient_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    """The keyset position a cursor names; anything this list did not issue is refused."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
        stamp, recipient_id = value
        if not isinstance(stamp, str) or type(recipient_id) is not int or recipient_id < 1:
            raise ValueError("wrong shape")
        occurred_at = datetime.fromisoformat(stamp)
        if occurred_at.tzinfo is None:
            raise ValueError("naive timestamp")
    except (binascii.Error, UnicodeDecodeError, ValueError, TypeError):
        raise CursorInvalid() from None
    return occurred_at, recipient_id


async def list_notifications(
    conn: AsyncConnection | Driver, actor: Actor, params: ListParams
) -> tuple[list[queries.PageRow], str | None]:
    """One page of the caller's visible items, newest first, and the cursor of the next page
    (None on the last)."""
    # One extra row says whether another page follows, without a count.
    rows = await queries.list_page(
        conn,
        actor,
        limit=params.limit + 1,
        after=params.after,
        unread_only=params.unread_only,
    )
    return page_of(rows, params.limit)


def page_of(rows: list[queries.PageRow], limit: int) -> tuple[list[queries.PageRow], str | None]:
    """The page of `limit` items out of the `limit + 1` rows read, and the next page's cursor."""
    page, more = rows[:limit], len(rows) > limit
    next_cursor = encode_cursor(page[-1].occurred_at, page[-1].recipient_id) if more else None
    return page, next_cursor


def page_json(page: list[queries.PageRow], next_cursor: str | None) -> bytes:
    """NotificationPage's JSON (what the OpenAPI publishes): the items as PostgreSQL wrote them
    (queries.item_json, held byte-equal to NotificationItem's own JSON by a test), joined."""
    items = ",".join(row.item for row in page)
    return b'{"items":[' + items.encode() + b'],"nextCursor":' + to_json(next_cursor) + b"}"


async def unread_count(conn: AsyncConnection | Driver, actor: Actor) -> UnreadCount:
    return unread_of(await queries.count_unread(conn, actor))


def unread_of(count: int) -> UnreadCount:
    return UnreadCount(count=count, capped=count >= queries.UNREAD_COUNT_CAP)


async def mark_read(
    conn: AsyncConnection | Driver, actor: Actor, notification_id: str
) -> ReadReceipt:
    """Mark one item read; 404 for anything the caller cannot see, never 403 (R-CENTRE-16)."""
    try:
        public_id = UUID(notification_id)
    except ValueError:
        raise NotificationNotFound() from None
    marked = await queries.mark_read(conn, actor, public_id)
    if marked is None:
        raise NotificationNotFound()
    return ReadReceipt(id=marked[0], read_at=marked[1])


async def mark_all_read(conn: AsyncConnection | Driver, actor: Actor) -> ReadAllResult:
    return ReadAllResult(updated=await queries.mark_all_read(conn, actor))
