"""SQL of the directory's own records: people, roles, groups, memberships, guardianships.

Every statement is scoped by tenant_id; rows that link two directory objects (memberships,
guardianships, role grants) are written only with ids this module resolved inside the tenant.
Deletes are soft (`deleted_at`), so audience queries decide liveness by that column (R-AUD-6,
R-AUD-7) and history keeps its people; an upsert revives a soft-deleted row.

Driver errors are translated here: a value the database refuses becomes
DirectoryValueInvalid (400), never a 500.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, ParamSpec, TypeVar

from sqlalchemy import (
    Boolean,
    exc,
    func,
    literal_column,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import Label

from herald.db import schema as s
from herald.db import sqlfile
from herald.errors import DirectoryValueInvalid

# The long, set-based statements, each with what it guarantees.
SQL = sqlfile.load(Path(__file__).with_name("directory.sql"))

P = ParamSpec("P")
R = TypeVar("R")

# In `INSERT … ON CONFLICT DO UPDATE … RETURNING`, a freshly inserted row has xmax = 0 and an
# updated one carries the updating transaction's id: the one-statement way to tell them apart.
_INSERTED: Final[Label[bool]] = literal_column("xmax = 0", Boolean).label("created")


def translate_errors(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Turn a value the database refuses (CHECK, length, NUL byte, …) into a 400 with a code."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except exc.IntegrityError as error:
            constraint = getattr(getattr(error.orig, "diag", None), "constraint_name", None)
            raise DirectoryValueInvalid(
                f"the directory refused the value (constraint {constraint or 'unknown'})"
            ) from None
        except exc.DataError as error:
            # The first line names the problem ("value too long …") without echoing the row.
            reason = str(error.orig).splitlines()[0] if error.orig else "invalid value"
            raise DirectoryValueInvalid(f"the directory refused a value: {reason}") from None

    return wrapper


# ---------------------------------------------------------------------------------------------
# People


@dataclass(frozen=True)
class PersonRow:
    """The columns a host sets on a person; everything else is Herald's."""

    external_id: str
    full_name: str | None
    email: str | None
    phone: str | None
    locale: str
    timezone: str | None
    country: str | None
    status: str
    telegram_chat_id: str | None
    slack_id: str | None = None
    teams_webhook_url: str | None = None


@dataclass(frozen=True)
class UpsertedPerson:
    id: int
    public_id: uuid.UUID
    external_id: str
    created: bool


_PERSON_COLUMNS: Final = (
    "external_id",
    "full_name",
    "email",
    "phone",
    "locale",
    "timezone",
    "country",
    "status",
    "telegram_chat_id",
    "slack_id",
    "teams_webhook_url",
)


@translate_errors
async def upsert_people(
    conn: AsyncConnection, tenant_id: str, rows: Sequence[PersonRow]
) -> list[UpsertedPerson]:
    """Insert or update (and revive) people by (tenant, external_id); external ids must be unique."""
    if not rows:
        return []
    params: dict[str, object] = {"tenant_id": tenant_id}
    for column in _PERSON_COLUMNS:
        params[column] = [getattr(row, column) for row in rows]
    result = await conn.execute(SQL["upsert_people"], params)
    return [
        UpsertedPerson(
            id=r.id, public_id=r.public_id, external_id=r.external_id, created=bool(r.created)
        )
        for r in result
    ]


@translate_errors
async def role_ids_by_code(
    conn: AsyncConnection, tenant_id: str, codes: Sequence[str]
) -> dict[str, int]:
    """Map the tenant's role codes to ids in one query; unknown codes are simply absent."""
    if not codes:
        return {}
    rows = await conn.execute(
        select(s.role.c.code, s.role.c.id).where(
            s.role.c.tenant_id == tenant_id, s.role.c.code.in_(sorted(set(codes)))
        )
    )
    return {r.code: r.id for r in rows}


@translate_errors
async def replace_person_roles(
    conn: AsyncConnection,
    tenant_id: str,
    person_ids: Sequence[int],
    grants: Sequence[tuple[int, int]],
) -> None:
    """Make the role set of each of `person_ids` exactly its (person_id, role_id) `grants`."""
    if not person_ids:
        return
    params = {
        "tenant_id": tenant_id,
        "person_ids": list(person_ids),
        "grant_person": [p for p, _ in grants],
        "grant_role": [r for _, r in grants],
    }
    await conn.execute(SQL["drop_other_roles"], params)
    if grants:
        await conn.execute(SQL["grant_roles"], params)


