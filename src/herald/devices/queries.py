"""SQL of the devices stage: notification_push_token, always keyed on (tenant, person).

Every write names the caller's own person id, taken from the verified token; the routes need no
permission, so these predicates are the only access control there is (R-DEVICE-11).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import schema as s

t = s.notification_push_token


@dataclass(frozen=True)
class ActiveToken:
    id: int
    public_id: UUID
    person_id: int


@dataclass(frozen=True)
class DeviceRow:
    public_id: UUID
    platform: str
    created_at: datetime
    last_used_at: datetime


async def lock_person(conn: AsyncConnection, tenant_id: str, person_id: int) -> bool:
    """Serialise one person's registrations, so the cap is counted by one transaction at a time.

    FOR NO KEY UPDATE conflicts with itself but not with the KEY SHARE locks that foreign-key
    checks take, so fan-out inserting this person's recipients is not held up. False when the
    person is gone (deleted since the token was checked).
    """
    stmt = (
        select(s.person.c.id)
        .where(
            s.person.c.id == person_id,
            s.person.c.tenant_id == tenant_id,
            s.person.c.deleted_at.is_(None),
        )
        .with_for_update(key_share=True)
    )
    return (await conn.execute(stmt)).first() is not None


async def find_active_token(
    conn: AsyncConnection, tenant_id: str, token: str
) -> ActiveToken | None:
    """The live row holding `token` in the tenant, locked until the transaction ends.

    Under READ COMMITTED a row another transaction is invalidating is re-checked once that
    transaction commits, and dropped from the answer if it is no longer active.
    """
    stmt = (
        select(t.c.id, t.c.public_id, t.c.person_id)
        .where(t.c.tenant_id == tenant_id, t.c.token == token, t.c.is_active)
        .with_for_update()
    )
    row = (await conn.execute(stmt)).first()
    return ActiveToken(row.id, row.public_id, row.person_id) if row else None


async def touch(
    conn: AsyncConnection, token_id: int, platform: str, keys: tuple[str, str] | None
) -> tuple[UUID, str]:
    """R-DEVICE-7: the same person re-registering the same token only refreshes the row."""
    p256dh, auth = keys or (None, None)
    stmt = (
        update(t)
        .where(t.c.id == token_id)
        .values(
            last_used_at=func.now(), platform=platform, webpush_p256dh=p256dh, webpush_auth=auth
        )
        .returning(t.c.public_id, t.c.platform)
    )
    row = (await conn.execute(stmt)).one()
    return row.public_id, row.platform


async def count_active(conn: AsyncConnection, tenant_id: str, person_id: int) -> int:
    stmt = (
        select(func.count())
        .select_from(t)
        .where(t.c.tenant_id == tenant_id, t.c.person_id == person_id, t.c.is_active)
    )
    return int((await conn.execute(stmt)).scalar_one())


async def invalidate(conn: AsyncConnection, token_id: int, reason: str) -> None:
    """Deactivate a row, keeping it as history (R-DEVICE-3); all three columns move together so
    the biconditional CHECKs hold (R-SCHEMA-38)."""
    stmt = (
        update(t)
        .where(t.c.id == token_id, t.c.is_active)
        .values(is_active=False, invalidated_at=func.now(), invalidation_reason=reason)
    )
    await conn.execute(stmt)


async def insert_active(
    conn: AsyncConnection,
    tenant_id: str,
    person_id: int,
    token: str,
    platform: str,
    keys: tuple[str, str] | None = None,
) -> tuple[UUID, str] | None:
    """Insert a fresh live row; None when a concurrent registration holds the token by now.

    ON CONFLICT on the partial unique (R-SCHEMA-37) waits for a concurrent insert of the same
    token and, if it committed, does nothing instead of aborting the transaction with a
    UniqueViolation, so the caller can look again and decide.
    """
    stmt = (
        insert(t)
        .values(
            tenant_id=tenant_id,
            person_id=person_id,
            token=token,
            platform=platform,
            webpush_p256dh=(keys or (None, None))[0],
            webpush_auth=(keys or (None, None))[1],
        )
        .on_conflict_do_nothing(
            index_elements=[t.c.tenant_id, t.c.token], index_where=t.c.is_active
        )
        .returning(t.c.public_id, t.c.platform)
    )
    row = (await conn.execute(stmt)).first()
    return (row.public_id, row.platform) if row else None


async def list_active(conn: AsyncConnection, tenant_id: str, person_id: int) -> list[DeviceRow]:
    """The person's live devices, oldest first. Bounded by the per-person cap, so not paged."""
    stmt = (
        select(t.c.public_id, t.c.platform, t.c.created_at, t.c.last_used_at)
        .where(t.c.tenant_id == tenant_id, t.c.person_id == person_id, t.c.is_active)
        .order_by(t.c.created_at, t.c.id)
    )
    result = await conn.execute(stmt)
    return [DeviceRow(r.public_id, r.platform, r.created_at, r.last_used_at) for r in result]


async def invalidate_own(
    conn: AsyncConnection, tenant_id: str, person_id: int, public_id: UUID, reason: str
) -> bool:
    """Deactivate one of the person's own live devices; False when no such row is theirs."""
    stmt = (
        update(t)
        .where(
            t.c.public_id == public_id,
            t.c.tenant_id == tenant_id,
            t.c.person_id == person_id,
            t.c.is_active,
        )
        .values(is_active=False, invalidated_at=func.now(), invalidation_reason=reason)
        .returning(t.c.id)
    )
    return (await conn.execute(stmt)).first() is not None
