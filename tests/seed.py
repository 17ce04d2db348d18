"""Direct-insert seeding for integration tests that are not about the directory itself."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import schema as s


@dataclass(frozen=True)
class Person:
    id: int
    public_id: uuid.UUID
    external_id: str


async def person(
    conn: AsyncConnection,
    tenant: str,
    external_id: str | None = None,
    *,
    full_name: str | None = "Test Person",
    locale: str = "en",
    status: str = "active",
    email: str | None = None,
    roles: list[int] | None = None,
) -> Person:
    external_id = external_id or f"p-{uuid.uuid4().hex[:8]}"
    row = (
        await conn.execute(
            insert(s.person)
            .values(
                tenant_id=tenant,
                external_id=external_id,
                full_name=full_name,
                locale=locale,
                status=status,
                email=email or f"{external_id}@example.com",
            )
            .returning(s.person.c.id, s.person.c.public_id)
        )
    ).one()
    for role_id in roles or []:
        await conn.execute(
            insert(s.person_role).values(tenant_id=tenant, person_id=row.id, role_id=role_id)
        )
    return Person(row.id, row.public_id, external_id)


async def role(conn: AsyncConnection, tenant: str, code: str, scope_kind: str) -> int:
    return int(
        (
            await conn.execute(
                insert(s.role)
                .values(tenant_id=tenant, code=code, name=code.title(), scope_kind=scope_kind)
                .returning(s.role.c.id)
            )
        ).scalar_one()
    )


async def group(conn: AsyncConnection, tenant: str, external_id: str) -> int:
    return int(
        (
            await conn.execute(
                insert(s.person_group)
                .values(tenant_id=tenant, external_id=external_id, name=external_id)
                .returning(s.person_group.c.id)
            )
        ).scalar_one()
    )


async def member(
    conn: AsyncConnection, tenant: str, group_id: int, person_id: int, role: str = "student"
) -> None:
    await conn.execute(
        insert(s.group_membership).values(
            tenant_id=tenant, group_id=group_id, person_id=person_id, member_role=role
        )
    )


async def guardian(conn: AsyncConnection, tenant: str, student_id: int, guardian_id: int) -> None:
    await conn.execute(
        insert(s.guardianship).values(
            tenant_id=tenant, student_id=student_id, guardian_id=guardian_id
        )
    )


async def push_token(
    conn: AsyncConnection,
    tenant: str,
    person_id: int,
    token: str,
    platform: str = "android",
    keys: tuple[str, str] | None = None,
) -> int:
    """A live device; for platform webpush `token` is the endpoint and `keys` (p256dh, auth)."""
    p256dh, auth = keys or (None, None)
    return int(
        (
            await conn.execute(
                insert(s.notification_push_token)
                .values(
                    tenant_id=tenant,
                    person_id=person_id,
                    token=token,
                    platform=platform,
                    webpush_p256dh=p256dh,
                    webpush_auth=auth,
                )
                .returning(s.notification_push_token.c.id)
            )
        ).scalar_one()
    )


async def event_row(conn: AsyncConnection, public_id: uuid.UUID) -> dict[str, object]:
    row = (
        await conn.execute(
            select(s.notification_event).where(s.notification_event.c.public_id == public_id)
        )
    ).one()
    return dict(row._mapping)


def event_month(event_id: Any) -> Any:
    """A recipient's partition key for a hand-written insert: its event's occurred_at (the key
    to the event is (id, occurred_at), herald.db.partitions)."""
    e = s.notification_event
    return select(e.c.occurred_at).where(e.c.id == event_id).scalar_subquery()


def recipient_month(recipient_id: Any) -> Any:
    """A delivery's partition key for a hand-written insert: its recipient's occurred_at (a
    delivery lives in its recipient's month, herald.db.partitions)."""
    r = s.notification_recipient
    return select(r.c.occurred_at).where(r.c.id == recipient_id).scalar_subquery()


def delivery_month(delivery_id: Any) -> Any:
    """An attempt's partition key for a hand-written insert: its delivery's occurred_at."""
    d = s.notification_delivery
    return select(d.c.occurred_at).where(d.c.id == delivery_id).scalar_subquery()