@translate_errors
async def soft_delete_person(conn: AsyncConnection, tenant_id: str, external_id: str) -> bool:
    """Mark a person deleted (keeping the first deletion time); False when there is none."""
    row = (
        await conn.execute(
            update(s.person)
            .where(s.person.c.tenant_id == tenant_id, s.person.c.external_id == external_id)
            .values(
                deleted_at=func.coalesce(s.person.c.deleted_at, func.now()),
                updated_at=func.now(),
            )
            .returning(s.person.c.id)
        )
    ).first()
    return row is not None


@translate_errors
async def live_person_ids(
    conn: AsyncConnection, tenant_id: str, external_ids: Sequence[str]
) -> dict[str, int]:
    """Ids of the live (not soft-deleted) people among `external_ids`."""
    rows = await conn.execute(
        select(s.person.c.external_id, s.person.c.id).where(
            s.person.c.tenant_id == tenant_id,
            s.person.c.external_id.in_(list(external_ids)),
            s.person.c.deleted_at.is_(None),
        )
    )
    return {r.external_id: r.id for r in rows}


# ---------------------------------------------------------------------------------------------
# Roles


@translate_errors
async def upsert_role(
    conn: AsyncConnection,
    tenant_id: str,
    code: str,
    *,
    name: str,
    scope_kind: str,
    permissions: Sequence[str],
    is_superadmin: bool,
) -> tuple[uuid.UUID, bool]:
    """Insert or update a role by (tenant, code); returns (public id, created)."""
    stmt = insert(s.role).values(
        tenant_id=tenant_id,
        code=code,
        name=name,
        scope_kind=scope_kind,
        permissions=list(permissions),
        is_superadmin=is_superadmin,
    )
    upsert = stmt.on_conflict_do_update(
        index_elements=[s.role.c.tenant_id, s.role.c.code],
        set_={
            "name": stmt.excluded.name,
            "scope_kind": stmt.excluded.scope_kind,
            "permissions": stmt.excluded.permissions,
            "is_superadmin": stmt.excluded.is_superadmin,
            "updated_at": func.now(),
        },
    ).returning(s.role.c.public_id, _INSERTED)
    row = (await conn.execute(upsert)).one()
    return row.public_id, bool(row.created)


# ---------------------------------------------------------------------------------------------
# Groups


@translate_errors
async def upsert_group(
    conn: AsyncConnection, tenant_id: str, external_id: str, *, name: str, kind: str
) -> tuple[uuid.UUID, bool]:
    """Insert or update (and revive) a group; returns (public id, created)."""
    stmt = insert(s.person_group).values(
        tenant_id=tenant_id, external_id=external_id, name=name, kind=kind
    )
    upsert = stmt.on_conflict_do_update(
        index_elements=[s.person_group.c.tenant_id, s.person_group.c.external_id],
        set_={
            "name": stmt.excluded.name,
            "kind": stmt.excluded.kind,
            "updated_at": func.now(),
            "deleted_at": None,
        },
    ).returning(s.person_group.c.public_id, _INSERTED)
    row = (await conn.execute(upsert)).one()
    return row.public_id, bool(row.created)


@translate_errors
async def soft_delete_group(conn: AsyncConnection, tenant_id: str, external_id: str) -> bool:
    """Mark a group deleted (keeping the first deletion time); False when there is none."""
    g = s.person_group
    row = (
        await conn.execute(
            update(g)
            .where(g.c.tenant_id == tenant_id, g.c.external_id == external_id)
            .values(deleted_at=func.coalesce(g.c.deleted_at, func.now()), updated_at=func.now())
            .returning(g.c.id)
        )
    ).first()
    return row is not None


@translate_errors
async def live_group_id(conn: AsyncConnection, tenant_id: str, external_id: str) -> int | None:
    g = s.person_group
    return (
        await conn.execute(
            select(g.c.id).where(
                g.c.tenant_id == tenant_id,
                g.c.external_id == external_id,
                g.c.deleted_at.is_(None),
            )
        )
    ).scalar_one_or_none()


# ---------------------------------------------------------------------------------------------
# Memberships and guardianships (both keyed by two ids resolved in the tenant)


