"""SQL of the directory stage: people, roles, groups, memberships, guardianships.

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
    and_,
    cast,
    delete,
    exc,
    func,
    literal,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONPATH, insert
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ColumnElement, Label

from herald.db import schema as s
from herald.db import sqlfile
from herald.errors import DirectoryValueInvalid

# The long, set-based statements, each with what it guarantees.
SQL = sqlfile.load(Path(__file__).with_name("queries.sql"))

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


# ---------------------------------------------------------------------------------------------
# Erasure (R-ERASE-1..3): one transaction, the caller's.


@dataclass(frozen=True)
class ErasablePerson:
    id: int
    public_id: uuid.UUID


async def lock_person_for_erasure(
    conn: AsyncConnection, tenant_id: str, external_id: str
) -> ErasablePerson | None:
    """The person (live or soft-deleted), locked until the erasure commits; None when absent."""
    row = (
        await conn.execute(
            select(s.person.c.id, s.person.c.public_id)
            .where(s.person.c.tenant_id == tenant_id, s.person.c.external_id == external_id)
            .with_for_update()
        )
    ).first()
    return None if row is None else ErasablePerson(id=row.id, public_id=row.public_id)


async def scrub_deliveries_of_person(conn: AsyncConnection, person_id: int) -> int:
    """Null the masked address and the stored rendering on every delivery beneath the person's
    recipient rows (R-ERASE-2); returns how many deliveries that covered."""
    d, r = s.notification_delivery, s.notification_recipient
    result = await conn.execute(
        update(d)
        .where(
            d.c.recipient_id == r.c.id,
            r.c.user_id == person_id,
        )
        .values(destination_hint=None, rendered_title=None, rendered_body=None, rendered_hash=None)
    )
    return int(result.rowcount)


async def scrub_variables_of_events_for(
    conn: AsyncConnection, tenant_id: str, external_id: str
) -> int:
    """Empty the variables of the tenant's events addressed to this person alone — a `users`
    audience naming only them, or a compound of such members — and return how many changed.

    Only there are the variables theirs alone: an event to a group, a role, everyone, a segment
    or someone's guardians was received by others too, and its variables are the record of what
    those others were told; nothing in a variable says which values are about whom, so those
    events keep theirs. The audience itself keeps the external id (the host's own key for the
    person): it is what the event was, and it carries nothing the host does not already hold.
    """
    e = s.notification_event
    me = func.jsonb_build_array(external_id)
    user_ids = e.c.audience["userIds"]
    member_ids = func.jsonb_path_query_array(
        e.c.audience, cast(literal("$.any[*].userIds[*]"), JSONPATH)
    )
    only_me = or_(
        and_(
            e.c.audience["kind"].astext == "users",
            user_ids.op("<@")(me),
            user_ids.op("@>")(me),
        ),
        and_(
            e.c.audience["kind"].astext == "compound",
            ~func.jsonb_path_exists(
                e.c.audience, cast(literal('$.any[*] ? (@.kind != "users")'), JSONPATH)
            ),
            member_ids.op("<@")(me),
            member_ids.op("@>")(me),
        ),
    )
    result = await conn.execute(
        update(e)
        .where(e.c.tenant_id == tenant_id, only_me, e.c.variables != literal_column("'{}'::jsonb"))
        .values(variables=literal_column("'{}'::jsonb"))
    )
    return int(result.rowcount)


async def orphan_recipients_of_person(conn: AsyncConnection, person_id: int) -> int:
    """Detach the person's recipient rows, keeping them and their uuid snapshot (R-ERASE-1), and
    empty their per-recipient variables (the fan-out copies the person's name there, R-ERASE-3).
    user_id is nulled here rather than left to the foreign key's SET NULL, so the person's delete
    that follows finds nothing left to update."""
    r = s.notification_recipient
    result = await conn.execute(
        update(r)
        .where(r.c.user_id == person_id)
        .values(user_id=None, variables=literal_column("'{}'::jsonb"))
    )
    return int(result.rowcount)


def email_hash(email: ColumnElement[str]) -> ColumnElement[str]:
    """The undeliverable_address key of an email, exactly as herald.receipts writes it."""
    return func.encode(func.sha256(func.convert_to(func.lower(func.btrim(email)), "UTF8")), "hex")


def phone_hash(phone: ColumnElement[str]) -> ColumnElement[str]:
    """The undeliverable_address key of a phone number, exactly as herald.receipts writes it."""
    digits = func.regexp_replace(phone, "[^0-9+]", "", "g")
    return func.encode(func.sha256(func.convert_to(digits, "UTF8")), "hex")


async def delete_undeliverable_of_person(conn: AsyncConnection, person_id: int) -> int:
    """The person's email address and phone number, if a hard bounce marked them undeliverable,
    are forgotten with them (only their hashes were kept, but a hash of a known address
    identifies it)."""
    u, p = s.undeliverable_address, s.person
    result = await conn.execute(
        delete(u).where(
            u.c.tenant_id == p.c.tenant_id,
            or_(
                and_(u.c.channel == "email", u.c.address_hash == email_hash(p.c.email)),
                and_(u.c.channel == "sms", u.c.address_hash == phone_hash(p.c.phone)),
            ),
            p.c.id == person_id,
        )
    )
    return int(result.rowcount)


async def delete_followups_naming_person(
    conn: AsyncConnection, tenant_id: str, external_id: str
) -> int:
    """Follow-ups whose audience names the person (they are about or addressed to them, and
    their variables may carry the person's name) go with the person."""
    f = s.followup
    names = func.jsonb_build_object("userIds", func.jsonb_build_array(external_id))
    result = await conn.execute(
        delete(f)
        .where(
            f.c.tenant_id == tenant_id,
            or_(
                f.c.audience.op("@>")(names),
                f.c.audience["any"].op("@>")(func.jsonb_build_array(names)),
            ),
        )
        .returning(f.c.id)
    )
    return len(result.all())


async def hard_delete_person(conn: AsyncConnection, person_id: int) -> None:
    """The person row itself; role grants, memberships, guardianships, preferences, push tokens
    and feed read receipts go with it by their foreign keys' cascade."""
    await conn.execute(delete(s.person).where(s.person.c.id == person_id))


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


# ---------------------------------------------------------------------------------------------
# Read-back for imports: what is stored now, so an unchanged line writes nothing.


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
        for person_id, code in granted.tuples():
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
