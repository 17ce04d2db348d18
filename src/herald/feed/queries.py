"""SQL of the admin operations feed (fan-out on read).

Every statement that reads or marks feed rows is filtered by `visible_to(operator)`, the one place
the feed's access predicate lives: the operator feed routes declare no permission (R-SEC-5), so
this WHERE clause is the only access control there is (R-FEED-6), and no query may build its own.

Read state is joined by `with_read_state(reader)` alone, on the notification AND the caller, so a
row never counts as read because somebody else read it (R-FEED-10).

The feed tables are joined to nothing of the write-time cluster (R-SCHEMA-1, R-SCHEMA-2).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    DateTime,
    Executable,
    FromClause,
    Select,
    and_,
    false,
    func,
    literal,
    null,
    select,
    tuple_,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.auth.service import Operator
from herald.db import schema as s

n = s.feed_notification
nr = s.feed_notification_read


def visible_to(operator: Operator) -> ColumnElement[bool]:
    """The feed rows `operator` may list, count and mark read, decided now from the permissions
    their active role holds at this request (R-FEED-2, R-FEED-6, R-FEED-7)."""
    if operator.superadmin:
        # R-FEED-8: no permission filter at all, never an IN list of the whole catalogue.
        return n.c.tenant_id == operator.tenant_id
    if not operator.permissions:
        # R-FEED-9: no active role (or a role granting nothing) sees nothing, spelled as the SQL
        # literal false, because an empty IN list reads as "no filter" in some drivers.
        return false()
    return and_(
        n.c.tenant_id == operator.tenant_id,
        n.c.permission_code.in_(sorted(operator.permissions)),
    )


def with_read_state(reader_id: int) -> FromClause:
    """feed_notification LEFT JOIN feed_notification_read on this reader alone (R-FEED-10)."""
    return n.outerjoin(nr, and_(nr.c.notification_id == n.c.id, nr.c.user_id == reader_id))


def insert_notification(values: Mapping[str, Any]) -> Executable:
    """One row per event, whoever may see it (R-FEED-1); built once for publish() and its sync
    twin."""
    return insert(n).values(**values).returning(n.c.public_id)


@dataclass(frozen=True)
class FeedRow:
    id: int
    public_id: uuid.UUID
    kind: str
    title: str
    body: str | None
    link: str | None
    permission_code: str
    occurred_at: datetime
    read_at: datetime | None


def list_page_statement(
    operator: Operator,
    *,
    limit: int,
    after: tuple[datetime, int] | None,
    unread_only: bool,
) -> Select[Any]:
    """Up to `limit` visible rows, newest first, after the keyset position `after`.

    Ordered by (occurred_at DESC, id DESC), which walks feed_notification_list_idx; rows published
    in one transaction share occurred_at, so the id breaks the tie. An operator with no person (an
    API key) has no read state: every row answers read_at NULL, and `unread_only` is refused
    before it gets here.
    """
    if operator.person_id is None:
        if unread_only:
            raise ValueError("an operator without a person has no unread state")
        source: FromClause = n
        read_at: ColumnElement[Any] = null().label("read_at")
    else:
        source = with_read_state(operator.person_id)
        read_at = nr.c.read_at
    stmt = (
        select(
            n.c.id,
            n.c.public_id,
            n.c.kind,
            n.c.title,
            n.c.body,
            n.c.link,
            n.c.permission_code,
            n.c.occurred_at,
            read_at,
        )
        .select_from(source)
        .where(visible_to(operator))
        .order_by(n.c.occurred_at.desc(), n.c.id.desc())
        .limit(limit)
    )
    if after is not None:
        occurred_at, row_id = after
        stmt = stmt.where(
            tuple_(n.c.occurred_at, n.c.id)
            < tuple_(literal(occurred_at, DateTime(timezone=True)), literal(row_id, BigInteger))
        )
    if unread_only:
        stmt = stmt.where(nr.c.notification_id.is_(None))
    return stmt


async def list_page(
    conn: AsyncConnection,
    operator: Operator,
    *,
    limit: int,
    after: tuple[datetime, int] | None,
    unread_only: bool,
) -> list[FeedRow]:
    stmt = list_page_statement(operator, limit=limit, after=after, unread_only=unread_only)
    result = await conn.execute(stmt)
    return [
        FeedRow(
            id=row.id,
            public_id=row.public_id,
            kind=row.kind,
            title=row.title,
            body=row.body,
            link=row.link,
            permission_code=row.permission_code,
            occurred_at=row.occurred_at,
            read_at=row.read_at,
        )
        for row in result
    ]


async def count_unread(conn: AsyncConnection, operator: Operator, reader_id: int) -> int:
    """Every visible row without this reader's receipt, not just one page's worth (R-FEED-11)."""
    stmt = (
        select(func.count())
        .select_from(with_read_state(reader_id))
        .where(visible_to(operator), nr.c.notification_id.is_(None))
    )
    return int((await conn.execute(stmt)).scalar_one())


async def mark_read(
    conn: AsyncConnection, operator: Operator, reader_id: int, public_id: uuid.UUID
) -> tuple[uuid.UUID, datetime] | None:
    """Record this reader's receipt for one visible row, keeping an earlier one; one statement.

    None when no visible row has that id: absent, another tenant's or outside the caller's
    permissions alike, and then nothing is written (R-FEED-13).
    """
    target = (
        select(n.c.id, n.c.public_id)
        .where(n.c.public_id == public_id, visible_to(operator))
        .cte("target")
    )
    inserted = (
        insert(nr)
        .from_select(
            ["notification_id", "user_id"],
            select(target.c.id, literal(reader_id, BigInteger)),
        )
        .on_conflict_do_nothing(index_elements=[nr.c.notification_id, nr.c.user_id])
        .returning(nr.c.read_at)
        .cte("inserted")
    )
    earlier = (
        select(nr.c.read_at)
        .where(nr.c.notification_id == target.c.id, nr.c.user_id == reader_id)
        .scalar_subquery()
    )
    stmt = select(
        target.c.public_id,
        # A receipt committed by a concurrent call after this statement's snapshot is neither
        # inserted here nor visible to `earlier`; it exists, so now() is the honest answer.
        func.coalesce(select(inserted.c.read_at).scalar_subquery(), earlier, func.now()).label(
            "read_at"
        ),
    ).select_from(target)
    row = (await conn.execute(stmt)).first()
    return (row.public_id, row.read_at) if row else None


async def mark_all_read(conn: AsyncConnection, operator: Operator, reader_id: int) -> int:
    """Receipts for every visible row this reader has not read, and for nothing they cannot see
    (R-FEED-12); the number of receipts this call created."""
    unread_visible = (
        select(n.c.id, literal(reader_id, BigInteger))
        .select_from(with_read_state(reader_id))
        .where(visible_to(operator), nr.c.notification_id.is_(None))
    )
    inserted = (
        insert(nr)
        .from_select(["notification_id", "user_id"], unread_visible)
        .on_conflict_do_nothing(index_elements=[nr.c.notification_id, nr.c.user_id])
        .returning(nr.c.notification_id)
        .cte("inserted")
    )
    # Counted in SQL: SQLAlchemy documents rowcount for UPDATE and DELETE only, and answers -1
    # for this INSERT … SELECT.
    stmt = select(func.count()).select_from(inserted)
    return int((await conn.execute(stmt)).scalar_one())
