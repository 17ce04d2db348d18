"""SQL of the kinds admin: a tenant's escalation overrides and their versions.

A change is one upsert of the override row (its row lock serialises two operators) that bumps
`version`, then one insert of the version row with that version. `delays` NULL is a revert.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import schema as s

o = s.notification_escalation_override
v = s.notification_escalation_override_version


async def overrides(
    conn: AsyncConnection, tenant_id: str, kinds: Sequence[str]
) -> dict[str, dict[str, Any]]:
    if not kinds:
        return {}
    stmt = select(o.c.kind, o.c.delays, o.c.version, o.c.updated_at, o.c.updated_by).where(
        o.c.tenant_id == tenant_id, o.c.kind.in_(list(kinds))
    )
    return {row["kind"]: dict(row) for row in (await conn.execute(stmt)).mappings()}


async def write(
    conn: AsyncConnection, tenant_id: str, kind: str, delays: list[int] | None, actor: str
) -> dict[str, Any]:
    """Set (or, with None, revert) the override; returns the row as written."""
    values = insert(o).values(
        tenant_id=tenant_id, kind=kind, delays=delays, version=1, updated_by=actor
    )
    stmt = values.on_conflict_do_update(
        index_elements=[o.c.tenant_id, o.c.kind],
        set_={
            "delays": values.excluded.delays,
            "version": o.c.version + 1,
            "updated_by": values.excluded.updated_by,
            "updated_at": values.excluded.updated_at,
        },
    ).returning(o.c.kind, o.c.delays, o.c.version, o.c.updated_at, o.c.updated_by)
    row = dict((await conn.execute(stmt)).mappings().one())
    await conn.execute(
        insert(v).values(
            tenant_id=tenant_id, kind=kind, version=row["version"], delays=delays, actor=actor
        )
    )
    return row


async def lock_current(conn: AsyncConnection, tenant_id: str, kind: str) -> dict[str, Any] | None:
    """The override row under its lock, if the tenant has one in force."""
    stmt = (
        select(o.c.delays, o.c.version)
        .where(o.c.tenant_id == tenant_id, o.c.kind == kind, o.c.delays.is_not(None))
        .with_for_update()
    )
    row = (await conn.execute(stmt)).mappings().first()
    return dict(row) if row is not None else None