@translate_errors
async def upsert_membership(
    conn: AsyncConnection, tenant_id: str, group_id: int, person_id: int, member_role: str
) -> bool:
    """Insert or update (and revive) a membership; True when the row is new."""
    m = s.group_membership
    stmt = insert(m).values(
        tenant_id=tenant_id, group_id=group_id, person_id=person_id, member_role=member_role
    )
    upsert = stmt.on_conflict_do_update(
        index_elements=[m.c.group_id, m.c.person_id],
        set_={"member_role": stmt.excluded.member_role, "deleted_at": None},
    ).returning(_INSERTED)
    return bool((await conn.execute(upsert)).scalar_one())


@translate_errors
async def soft_delete_membership(
    conn: AsyncConnection, tenant_id: str, group_id: int, person_id: int
) -> bool:
    """Mark a membership deleted; False when there is no such row."""
    m = s.group_membership
    row = (
        await conn.execute(
            update(m)
            .where(m.c.tenant_id == tenant_id, m.c.group_id == group_id, m.c.person_id == person_id)
            .values(deleted_at=func.coalesce(m.c.deleted_at, func.now()))
            .returning(m.c.group_id)
        )
    ).first()
    return row is not None


@translate_errors
async def upsert_guardianship(
    conn: AsyncConnection, tenant_id: str, student_id: int, guardian_id: int
) -> bool:
    """Insert or revive a guardianship; True when the row is new."""
    gs = s.guardianship
    stmt = insert(gs).values(tenant_id=tenant_id, student_id=student_id, guardian_id=guardian_id)
    upsert = stmt.on_conflict_do_update(
        index_elements=[gs.c.student_id, gs.c.guardian_id], set_={"deleted_at": None}
    ).returning(_INSERTED)
    return bool((await conn.execute(upsert)).scalar_one())


@translate_errors
async def soft_delete_guardianship(
    conn: AsyncConnection, tenant_id: str, student_id: int, guardian_id: int
) -> bool:
    """Mark a guardianship deleted; False when there is no such row."""
    gs = s.guardianship
    row = (
        await conn.execute(
            update(gs)
            .where(
                gs.c.tenant_id == tenant_id,
                gs.c.student_id == student_id,
                gs.c.guardian_id == guardian_id,
            )
            .values(deleted_at=func.coalesce(gs.c.deleted_at, func.now()))
            .returning(gs.c.student_id)
        )
    ).first()
    return row is not None


@translate_errors
async def live_group_ids(
    conn: AsyncConnection, tenant_id: str, external_ids: Sequence[str]
) -> dict[str, int]:
    """Ids of the live (not soft-deleted) groups among `external_ids`."""
    g = s.person_group
    rows = await conn.execute(
        select(g.c.external_id, g.c.id).where(
            g.c.tenant_id == tenant_id,
            g.c.external_id.in_(list(external_ids)),
            g.c.deleted_at.is_(None),
        )
    )
    return {r.external_id: r.id for r in rows}


@translate_errors
async def upsert_memberships(
    conn: AsyncConnection, tenant_id: str, rows: Sequence[tuple[int, int, str]]
) -> int:
    """upsert_membership for many (group id, person id, member role) rows in one statement, in
    key order (so overlapping batches lock alike); returns how many rows are new."""
    if not rows:
        return 0
    m = s.group_membership
    stmt = insert(m).values(
        [
            {"tenant_id": tenant_id, "group_id": g, "person_id": p, "member_role": role}
            for g, p, role in sorted(rows)
        ]
    )
    upsert = stmt.on_conflict_do_update(
        index_elements=[m.c.group_id, m.c.person_id],
        set_={"member_role": stmt.excluded.member_role, "deleted_at": None},
    ).returning(_INSERTED)
    return sum(1 for created in (await conn.execute(upsert)).scalars() if created)


@translate_errors
async def upsert_guardianships(
    conn: AsyncConnection, tenant_id: str, rows: Sequence[tuple[int, int]]
) -> int:
    """upsert_guardianship for many (student id, guardian id) rows in one statement, in key
    order; returns how many rows are new."""
    if not rows:
        return 0
    gs = s.guardianship
    stmt = insert(gs).values(
        [{"tenant_id": tenant_id, "student_id": st, "guardian_id": gd} for st, gd in sorted(rows)]
    )
    upsert = stmt.on_conflict_do_update(
        index_elements=[gs.c.student_id, gs.c.guardian_id], set_={"deleted_at": None}
    ).returning(_INSERTED)
    return sum(1 for created in (await conn.execute(upsert)).scalars() if created)
