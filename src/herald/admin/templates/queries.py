"""SQL of the template-override admin.

Every statement is scoped by tenant_id, so another tenant's override is simply not there.
Concurrency is the application's `version` column (R-SCHEMA-41, R-ADMIN-5): each change is one
`UPDATE … SET version = version + 1 … WHERE version = :read RETURNING …`, and zero rows back is
the conflict. No trigger, and `updated_at` is informational only.

Version rows (notification_template_version) are only ever inserted (R-RENDER-40); a deleted
override keeps its history, whose template_id the foreign key sets to NULL.

Driver errors are translated here: the body CHECK (R-SCHEMA-42) becomes TemplateBodyBlank and
any other refused value a 400, never a 500.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import delete, exc, func, insert, select, tuple_, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import records
from herald.db import schema as s
from herald.errors import TemplateBodyBlank, ValidationFailed

t = s.notification_template
v = s.notification_template_version

P = ParamSpec("P")
R = TypeVar("R")

BODY_CHECK = "notification_template_body_not_blank_check"

# What the admin answers with; `id` is the internal key, for version rows only.
_COLUMNS = (
    t.c.id,
    t.c.public_id,
    t.c.kind,
    t.c.channel,
    t.c.locale,
    t.c.status,
    t.c.title,
    t.c.body,
    t.c.version,
    t.c.created_by,
    t.c.updated_by,
    t.c.created_at,
    t.c.updated_at,
)


def translate_errors(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """A value the database refuses is a 400 with a code, never a 500."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except exc.IntegrityError as error:
            constraint = getattr(getattr(error.orig, "diag", None), "constraint_name", None)
            if constraint == BODY_CHECK:
                raise TemplateBodyBlank() from None
            raise ValidationFailed(
                f"the template was refused (constraint {constraint or 'unknown'})"
            ) from None
        except exc.DataError as error:
            reason = str(error.orig).splitlines()[0] if error.orig else "invalid value"
            raise ValidationFailed(f"the template was refused: {reason}") from None

    return wrapper


# ---------------------------------------------------------------------------------------------
# Reads


async def list_page(
    conn: AsyncConnection,
    tenant_id: str,
    *,
    kind: str | None,
    channel: str | None,
    locale: str | None,
    status: str | None,
    after: tuple[str, str, str, int] | None,
    limit: int,
) -> Sequence[RowMapping]:
    """One page of overrides in (kind, channel, locale, id) order: keys that never change after
    creation, so an edit between two pages cannot move a row across the cursor; id is the final
    tie-break (R-ADMIN-10)."""
    query = select(*_COLUMNS).where(t.c.tenant_id == tenant_id)
    if kind is not None:
        query = query.where(t.c.kind == kind)
    if channel is not None:
        query = query.where(t.c.channel == channel)
    if locale is not None:
        query = query.where(t.c.locale == locale)
    if status is not None:
        query = query.where(t.c.status == status)
    if after is not None:
        query = query.where(tuple_(t.c.kind, t.c.channel, t.c.locale, t.c.id) > tuple_(*after))
    query = query.order_by(t.c.kind, t.c.channel, t.c.locale, t.c.id).limit(limit)
    return (await conn.execute(query)).mappings().all()


async def overrides_of_kinds(
    conn: AsyncConnection, tenant_id: str, kinds: Sequence[str]
) -> Sequence[RowMapping]:
    """The overrides (any status) of a page of registry kinds, for the kinds listing."""
    if not kinds:
        return []
    query = (
        select(t.c.public_id, t.c.kind, t.c.channel, t.c.locale, t.c.status, t.c.version)
        .where(t.c.tenant_id == tenant_id, t.c.kind.in_(kinds))
        .order_by(t.c.kind, t.c.channel, t.c.locale, t.c.id)
    )
    return (await conn.execute(query)).mappings().all()


