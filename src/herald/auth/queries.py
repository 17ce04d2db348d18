"""SQL of the access stage: API keys and the caller's active role."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Row,
    Table,
    Text,
    bindparam,
    func,
    insert,
    select,
    true,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import schema as s
from herald.db import tenancy
from herald.db.compiled import Compiled, Driver


@dataclass(frozen=True)
class ApiKeyRow:
    """What may be shown of a key: never the key, never its hash."""

    public_id: uuid.UUID
    name: str
    prefix: str
    scopes: list[str]
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


async def insert_api_key(
    conn: AsyncConnection,
    *,
    tenant_id: str,
    name: str,
    prefix: str,
    key_hash: str,
    scopes: Sequence[str],
) -> None:
    await conn.execute(
        insert(s.api_key).values(
            tenant_id=tenant_id, name=name, prefix=prefix, key_hash=key_hash, scopes=list(scopes)
        )
    )


async def find_api_key(
    conn: AsyncConnection, key_hash: str
) -> tuple[str, list[str], uuid.UUID] | None:
    """Return (tenant_id, scopes, public id) of a live key, touching last_used_at."""
    row = (
        await conn.execute(
            update(s.api_key)
            .where(s.api_key.c.key_hash == key_hash, s.api_key.c.revoked_at.is_(None))
            .values(last_used_at=func.now())
            .returning(s.api_key.c.tenant_id, s.api_key.c.scopes, s.api_key.c.public_id)
        )
    ).first()
    return (row.tenant_id, list(row.scopes), row.public_id) if row else None


@functools.cache
def _actor_lookup(enter_tenant: bool) -> Compiled:
    """(person id, active role id, role scope kind, holds that role) of a live person, the role
    looked up by code in the tenant. With `enter_tenant` the same statement also switches the
    transaction to herald_app under TENANT (tenancy.enter_tenant's set_config calls), so the
    liveness check and the tenant entry cost one round trip. The lookup itself is planned before
    the switch, under the connecting user's all-tenants policy, and names its tenant explicitly.
    Built and compiled once per process."""
    tenant = bindparam("tenant_id", type_=Text)
    role_sq = (
        select(s.role.c.id, s.role.c.scope_kind)
        .where(s.role.c.tenant_id == tenant, s.role.c.code == bindparam("role_code", type_=Text))
        .subquery()
    )
    holds = (
        select(s.person_role.c.person_id)
        .where(s.person_role.c.person_id == s.person.c.id, s.person_role.c.role_id == role_sq.c.id)
        .exists()
    )
    entering = tenancy.enter_columns(tenant, tenancy.INBOX_PLANNER_SETTINGS) if enter_tenant else []
    stmt = (
        select(
            s.person.c.id,
            role_sq.c.id.label("role_id"),
            role_sq.c.scope_kind,
            holds.label("holds"),
            *entering,
        )
        .select_from(s.person.outerjoin(role_sq, true()))
        .where(
            s.person.c.tenant_id == tenant,
            s.person.c.external_id == bindparam("external_id", type_=Text),
            s.person.c.deleted_at.is_(None),
        )
    )
    return Compiled.of(stmt)


async def find_actor(
    conn: AsyncConnection | Driver,
    tenant_id: str,
    external_id: str,
    role_code: str | None,
    *,
    enter_tenant: bool = False,
) -> tuple[int, int | None, str | None, bool] | None:
    """Return (person id, active role id, role scope kind, holds that role) for a live person.

    The role is looked up by code in the tenant; `holds` says whether the person still holds it.
    With `enter_tenant`, the transaction is herald_app under `tenant_id` afterwards when the
    person was found (an unknown person is refused anyway, and its transaction rolled back).
    """
    params = {"tenant_id": tenant_id, "external_id": external_id, "role_code": role_code}
    rows = await _actor_lookup(enter_tenant).rows(conn, params)
    if not rows:
        return None
    row = rows[0]
    return row[0], row[1], row[2], bool(row[3])


async def api_key_public_id(conn: AsyncConnection, key_hash: str) -> str | None:
    row = (
        await conn.execute(select(s.api_key.c.public_id).where(s.api_key.c.key_hash == key_hash))
    ).first()
    return str(row.public_id) if row else None


async def role_grants(conn: AsyncConnection, role_id: int) -> tuple[list[str], bool]:
    """(permissions, is_superadmin) of a role."""
    row = (
        await conn.execute(
            select(s.role.c.permissions, s.role.c.is_superadmin).where(s.role.c.id == role_id)
        )
    ).one()
    return list(row.permissions), bool(row.is_superadmin)


async def list_api_keys(conn: AsyncConnection, tenant_id: str) -> list[ApiKeyRow]:
    """Every key of the tenant, live and revoked, oldest first; never the hash."""
    k = s.api_key
    rows = await conn.execute(
        select(*_shown(k)).where(k.c.tenant_id == tenant_id).order_by(k.c.created_at, k.c.id)
    )
    return [_key_row(row) for row in rows]


async def revoke_api_keys(
    conn: AsyncConnection, tenant_id: str, *, public_id: uuid.UUID | None, prefix: str | None
) -> list[ApiKeyRow]:
    """Revoke the tenant's live keys with this public id or this prefix; returns what it revoked.

    The caller refuses a prefix that matches more than one key before calling (see
    matching_live_keys), so one statement both decides and revokes."""
    k = s.api_key
    match = k.c.public_id == public_id if public_id is not None else k.c.prefix == prefix
    rows = await conn.execute(
        update(k)
        .where(k.c.tenant_id == tenant_id, k.c.revoked_at.is_(None), match)
        .values(revoked_at=func.now())
        .returning(*_shown(k))
    )
    return [_key_row(row) for row in rows]


async def count_live_keys_with_prefix(conn: AsyncConnection, tenant_id: str, prefix: str) -> int:
    k = s.api_key
    return int(
        (
            await conn.execute(
                select(func.count()).where(
                    k.c.tenant_id == tenant_id, k.c.prefix == prefix, k.c.revoked_at.is_(None)
                )
            )
        ).scalar_one()
    )


def _shown(k: Table) -> tuple[ColumnElement[Any], ...]:
    return (
        k.c.public_id,
        k.c.name,
        k.c.prefix,
        k.c.scopes,
        k.c.created_at,
        k.c.last_used_at,
        k.c.revoked_at,
    )


def _key_row(row: Row[Any]) -> ApiKeyRow:
    return ApiKeyRow(
        public_id=row.public_id,
        name=row.name,
        prefix=row.prefix,
        scopes=list(row.scopes),
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
    )
