"""SQL of the consumer notification centre.

Every statement here is filtered by `visible_to(actor)`, the one place the four access predicates
live (R-CENTRE-5, R-CENTRE-18): the centre's routes need no permission, so this WHERE clause is
the only access control there is, and no query may build its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    func,
    literal,
    or_,
    select,
    true,
    tuple_,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.auth.service import Actor
from herald.db import schema as s

r = s.notification_recipient
e = s.notification_event
d = s.notification_delivery

# Role scopes whose rows need no live role grant; every other scope is staff (R-CENTRE-9). Written
# as the non-staff list so that a scope nobody anticipated fails closed.
UNPRIVILEGED_SCOPES = ("guardian", "student")


def visible_to(actor: Actor) -> ColumnElement[bool]:
    """The recipient rows `actor` may see, list, count and mark read: all four predicates at once."""
    # 1. Ownership (R-CENTRE-6, R-CENTRE-21).
    owned = and_(r.c.tenant_id == actor.tenant_id, r.c.user_id == actor.person_id)

    # 2. Active role (R-CENTRE-7): a role-scoped row shows only under that role. With no active
    # role only unscoped rows remain (R-CENTRE-8); spelled out, because `= NULL` is never true.
    if actor.role_id is None:
        in_active_role: ColumnElement[bool] = r.c.audience_role_id.is_(None)
    else:
        in_active_role = or_(r.c.audience_role_id.is_(None), r.c.audience_role_id == actor.role_id)

    # 3. Staff liveness (R-CENTRE-3, R-CENTRE-9): a staff-scoped row shows only while the caller
    # still holds that role, read now and not from the token, so a dismissed teacher who is still
    # a parent stops seeing disciplinary and roster notices at once.
    holds_audience_role = (
        select(s.person_role.c.person_id)
        .where(
            s.person_role.c.person_id == actor.person_id,
            s.person_role.c.role_id == s.role.c.id,
        )
        .correlate(s.role)
        .exists()
    )
    audience_role_live = (
        select(s.role.c.id)
        .where(
            s.role.c.id == r.c.audience_role_id,
            s.role.c.tenant_id == actor.tenant_id,
            or_(s.role.c.scope_kind.in_(UNPRIVILEGED_SCOPES), holds_audience_role),
        )
        .correlate(r)
        .exists()
    )
    # A row whose audience role was deleted (its id set NULL) keeps the scope kind copied at
    # fan-out: a staff-scoped one stays hidden instead of becoming visible under every role.
    unscoped = and_(
        r.c.audience_role_id.is_(None), r.c.audience_scope_kind.is_distinct_from("staff")
    )
    staff_live = or_(unscoped, audience_role_live)

    # 4. Delivered in-app (Herald's decision 6, stricter than R-CENTRE-10 and R-CENTRE-17): email-
    # or SMS-only rows, suppressed rows and failed renders never reach the centre.
    delivered_in_app = (
        select(d.c.id)
        .where(d.c.recipient_id == r.c.id, d.c.channel == "in_app", d.c.status == "delivered")
        .correlate(r)
        .exists()
    )
    return and_(owned, in_active_role, staff_live, delivered_in_app)


@dataclass(frozen=True)
class CentreRow:
    recipient_id: int
    public_id: UUID
    kind: str
    category: str
    priority: str
    title: str | None
    body: str | None
    action_url: str | None
    occurred_at: datetime
    read_at: datetime | None


def list_page_statement(
    actor: Actor, *, limit: int, after: tuple[datetime, int] | None, unread_only: bool
) -> Select[Any]:
    """Up to `limit` visible rows, newest first, after the keyset position `after`.

    Ordered by (occurred_at DESC, id DESC) and paged by keyset on that pair (R-CENTRE-13), which
    walks notification_recipient_centre_idx; two events of one transaction share occurred_at,
    so the id breaks the tie and no row is skipped or repeated across pages.
    """
    # R-CENTRE-11: the newest delivered in-app row carries the words, so a replay wins.
    content = (
        select(d.c.rendered_title, d.c.rendered_body)
        .where(d.c.recipient_id == r.c.id, d.c.channel == "in_app", d.c.status == "delivered")
        .order_by(d.c.id.desc())
        .limit(1)
        .lateral("content")
    )
    stmt = (
        select(
            r.c.id,
            r.c.public_id,
            e.c.kind,
            e.c.category,
            e.c.priority,
            content.c.rendered_title,
            content.c.rendered_body,
            e.c.action_url,
            r.c.occurred_at,
            r.c.read_at,
        )
        .select_from(r.join(e, e.c.id == r.c.event_id).outerjoin(content, true()))
        .where(visible_to(actor))
        .order_by(r.c.occurred_at.desc(), r.c.id.desc())
        .limit(limit)
    )
    if after is not None:
        occurred_at, recipient_id = after
        stmt = stmt.where(
            tuple_(r.c.occurred_at, r.c.id) < tuple_(literal(occurred_at), literal(recipient_id))
        )
    if unread_only:
        stmt = stmt.where(r.c.read_at.is_(None))
    return stmt


async def list_page(
    conn: AsyncConnection,
    actor: Actor,
    *,
    limit: int,
    after: tuple[datetime, int] | None,
    unread_only: bool,
) -> list[CentreRow]:
    stmt = list_page_statement(actor, limit=limit, after=after, unread_only=unread_only)
    result = await conn.execute(stmt)
    return [
        CentreRow(
            recipient_id=row.id,
            public_id=row.public_id,
            kind=row.kind,
            category=row.category,
            priority=row.priority,
            title=row.rendered_title,
            body=row.rendered_body,
            action_url=row.action_url,
            occurred_at=row.occurred_at,
            read_at=row.read_at,
        )
        for row in result
    ]


async def count_unread(conn: AsyncConnection, actor: Actor) -> int:
    stmt = select(func.count()).select_from(r).where(visible_to(actor), r.c.read_at.is_(None))
    return int((await conn.execute(stmt)).scalar_one())


async def mark_read(
    conn: AsyncConnection, actor: Actor, public_id: UUID
) -> tuple[UUID, datetime] | None:
    """Mark one visible row read, keeping an earlier read time (R-CENTRE-15, R-CENTRE-22).

    None when no row matched: absent, someone else's, or outside the active role alike.
    """
    stmt = (
        update(r)
        .where(r.c.public_id == public_id, visible_to(actor))
        .values(read_at=func.coalesce(r.c.read_at, func.now()))
        .returning(r.c.public_id, r.c.read_at)
    )
    row = (await conn.execute(stmt)).first()
    return (row.public_id, row.read_at) if row else None


async def mark_all_read(conn: AsyncConnection, actor: Actor) -> int:
    """Mark every visible unread row read; the count of rows this call changed (R-CENTRE-23)."""
    stmt = update(r).where(visible_to(actor), r.c.read_at.is_(None)).values(read_at=func.now())
    return (await conn.execute(stmt)).rowcount
