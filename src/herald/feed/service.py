"""The admin operations feed: fan-out on read.

Publishing writes ONE row per operational event carrying the permission code a viewer must hold
(R-FEED-1, R-FEED-5), never a row per staff member. Who sees it is decided on every read from the
caller's active role as the directory says now (R-FEED-2, R-FEED-7), so a person granted the
permission later sees earlier rows and one who loses it stops seeing them on the next request.

Access control is `queries.visible_to` and nothing else (R-FEED-6): the operator routes declare
no permission (R-SEC-5). An id the caller cannot see answers 404 exactly like an absent one
(R-FEED-13, R-SEC-7).

An operator without a person (an API key with the `admin` scope, a superadmin of its tenant) has
no read state: it may list the feed, with `readAt` always null, but anything that reads or writes
receipts (`unreadOnly`, the unread count, mark read, mark all read) answers 400
FEED_READER_REQUIRED, because a receipt belongs to a person (feed_notification_read.user_id).

This component is separate from the person-addressed centre (R-FEED-4); it borrows only the
centre's list-parameter and cursor helpers, so both lists page and refuse alike.
"""

from __future__ import annotations

import unicodedata
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Executable
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.auth.service import Operator
from herald.centre import service as centre
from herald.centre.service import ListParams
from herald.errors import (
    ActionUrlForbidden,
    FeedNotificationInvalid,
    FeedNotificationNotFound,
    FeedPublishOutsideTransaction,
    FeedReaderRequired,
)
from herald.feed import queries
from herald.feed.schemas import (
    FeedItem,
    FeedPage,
    FeedReadAllResult,
    FeedReadReceipt,
    FeedUnreadCount,
)
from herald.rendering.urls import is_safe_action_url

MAX_KIND_LENGTH = 200
MAX_TITLE_LENGTH = 500
MAX_BODY_LENGTH = 10_000
MAX_PERMISSION_CODE_LENGTH = 200
MAX_TENANT_LENGTH = 200

# Control, format (zero-width, bidi) and separator characters: a permission code or kind carrying
# one would look equal to another on screen and never match it in SQL.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})


# -- publishing ------------------------------------------------------------------------------


def prepare_publish(
    *,
    tenant_id: str,
    kind: str,
    title: str,
    body: str | None = None,
    link: str | None = None,
    permission_code: str,
    occurred_at: datetime | None = None,
) -> Executable:
    """Validate one feed event and build its insert; raises before anything is written."""
    values: dict[str, Any] = {
        "tenant_id": _token("tenant_id", tenant_id, MAX_TENANT_LENGTH),
        "kind": _token("kind", kind, MAX_KIND_LENGTH),
        "title": _text("title", title, MAX_TITLE_LENGTH),
        "body": None if body is None else _text("body", body, MAX_BODY_LENGTH, blank_ok=True),
        "link": _link(link),
        # R-FEED-5: the permission of the screen the event belongs to; any code the host's roles
        # use, so not limited to Herald's own catalogue.
        "permission_code": _token("permission_code", permission_code, MAX_PERMISSION_CODE_LENGTH),
    }
    if occurred_at is not None:
        if not isinstance(occurred_at, datetime) or occurred_at.tzinfo is None:
            raise FeedNotificationInvalid("occurred_at must be a datetime with a time zone")
        values["occurred_at"] = occurred_at.astimezone(UTC)
    return queries.insert_notification(values)


async def publish(
    tx: AsyncConnection,
    *,
    tenant_id: str,
    kind: str,
    title: str,
    body: str | None = None,
    link: str | None = None,
    permission_code: str,
    occurred_at: datetime | None = None,
) -> uuid.UUID:
    """Record one operational event in the host's own transaction; returns its public id.

    The row commits or rolls back with the business write it describes, so the feed never shows
    something that, durably, did not happen.
    """
    _require_transaction(tx.in_transaction(), await tx.get_isolation_level())
    stmt = prepare_publish(
        tenant_id=tenant_id,
        kind=kind,
        title=title,
        body=body,
        link=link,
        permission_code=permission_code,
        occurred_at=occurred_at,
    )
    public_id: uuid.UUID = (await tx.execute(stmt)).scalar_one()
    return public_id


def publish_sync(
    tx: Connection,
    *,
    tenant_id: str,
    kind: str,
    title: str,
    body: str | None = None,
    link: str | None = None,
    permission_code: str,
    occurred_at: datetime | None = None,
) -> uuid.UUID:
    """The sync twin of publish() for hosts whose code is sync: the same statement."""
    _require_transaction(tx.in_transaction(), tx.get_isolation_level())
    stmt = prepare_publish(
        tenant_id=tenant_id,
        kind=kind,
        title=title,
        body=body,
        link=link,
        permission_code=permission_code,
        occurred_at=occurred_at,
    )
    public_id: uuid.UUID = tx.execute(stmt).scalar_one()
    return public_id


