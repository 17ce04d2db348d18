"""SQL of reminder schedules and their runs.

Every admin statement is scoped by tenant_id, so another tenant's schedule is simply not there.
Concurrency is the application's `version` column: each change is one `UPDATE … SET version =
version + 1 … WHERE version = :read RETURNING …`, and zero rows back is the conflict.

The scheduler's statements: `due_schedules` is the one cross-tenant read (ids, tenants and
instants only); `lock_occurrence` locks one schedule still at the occurrence it was seen at;
`advance` moves `next_run_at` past it as a compare-and-set on that same value (R-REMIND-5).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select, tuple_, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import records
from herald.db import schema as s

r = s.reminder_schedule
run = s.reminder_run

_COLUMNS = (
    r.c.id,
    r.c.tenant_id,
    r.c.public_id,
    r.c.name,
    r.c.kind,
    r.c.variables,
    r.c.channels,
    r.c.audience,
    r.c.timezone,
    r.c.local_time,
    r.c.weekdays,
    r.c.enabled,
    r.c.next_run_at,
    r.c.version,
    r.c.created_by,
    r.c.updated_by,
    r.c.created_at,
    r.c.updated_at,
)


now = records.now


# ---------------------------------------------------------------------------------------------
# Admin


async def insert_schedule(
    conn: AsyncConnection, tenant_id: str, values: Mapping[str, Any], *, actor: str
) -> RowMapping:
    return await records.insert_authored(conn, r, _COLUMNS, tenant_id, values, actor=actor)


async def find(conn: AsyncConnection, tenant_id: str, public_id: uuid.UUID) -> RowMapping | None:
    return await records.find_by_public_id(conn, r, _COLUMNS, tenant_id, public_id)


async def exists_named(conn: AsyncConnection, tenant_id: str, name: str) -> bool:
    query = select(r.c.id).where(r.c.tenant_id == tenant_id, r.c.name == name).limit(1)
    return (await conn.execute(query)).first() is not None


async def list_page(
    conn: AsyncConnection, tenant_id: str, *, after_id: int | None, limit: int
) -> Sequence[RowMapping]:
    """One page of a tenant's schedules in creation (id) order."""
    query = select(*_COLUMNS).where(r.c.tenant_id == tenant_id)
    if after_id is not None:
        query = query.where(r.c.id > after_id)
    query = query.order_by(r.c.id).limit(limit)
    return (await conn.execute(query)).mappings().all()


async def compare_and_set(
    conn: AsyncConnection,
    tenant_id: str,
    row_id: int,
    *,
    expected_version: int,
    changes: Mapping[str, Any],
    actor: str,
) -> RowMapping | None:
    stmt = (
        update(r)
        .where(r.c.tenant_id == tenant_id, r.c.id == row_id, r.c.version == expected_version)
        .values(version=r.c.version + 1, updated_by=actor, updated_at=func.now(), **dict(changes))
        .returning(*_COLUMNS)
    )
    return (await conn.execute(stmt)).mappings().one_or_none()


async def delete_schedule(
    conn: AsyncConnection, tenant_id: str, row_id: int, *, expected_version: int
) -> RowMapping | None:
    """Remove the schedule (its runs go with it) if it is still at the version read."""
    stmt = (
        delete(r)
        .where(r.c.tenant_id == tenant_id, r.c.id == row_id, r.c.version == expected_version)
        .returning(*_COLUMNS)
    )
    return (await conn.execute(stmt)).mappings().one_or_none()


async def runs_page(
    conn: AsyncConnection,
    tenant_id: str,
    schedule_id: int,
    *,
    before: tuple[datetime, int] | None,
    limit: int,
) -> Sequence[RowMapping]:
    """A schedule's runs, newest occurrence first (the (schedule_id, occurrence) key)."""
    query = select(
        run.c.id,
        run.c.occurrence,
        run.c.state,
        run.c.event_public_id,
        run.c.error_code,
        run.c.created_at,
    ).where(run.c.tenant_id == tenant_id, run.c.schedule_id == schedule_id)
    if before is not None:
        query = query.where(tuple_(run.c.occurrence, run.c.id) < tuple_(*before))
    query = query.order_by(run.c.occurrence.desc(), run.c.id.desc()).limit(limit)
    return (await conn.execute(query)).mappings().all()


# ---------------------------------------------------------------------------------------------
# The scheduler


async def due_schedules(conn: AsyncConnection, *, limit: int) -> Sequence[RowMapping]:
    """Enabled schedules whose next occurrence has come, oldest first (the partial due index).
    Across tenants, so it reads ids, tenants and instants only."""
    query = (
        select(r.c.id, r.c.tenant_id, r.c.next_run_at)
        .where(r.c.enabled, r.c.next_run_at.is_not(None), r.c.next_run_at <= func.now())
        .order_by(r.c.next_run_at, r.c.id)
        .limit(limit)
    )
    return (await conn.execute(query)).mappings().all()


async def lock_occurrence(
    conn: AsyncConnection, tenant_id: str, row_id: int, claimed: datetime
) -> RowMapping | None:
    """Lock the schedule if it is still enabled and still at `claimed`; None if another
    scheduler holds it (SKIP LOCKED) or has already moved it on. Also answers `now()`."""
    query = (
        select(*_COLUMNS, func.now().label("now"))
        .where(
            r.c.tenant_id == tenant_id,
            r.c.id == row_id,
            r.c.enabled,
            r.c.next_run_at == claimed,
        )
        .with_for_update(skip_locked=True)
    )
    return (await conn.execute(query)).mappings().one_or_none()


async def advance(
    conn: AsyncConnection, tenant_id: str, row_id: int, *, claimed: datetime, next_run_at: datetime
) -> bool:
    """Move the boundary past the claimed occurrence: a compare-and-set on `claimed`, so the
    occurrence is taken exactly once; `version` is left alone (an operator's edit in flight is
    not a conflict with the scheduler)."""
    stmt = (
        update(r)
        .where(r.c.tenant_id == tenant_id, r.c.id == row_id, r.c.next_run_at == claimed)
        .values(next_run_at=next_run_at)
    )
    return (await conn.execute(stmt)).rowcount == 1


async def insert_runs(
    conn: AsyncConnection, tenant_id: str, schedule_id: int, runs: Sequence[Mapping[str, Any]]
) -> None:
    """One row per occurrence dealt with; an occurrence already recorded keeps its row."""
    if not runs:
        return
    stmt = (
        pg_insert(run)
        .values([{"tenant_id": tenant_id, "schedule_id": schedule_id, **row} for row in runs])
        .on_conflict_do_nothing(index_elements=[run.c.schedule_id, run.c.occurrence])
    )
    await conn.execute(stmt)
