"""SQL of the consumer notification centre.

Every statement here is filtered by `_visible()` (`visible_to(actor)` with the caller's values),
the one place the four access predicates live (R-CENTRE-5, R-CENTRE-18): the centre's routes need
no permission, so this WHERE clause is the only access control there is, and no query may build
its own. (The list takes the fourth predicate, a delivered in-app delivery, as the join that
fetches that delivery's words: the same `_delivered_in_app()` condition, one probe instead of two.)

The statements are built and compiled once per process; a request supplies only its values. The
constants that select a partial index are written into the SQL text (see `_constant`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    DateTime,
    Integer,
    Text,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal_column,
    or_,
    select,
    true,
    tuple_,
    update,
)
from sqlalchemy import Uuid as UUIDType
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ClauseElement

from herald.auth.service import Actor
from herald.db import schema as s
from herald.db.compiled import Compiled, Driver

r = s.notification_recipient
e = s.notification_event
d = s.notification_delivery

# Role scopes whose rows need no live role grant; every other scope is staff (R-CENTRE-9). Written
# as the non-staff list so that a scope nobody anticipated fails closed.
UNPRIVILEGED_SCOPES = ("guardian", "student")


def _constant(value: str) -> ColumnElement[str]:
    """A constant written into the SQL text, never bound: the values that select a partial index
    (`channel = 'in_app' AND status = 'delivered'`) must be visible to the planner in a generic
    plan too (psycopg prepares a statement after a few executions, and PostgreSQL then plans it
    once for any parameter; a bound channel could not use notification_delivery_inbox_idx)."""
    if "'" in value:
        raise ValueError(f"not a plain constant: {value!r}")
    return literal_column(f"'{value}'", Text)


# The caller's identity as bind parameters: every statement below is built once per process
# (functools.cache) and compiled once, and each request only supplies these values.
TENANT = bindparam("tenant_id", type_=Text)
PERSON = bindparam("person_id", type_=BigInteger)
ROLE = bindparam("role_id", type_=BigInteger)


def actor_params(actor: Actor) -> dict[str, Any]:
    return {"tenant_id": actor.tenant_id, "person_id": actor.person_id, "role_id": actor.role_id}


def _delivered_in_app() -> ColumnElement[bool]:
    """The delivery row `d` is recipient `r`'s in-app delivery, delivered (predicate 4 below)."""
    return and_(
        d.c.recipient_id == r.c.id,
        # The delivery lives in its recipient's month: the probe reads that month's partition
        # only (pruned as it runs, row by row), not one index per month.
        d.c.occurred_at == r.c.occurred_at,
        d.c.channel == _constant("in_app"),
        d.c.status == _constant("delivered"),
    )


def _visible(*, delivered_in_app: bool = True) -> ColumnElement[bool]:
    """The recipient rows the caller (TENANT, PERSON, ROLE) may see, list, count and mark read:
    all four predicates at once. Without `delivered_in_app` the fourth is left to the caller,
    which must join the row to a delivery matching `_delivered_in_app()` (the list does: the
    newest such row carries the words, so one probe both decides and fetches them)."""
    # 1. Ownership (R-CENTRE-6, R-CENTRE-21).
    owned = and_(r.c.tenant_id == TENANT, r.c.user_id == PERSON)

    # 2. Active role (R-CENTRE-7): a role-scoped row shows only under that role. With no active
    # role (ROLE is NULL) only unscoped rows remain (R-CENTRE-8): `= NULL` is never true.
    in_active_role = or_(r.c.audience_role_id.is_(None), r.c.audience_role_id == ROLE)

    # 3. Staff liveness (R-CENTRE-3, R-CENTRE-9): a staff-scoped row shows only while the caller
    # still holds that role, read now and not from the token, so a dismissed teacher who is still
    # a parent stops seeing disciplinary and roster notices at once.
    holds_audience_role = (
        select(s.person_role.c.person_id)
        .where(
            s.person_role.c.person_id == PERSON,
            s.person_role.c.role_id == s.role.c.id,
        )
        .correlate(s.role)
        .exists()
    )
    audience_role_live = (
        select(s.role.c.id)
        .where(
            s.role.c.id == r.c.audience_role_id,
            s.role.c.tenant_id == TENANT,
            or_(
                s.role.c.scope_kind.in_([_constant(v) for v in UNPRIVILEGED_SCOPES]),
                holds_audience_role,
            ),
        )
        .correlate(r)
        .exists()
    )
    # A row whose audience role was deleted (its id set NULL) keeps the scope kind copied at
    # fan-out: a staff-scoped one stays hidden instead of becoming visible under every role.
    unscoped = and_(
        r.c.audience_role_id.is_(None),
        r.c.audience_scope_kind.is_distinct_from(_constant("staff")),
    )
    staff_live = or_(unscoped, audience_role_live)

    # 4. Delivered in-app (Herald's decision 6, stricter than R-CENTRE-10 and R-CENTRE-17): email-
    # or SMS-only rows, suppressed rows and failed renders never reach the centre.
    if not delivered_in_app:
        return and_(owned, in_active_role, staff_live)
    delivered = select(d.c.id).where(_delivered_in_app()).correlate(r).exists()
    return and_(owned, in_active_role, staff_live, delivered)


