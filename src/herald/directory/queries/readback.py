"""SQL of the import's read-back: what is stored now, so an unchanged line writes nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import (
    select,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import schema as s
from herald.directory.queries.records import SQL, PersonRow, translate_errors


@dataclass(frozen=True)
class StoredPerson:
    row: PersonRow
    roles: frozenset[str]


@translate_errors
async def stored_people(
    conn: AsyncConnection, tenant_id: str, external_ids: Sequence[str]
) -> dict[str, StoredPerson]:
    """The live people among `external_ids`, with their columns and role codes (two queries)."""
    if not external_ids:
        return {}
    rows = (
        await conn.execute(
            SQL["stored_people"], {"tenant_id": tenant_id, "external_ids": list(external_ids)}
        )
    ).all()
    codes: dict[int, set[str]] = {row[0]: set() for row in rows}
    if rows:
        granted = await conn.execute(
            SQL["stored_person_roles"], {"tenant_id": tenant_id, "person_ids": list(codes)}
        )
        for person_id, code in granted:
            codes[person_id].add(code)
    # Rows are (id, then the PersonRow columns in their order): positional, for speed at size.
    return {
        row[1]: StoredPerson(row=PersonRow(*row[1:]), roles=frozenset(codes[row[0]]))
        for row in rows
    }


@dataclass(frozen=True)
class StoredRole:
    name: str
    scope_kind: str
    permissions: tuple[str, ...]
    is_superadmin: bool


@translate_errors
async def stored_roles(
    conn: AsyncConnection, tenant_id: str, codes: Sequence[str]
) -> dict[str, StoredRole]:
    if not codes:
        return {}
    r = s.role
    rows = await conn.execute(
        select(r.c.code, r.c.name, r.c.scope_kind, r.c.permissions, r.c.is_superadmin).where(
            r.c.tenant_id == tenant_id, r.c.code.in_(list(codes))
        )
    )
    return {
        row.code: StoredRole(
            name=row.name,
            scope_kind=row.scope_kind,
            permissions=tuple(row.permissions),
            is_superadmin=row.is_superadmin,
        )
        for row in rows
    }


@translate_errors
async def stored_groups(
    conn: AsyncConnection, tenant_id: str, external_ids: Sequence[str]
) -> dict[str, tuple[str, str]]:
    """(name, kind) of the live groups among `external_ids`."""
    if not external_ids:
        return {}
    g = s.person_group
    rows = await conn.execute(
        select(g.c.external_id, g.c.name, g.c.kind).where(
            g.c.tenant_id == tenant_id,
            g.c.external_id.in_(list(external_ids)),
            g.c.deleted_at.is_(None),
        )
    )
    return {row.external_id: (row.name, row.kind) for row in rows}


@translate_errors
async def live_memberships(
    conn: AsyncConnection, tenant_id: str, pairs: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], str]:
    """Member role of each live (group external id, person external id) pair among `pairs`."""
    if not pairs:
        return {}
    m, g, p = s.group_membership, s.person_group, s.person
    rows = await conn.execute(
        select(
            g.c.external_id.label("group_eid"), p.c.external_id.label("person_eid"), m.c.member_role
        )
        .select_from(m.join(g, g.c.id == m.c.group_id).join(p, p.c.id == m.c.person_id))
        .where(
            m.c.tenant_id == tenant_id,
            m.c.deleted_at.is_(None),
            g.c.deleted_at.is_(None),
            p.c.deleted_at.is_(None),
            g.c.external_id.in_(sorted({group for group, _ in pairs})),
            p.c.external_id.in_(sorted({person for _, person in pairs})),
        )
    )
    wanted = set(pairs)
    found = {(row.group_eid, row.person_eid): row.member_role for row in rows}
    return {pair: role for pair, role in found.items() if pair in wanted}


@translate_errors
async def live_guardianships(
    conn: AsyncConnection, tenant_id: str, pairs: Sequence[tuple[str, str]]
) -> set[tuple[str, str]]:
    """The live (student external id, guardian external id) pairs among `pairs`."""
    if not pairs:
        return set()
    gs = s.guardianship
    student, guardian = s.person.alias("student"), s.person.alias("guardian")
    rows = await conn.execute(
        select(
            student.c.external_id.label("student_eid"), guardian.c.external_id.label("guardian_eid")
        )
        .select_from(
            gs.join(student, student.c.id == gs.c.student_id).join(
                guardian, guardian.c.id == gs.c.guardian_id
            )
        )
        .where(
            gs.c.tenant_id == tenant_id,
            gs.c.deleted_at.is_(None),
            student.c.deleted_at.is_(None),
            guardian.c.deleted_at.is_(None),
            student.c.external_id.in_(sorted({st for st, _ in pairs})),
            guardian.c.external_id.in_(sorted({gd for _, gd in pairs})),
        )
    )
    wanted = set(pairs)
    return {(row.student_eid, row.guardian_eid) for row in rows} & wanted
