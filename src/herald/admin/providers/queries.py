"""SQL of the provider-account admin. Every statement runs under the caller's tenant (row-level
security), and each change also notifies `herald_provider_account` with the tenant's id, which
PostgreSQL delivers on commit: the workers' provider caches drop that tenant's entries at once
(herald.delivery.accounts)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.channels.accounts import NOTIFY_CHANNEL
from herald.db import schema as s

a = s.notification_provider_account

_COLUMNS = (
    a.c.provider,
    a.c.settings,
    a.c.secret_ciphertext,
    a.c.version,
    a.c.updated_at,
    a.c.updated_by,
)
_NOTIFY = text(f"SELECT pg_notify('{NOTIFY_CHANNEL}', :tenant)")


async def list_accounts(conn: AsyncConnection, tenant_id: str) -> list[RowMapping]:
    rows = await conn.execute(
        select(*_COLUMNS).where(a.c.tenant_id == tenant_id).order_by(a.c.provider)
    )
    return list(rows.mappings())


async def get_account(
    conn: AsyncConnection, tenant_id: str, provider: str, *, lock: bool = False
) -> RowMapping | None:
    statement = select(*_COLUMNS).where(a.c.tenant_id == tenant_id, a.c.provider == provider)
    if lock:
        statement = statement.with_for_update()
    return (await conn.execute(statement)).mappings().first()


async def insert_account(
    conn: AsyncConnection, tenant_id: str, provider: str, values: dict[str, Any]
) -> RowMapping | None:
    """None when a concurrent request created it first (the caller reports a conflict)."""
    statement = (
        pg_insert(a)
        .values(tenant_id=tenant_id, provider=provider, **values)
        .on_conflict_do_nothing(index_elements=[a.c.tenant_id, a.c.provider])
        .returning(*_COLUMNS)
    )
    row = (await conn.execute(statement)).mappings().first()
    if row is not None:
        await conn.execute(_NOTIFY, {"tenant": tenant_id})
    return row


async def update_account(
    conn: AsyncConnection, tenant_id: str, provider: str, version: int, values: dict[str, Any]
) -> RowMapping | None:
    """Compare-and-set on `version`; None when the row moved on."""
    row = (
        (
            await conn.execute(
                update(a)
                .where(a.c.tenant_id == tenant_id, a.c.provider == provider, a.c.version == version)
                .values(version=a.c.version + 1, updated_at=func.now(), **values)
                .returning(*_COLUMNS)
            )
        )
        .mappings()
        .first()
    )
    if row is not None:
        await conn.execute(_NOTIFY, {"tenant": tenant_id})
    return row


async def delete_account(conn: AsyncConnection, tenant_id: str, provider: str) -> bool:
    result = await conn.execute(
        delete(a).where(a.c.tenant_id == tenant_id, a.c.provider == provider).returning(a.c.id)
    )
    gone = result.first() is not None
    if gone:
        await conn.execute(_NOTIFY, {"tenant": tenant_id})
    return gone


async def rename_actor(conn: AsyncConnection, tenant_id: str, before: str, after: str) -> int:
    """Erasure: the accounts a person last changed name them by an erased label instead."""
    result = await conn.execute(
        update(a)
        .where(a.c.tenant_id == tenant_id, a.c.updated_by == before)
        .values(updated_by=after)
        .returning(a.c.id)
    )
    return len(result.all())
