"""Statements every tenant-owned, operator-edited table shares (broadcasts, reminder schedules,
template overrides): the database's clock, the insert stamped with its author, the lookup by
public id inside one tenant.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Table, func, insert, select
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection


async def now(conn: AsyncConnection) -> datetime:
    """The database's clock: every scheduler and API process agrees on it."""
    moment: datetime = (await conn.execute(select(func.now()))).scalar_one()
    return moment


async def insert_authored(
    conn: AsyncConnection,
    table: Table,
    columns: Sequence[ColumnElement[Any]],
    tenant_id: str,
    values: Mapping[str, Any],
    *,
    actor: str,
) -> RowMapping:
    """One new row of `table` in the tenant, created and last updated by `actor`."""
    stmt = (
        insert(table)
        .values(tenant_id=tenant_id, created_by=actor, updated_by=actor, **values)
        .returning(*columns)
    )
    return (await conn.execute(stmt)).mappings().one()


async def find_by_public_id(
    conn: AsyncConnection,
    table: Table,
    columns: Sequence[ColumnElement[Any]],
    tenant_id: str,
    public_id: uuid.UUID,
) -> RowMapping | None:
    """The tenant's row of `table` with that public id; another tenant's row is never found."""
    query = select(*columns).where(table.c.tenant_id == tenant_id, table.c.public_id == public_id)
    return (await conn.execute(query)).mappings().one_or_none()