def visible_to(actor: Actor) -> ColumnElement[bool]:
    """The recipient rows `actor` may see: the one access predicate, with the actor's values."""
    return _visible().params(actor_params(actor))


@dataclass(frozen=True)
class PageRow:
    """One row of a list page: its keyset position, and the item as its JSON object."""

    recipient_id: int
    occurred_at: datetime
    # NotificationItem's JSON (by alias), written by PostgreSQL: see item_json.
    item: str


def _json_string(value: ColumnElement[Any]) -> ColumnElement[str]:
    """A text value as a JSON string, or null. PostgreSQL's escaping is pydantic-core's: the
    seven short escapes, other control characters as lowercase \\u00xx, everything else as is."""
    return func.coalesce(cast(func.to_json(value), Text), _constant("null"))


def _json_timestamp(value: ColumnElement[datetime]) -> ColumnElement[str]:
    """A timestamptz as pydantic-core writes an aware UTC datetime: seconds, then the six digits
    of the microseconds only when there are any, then Z; or null."""
    utc = func.timezone(_constant("UTC"), value)
    fraction = case(
        (func.date_trunc(_constant("second"), value) == value, _constant("")),
        else_=func.to_char(utc, _constant(".US")),
    )
    stamp = (
        _constant('"')
        + func.to_char(utc, _constant('YYYY-MM-DD"T"HH24:MI:SS'))
        + fraction
        + _constant('Z"')
    )
    return func.coalesce(stamp, _constant("null"))


def item_json(
    *,
    public_id: ColumnElement[Any],
    kind: ColumnElement[Any],
    category: ColumnElement[Any],
    priority: ColumnElement[Any],
    title: ColumnElement[Any],
    body: ColumnElement[Any],
    action_url: ColumnElement[Any],
    occurred_at: ColumnElement[Any],
    read_at: ColumnElement[Any],
) -> ColumnElement[str]:
    """NotificationItem's JSON, byte for byte what `model_dump_json(by_alias=True)` writes for
    the same values in UTC (tests/integration/test_centre_item_json.py holds the two equal).

    The list's rows leave PostgreSQL as one text value each instead of ten typed columns: the
    API process, which is what an inbox request waits on, decodes three values a row instead of
    ten and serialises nothing, and PostgreSQL does the formatting on its own core."""
    fields: list[tuple[str, ColumnElement[str]]] = [
        ("id", _constant('"') + cast(public_id, Text) + _constant('"')),
        ("kind", _json_string(kind)),
        ("category", _json_string(category)),
        ("priority", _json_string(priority)),
        ("title", _json_string(title)),
        ("body", _json_string(body)),
        ("actionUrl", _json_string(action_url)),
        ("occurredAt", _json_timestamp(occurred_at)),
        ("readAt", _json_timestamp(read_at)),
    ]
    out: ColumnElement[str] = _constant("{")
    for index, (name, value) in enumerate(fields):
        out = out + _constant(("," if index else "") + f'"{name}":') + value
    return out + _constant("}")