async def published_overrides(
    conn: AsyncConnection, tenant_id: str, kind: str
) -> Sequence[RowMapping]:
    """The kind's published overrides: what the send path layers on the registry."""
    query = select(t.c.channel, t.c.locale, t.c.title, t.c.body, t.c.version).where(
        t.c.tenant_id == tenant_id, t.c.kind == kind, t.c.status == "published"
    )
    return (await conn.execute(query)).mappings().all()


async def find(conn: AsyncConnection, tenant_id: str, public_id: uuid.UUID) -> RowMapping | None:
    return await records.find_by_public_id(conn, t, _COLUMNS, tenant_id, public_id)


async def versions_page(
    conn: AsyncConnection,
    tenant_id: str,
    template_id: int,
    *,
    after: tuple[int, int] | None,
    limit: int,
) -> Sequence[RowMapping]:
    """Newest version first, id as the final tie-break (R-ADMIN-10)."""
    query = select(
        v.c.id, v.c.version, v.c.status, v.c.title, v.c.body, v.c.created_by, v.c.created_at
    ).where(v.c.tenant_id == tenant_id, v.c.template_id == template_id)
    if after is not None:
        query = query.where(tuple_(v.c.version, v.c.id) < tuple_(*after))
    query = query.order_by(v.c.version.desc(), v.c.id.desc()).limit(limit)
    return (await conn.execute(query)).mappings().all()


# ---------------------------------------------------------------------------------------------
# Writes


@translate_errors
async def insert_override(
    conn: AsyncConnection,
    tenant_id: str,
    *,
    kind: str,
    channel: str,
    locale: str,
    title: str | None,
    body: str,
    actor: str,
) -> RowMapping | None:
    """A new draft at version 1 (R-RENDER-43), or None when (kind, channel, locale) already has
    an override in this tenant. ON CONFLICT keeps the transaction usable for the 409."""
    query = (
        pg_insert(t)
        .values(
            tenant_id=tenant_id,
            kind=kind,
            channel=channel,
            locale=locale,
            status="draft",
            title=title,
            body=body,
            version=1,
            created_by=actor,
            updated_by=actor,
        )
        .on_conflict_do_nothing(index_elements=[t.c.tenant_id, t.c.kind, t.c.channel, t.c.locale])
        .returning(*_COLUMNS)
    )
    return (await conn.execute(query)).mappings().one_or_none()


@translate_errors
async def compare_and_set(
    conn: AsyncConnection,
    tenant_id: str,
    template_id: int,
    *,
    expected_version: int,
    changes: dict[str, Any],
    actor: str,
) -> RowMapping | None:
    """Apply `changes` only if the row is still at `expected_version`, incrementing it in the
    same statement (R-ADMIN-5, R-SCHEMA-41). None: the version moved (or the row is gone)."""
    query = (
        update(t)
        .where(
            t.c.tenant_id == tenant_id,
            t.c.id == template_id,
            t.c.version == expected_version,
        )
        .values(**changes, version=t.c.version + 1, updated_by=actor, updated_at=func.now())
        .returning(*_COLUMNS)
    )
    return (await conn.execute(query)).mappings().one_or_none()


async def delete_override(
    conn: AsyncConnection, tenant_id: str, template_id: int, *, expected_version: int | None
) -> RowMapping | None:
    """Remove the override (its version rows stay, detached). With `expected_version`, only if
    the row is still at it. None: nothing matched."""
    query = delete(t).where(t.c.tenant_id == tenant_id, t.c.id == template_id)
    if expected_version is not None:
        query = query.where(t.c.version == expected_version)
    return (await conn.execute(query.returning(*_COLUMNS))).mappings().one_or_none()


async def append_version(conn: AsyncConnection, row: RowMapping, *, tenant_id: str) -> None:
    """Record the override as it now stands; version rows are never updated (R-RENDER-40)."""
    await conn.execute(
        insert(v).values(
            tenant_id=tenant_id,
            template_id=row["id"],
            kind=row["kind"],
            channel=row["channel"],
            locale=row["locale"],
            version=row["version"],
            status=row["status"],
            title=row["title"],
            body=row["body"],
            created_by=row["updated_by"],
        )
    )