def _require_transaction(in_transaction: bool, isolation_level: str) -> None:
    # An autocommit connection would commit the row on its own, whatever becomes of the host's
    # business write; refuse rather than guess (the same rule as send()).
    if not in_transaction or isolation_level == "AUTOCOMMIT":
        raise FeedPublishOutsideTransaction()


def _token(name: str, value: object, max_length: int) -> str:
    """A code-like value: non-empty, bounded, no whitespace or invisible characters."""
    if not isinstance(value, str) or not value:
        raise FeedNotificationInvalid(f"{name} must be a non-empty string")
    if len(value) > max_length:
        raise FeedNotificationInvalid(f"{name} is longer than {max_length} characters")
    if any(ch.isspace() or unicodedata.category(ch) in _REFUSED_CATEGORIES for ch in value):
        raise FeedNotificationInvalid(f"{name} may not contain spaces or control characters")
    return value


def _text(name: str, value: object, max_length: int, *, blank_ok: bool = False) -> str:
    if not isinstance(value, str):
        raise FeedNotificationInvalid(f"{name} must be a string")
    if not blank_ok and not value.strip():
        raise FeedNotificationInvalid(f"{name} must not be blank")
    if len(value) > max_length:
        raise FeedNotificationInvalid(f"{name} is longer than {max_length} characters")
    if "\x00" in value:
        # PostgreSQL text cannot hold NUL; refuse it as a 400 rather than a driver error.
        raise FeedNotificationInvalid(f"{name} may not contain NUL characters")
    return value


def _link(link: object) -> str | None:
    if link is None:
        return None
    if not isinstance(link, str) or not is_safe_action_url(link):
        raise ActionUrlForbidden("link must be an absolute https: URL or an app-relative path")
    return link


# -- reading -----------------------------------------------------------------------------------


def may_see(operator: Operator, permission_code: str) -> bool:
    """The in-memory twin of queries.visible_to, for a live stream that filters events as they
    pass (R-REALTIME-8): the bell's history and its live events never disagree."""
    return operator.superadmin or permission_code in operator.permissions


def _reader(operator: Operator) -> int:
    """The person whose receipts these are; an API key has none."""
    if operator.person_id is None:
        raise FeedReaderRequired()
    return operator.person_id


def parse_list_params(
    *,
    limit: str | int | None,
    cursor: str | None,
    unread_only: str | bool | None,
    pagination: str | None,
) -> ListParams:
    """The centre's list rules, so both lists refuse alike: pagination=false is a 400
    PAGINATION_REQUIRED, limit 1..100 (default 20), an opaque keyset cursor or 400 CURSOR_INVALID.
    """
    return centre.parse_list_params(
        limit=limit, cursor=cursor, unread_only=unread_only, pagination=pagination
    )


async def list_feed(conn: AsyncConnection, operator: Operator, params: ListParams) -> FeedPage:
    """One page of what the caller's active role may see, newest first; an empty page, never an
    error, for a caller who may see nothing (R-FEED-9)."""
    if params.unread_only:
        _reader(operator)
    # One extra row says whether another page follows, without a count.
    rows = await queries.list_page(
        conn,
        operator,
        limit=params.limit + 1,
        after=params.after,
        unread_only=params.unread_only,
    )
    page, more = rows[: params.limit], len(rows) > params.limit
    return FeedPage(
        items=[
            FeedItem(
                id=row.public_id,
                kind=row.kind,
                title=row.title,
                body=row.body,
                link=row.link,
                permission_code=row.permission_code,
                occurred_at=row.occurred_at,
                read_at=row.read_at,
            )
            for row in page
        ],
        next_cursor=centre.encode_cursor(page[-1].occurred_at, page[-1].id) if more else None,
    )


async def unread_count(conn: AsyncConnection, operator: Operator) -> FeedUnreadCount:
    reader = _reader(operator)
    return FeedUnreadCount(count=await queries.count_unread(conn, operator, reader))


async def mark_read(
    conn: AsyncConnection, operator: Operator, notification_id: str
) -> FeedReadReceipt:
    """Mark one visible row read for the caller; 404 for anything they cannot see (R-FEED-13)."""
    reader = _reader(operator)
    try:
        public_id = uuid.UUID(notification_id)
    except ValueError:
        raise FeedNotificationNotFound() from None
    marked = await queries.mark_read(conn, operator, reader, public_id)
    if marked is None:
        raise FeedNotificationNotFound()
    return FeedReadReceipt(id=marked[0], read_at=marked[1])


async def mark_all_read(conn: AsyncConnection, operator: Operator) -> FeedReadAllResult:
    reader = _reader(operator)
    return FeedReadAllResult(updated=await queries.mark_all_read(conn, operator, reader))