@functools.cache
def _list_page(keyset: bool, unread_only: bool) -> Compiled:
    """Up to LIMIT visible rows, newest first, after the keyset position (AFTER_AT, AFTER_ID):
    each its recipient id, its occurred_at (the next cursor) and its item's JSON.

    Ordered by (occurred_at DESC, id DESC) and paged by keyset on that pair (R-CENTRE-13), which
    walks notification_recipient_centre_idx; two events of one transaction share occurred_at,
    so the id breaks the tie and no row is skipped or repeated across pages.
    """
    # R-CENTRE-11: the newest delivered in-app row carries the words, so a replay wins. Joined
    # (not left-joined), it is also the fourth visibility predicate: a row with no delivered
    # in-app delivery has no content and is not listed, and each row costs one probe of
    # notification_delivery_inbox_idx instead of two (an EXISTS and this lookup).
    content = (
        select(d.c.rendered_title, d.c.rendered_body)
        .where(_delivered_in_app())
        .order_by(d.c.id.desc())
        .limit(1)
        .lateral("content")
    )
    item = item_json(
        public_id=r.c.public_id,
        kind=e.c.kind,
        category=e.c.category,
        priority=e.c.priority,
        title=content.c.rendered_title,
        body=content.c.rendered_body,
        action_url=e.c.action_url,
        occurred_at=r.c.occurred_at,
        read_at=r.c.read_at,
    )
    stmt = (
        select(r.c.id, r.c.occurred_at, item.label("item"))
        .select_from(r.join(e, e.c.id == r.c.event_id).join(content, true()))
        .where(_visible(delivered_in_app=False))
        .order_by(r.c.occurred_at.desc(), r.c.id.desc())
        .limit(bindparam("limit", type_=Integer))
    )
    if keyset:
        stmt = stmt.where(
            tuple_(r.c.occurred_at, r.c.id)
            < tuple_(
                bindparam("after_at", type_=DateTime(timezone=True)),
                bindparam("after_id", type_=BigInteger),
            )
        )
    if unread_only:
        stmt = stmt.where(r.c.read_at.is_(None))
    return Compiled.of(stmt)


def _list_params(actor: Actor, limit: int, after: tuple[datetime, int] | None) -> dict[str, Any]:
    params = actor_params(actor) | {"limit": limit}
    if after is not None:
        params["after_at"], params["after_id"] = after
    return params


def list_page_statement(
    actor: Actor, *, limit: int, after: tuple[datetime, int] | None, unread_only: bool
) -> ClauseElement:
    """The list's statement with this caller's values bound (for EXPLAIN and tests)."""
    compiled = _list_page(after is not None, unread_only)
    return compiled.statement.params(_list_params(actor, limit, after))


async def list_page(
    conn: AsyncConnection | Driver,
    actor: Actor,
    *,
    limit: int,
    after: tuple[datetime, int] | None,
    unread_only: bool,
) -> list[PageRow]:
    compiled = _list_page(after is not None, unread_only)
    result = await compiled.rows(conn, _list_params(actor, limit, after))
    return [PageRow(recipient_id=row[0], occurred_at=row[1], item=row[2]) for row in result]


# The unread count stops at this many rows: a badge shows "99+" from here (see count_unread).
UNREAD_COUNT_CAP = 100


@functools.cache
def _unread_count() -> Compiled:
    """How many visible unread rows, counting no further than UNREAD_COUNT_CAP: the scan of the
    person's unread rows (notification_recipient_unread_idx) stops there, so the count costs the
    same for a person with ten thousand unread rows as for one with a hundred."""
    capped = (
        select(r.c.id)
        .where(_visible(), r.c.read_at.is_(None))
        .limit(UNREAD_COUNT_CAP)
        .subquery("unread")
    )
    return Compiled.of(select(func.count()).select_from(capped))


def unread_count_statement(actor: Actor) -> ClauseElement:
    return _unread_count().statement.params(actor_params(actor))


async def count_unread(conn: AsyncConnection | Driver, actor: Actor) -> int:
    """The visible unread rows: exact below UNREAD_COUNT_CAP; UNREAD_COUNT_CAP means at least
    that many."""
    [(count,)] = await _unread_count().rows(conn, actor_params(actor))
    return int(count)


@functools.cache
def _mark_read() -> Compiled:
    return Compiled.of(
        update(r)
        .where(r.c.public_id == bindparam("public_id", type_=UUIDType), _visible())
        .values(read_at=func.coalesce(r.c.read_at, func.now()))
        .returning(r.c.public_id, r.c.read_at)
    )


async def mark_read(
    conn: AsyncConnection | Driver, actor: Actor, public_id: UUID
) -> tuple[UUID, datetime] | None:
    """Mark one visible row read, keeping an earlier read time (R-CENTRE-15, R-CENTRE-22).

    None when no row matched: absent, someone else's, or outside the active role alike.
    """
    params = actor_params(actor) | {"public_id": public_id}
    rows = await _mark_read().rows(conn, params)
    return (rows[0][0], rows[0][1]) if rows else None


async def mark_all_read(conn: AsyncConnection | Driver, actor: Actor) -> int:
    """Mark every visible unread row read; the count of rows this call changed (R-CENTRE-23)."""
    return await _mark_all_read().rowcount(conn, actor_params(actor))


@functools.cache
def _mark_all_read() -> Compiled:
    return Compiled.of(
        update(r).where(_visible(), r.c.read_at.is_(None)).values(read_at=func.now())
    )
