"""Audience resolution against real PostgreSQL: who each spec reaches, page by page.

The directory is seeded with SQLAlchemy Core straight into herald.db.schema tables, so these tests
depend on nothing but the schema. Every test works in its own tenant.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert, text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald.audience import queries
from herald.audience.service import AudienceMember, resolve_audience_page, validate_audience
from herald.db import schema as s
from herald.errors import AudienceInvalid

NOW = datetime.now(UTC)


class Directory:
    """A tiny seeding helper: rows straight into the directory tables of one tenant."""

    def __init__(self, engine: AsyncEngine, tenant: str) -> None:
        self.engine = engine
        self.tenant = tenant

    async def person(self, external_id: str, **values: Any) -> int:
        async with self.engine.begin() as conn:
            return int(
                (
                    await conn.execute(
                        insert(s.person)
                        .values(tenant_id=self.tenant, external_id=external_id, **values)
                        .returning(s.person.c.id)
                    )
                ).scalar_one()
            )

    async def people(self, prefix: str, n: int) -> list[int]:
        async with self.engine.begin() as conn:
            rows = await conn.execute(
                insert(s.person).returning(s.person.c.id, sort_by_parameter_order=True),
                [
                    {"tenant_id": self.tenant, "external_id": f"{prefix}{i}", "full_name": None}
                    for i in range(n)
                ],
            )
            return [int(r.id) for r in rows]

    async def role(self, code: str, scope_kind: str) -> int:
        async with self.engine.begin() as conn:
            return int(
                (
                    await conn.execute(
                        insert(s.role)
                        .values(tenant_id=self.tenant, code=code, name=code, scope_kind=scope_kind)
                        .returning(s.role.c.id)
                    )
                ).scalar_one()
            )

    async def grant(self, person_id: int, role_id: int) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(s.person_role).values(
                    tenant_id=self.tenant, person_id=person_id, role_id=role_id
                )
            )

    async def group(self, external_id: str) -> int:
        async with self.engine.begin() as conn:
            return int(
                (
                    await conn.execute(
                        insert(s.person_group)
                        .values(tenant_id=self.tenant, external_id=external_id, name=external_id)
                        .returning(s.person_group.c.id)
                    )
                ).scalar_one()
            )

    async def enrol(self, group_id: int, person_id: int, member_role: str = "student") -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(s.group_membership).values(
                    tenant_id=self.tenant,
                    group_id=group_id,
                    person_id=person_id,
                    member_role=member_role,
                )
            )

    async def guard(self, student_id: int, guardian_id: int) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(s.guardianship).values(
                    tenant_id=self.tenant, student_id=student_id, guardian_id=guardian_id
                )
            )

    async def delete_person(self, person_id: int) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                update(s.person).where(s.person.c.id == person_id).values(deleted_at=NOW)
            )

    async def delete_group(self, group_id: int) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                update(s.person_group).where(s.person_group.c.id == group_id).values(deleted_at=NOW)
            )

    async def leave(self, group_id: int, person_id: int) -> None:
        t = s.group_membership
        async with self.engine.begin() as conn:
            await conn.execute(
                update(t)
                .where(t.c.group_id == group_id, t.c.person_id == person_id)
                .values(deleted_at=NOW)
            )

    async def unguard(self, student_id: int, guardian_id: int) -> None:
        t = s.guardianship
        async with self.engine.begin() as conn:
            await conn.execute(
                update(t)
                .where(t.c.student_id == student_id, t.c.guardian_id == guardian_id)
                .values(deleted_at=NOW)
            )


@pytest.fixture
def directory(engine: AsyncEngine, tenant: str) -> Directory:
    return Directory(engine, tenant)


async def page(
    engine: AsyncEngine, tenant: str, spec: Mapping[str, Any], after: int = 0, limit: int = 500
) -> list[AudienceMember]:
    async with engine.connect() as conn:
        return await resolve_audience_page(conn, tenant, spec, after, limit)


async def walk(
    engine: AsyncEngine, tenant: str, spec: Mapping[str, Any], limit: int
) -> list[AudienceMember]:
    """Every page until a short one, as the fan-out does, asserting the keyset on the way."""
    out: list[AudienceMember] = []
    after = 0
    while True:
        members = await page(engine, tenant, spec, after, limit)
        ids = [m.person_id for m in members]
        assert ids == sorted(ids) and all(i > after for i in ids)
        out.extend(members)
        if len(members) < limit:
            return out
        after = members[-1].person_id


def ids_of(members: list[AudienceMember]) -> list[int]:
    return [m.person_id for m in members]


def roles_of(members: list[AudienceMember]) -> dict[int, int | None]:
    return {m.person_id: m.role_id for m in members}


# ---------------------------------------------------------------------------------------------
# Keyset pages


async def test_all_users_walks_every_live_person_once_in_id_order(
    engine: AsyncEngine, tenant: str, directory: Directory
) -> None:
    """R-AUD-5, R-AUD-6: keyset pages by person.id; deleted people and other tenants are out."""
    people = await directory.people("p", 7)
    await directory.delete_person(people[1])
    await directory.delete_person(people[4])
    other = Directory(engine, tenant + "-other")
    await other.people("p", 3)

    members = await walk(engine, tenant, {"kind": "all_users"}, limit=2)

    assert ids_of(members) == [p for i, p in enumerate(people) if i not in (1, 4)]
    first = members[0]
    assert isinstance(first.public_id, uuid.UUID)
    assert (first.locale, first.status, first.full_name, first.role_id) == (
        "en",
        "active",
        None,
        None,
    )


async def test_the_spec_is_re_evaluated_for_every_page(
    engine: AsyncEngine, tenant: str, directory: Directory
) -> None:
    """R-AUD-3, R-AUD-4: joiners past the cursor are in, people gone before their page are out."""
    early = await directory.person("early")
    group = await directory.group("7a")
    pupils = await directory.people("pupil", 4)
    for pupil in pupils:
        await directory.enrol(group, pupil)
    spec = {"kind": "group", "groupIds": ["7a"]}

    first = await page(engine, tenant, spec, 0, 2)
    assert ids_of(first) == pupils[:2]

    late = await directory.person("late")  # enrolled between pages, id beyond the cursor
    await directory.enrol(group, late)
    await directory.delete_person(pupils[2])  # deleted before their page is reached
    await directory.leave(group, pupils[3])  # left the class before their page
    await directory.enrol(group, early)  # joined, but behind the cursor: the walk has passed them

    second = await page(engine, tenant, spec, first[-1].person_id, 2)
    assert ids_of(second) == [late]


async def test_a_suspended_person_is_resolved_with_their_status(
    engine: AsyncEngine, tenant: str, directory: Directory
) -> None:
    """R-AUD-8: resolution does not filter on sign-in access; status is reported to the fan-out."""
    suspended = await directory.person("s", status="suspended")
    limited = await directory.person("l", status="limited", locale="ne", full_name="Sita")
    members = await page(engine, tenant, {"kind": "all_users"})
    assert [(m.person_id, m.status) for m in members] == [
        (suspended, "suspended"),
        (limited, "limited"),
    ]
    assert (members[1].locale, members[1].full_name) == ("ne", "Sita")


# ---------------------------------------------------------------------------------------------
# users


async def test_users_reaches_only_the_listed_live_people_of_the_tenant(
    engine: AsyncEngine, tenant: str, directory: Directory
) -> None:
    """R-AUD-13: ids are bound, so an id with quotes is just an id; R-AUD-6: deleted are out."""
    odd = await directory.person("o'hara'); DROP TABLE person; --")
    plain = await directory.person("u1")
    gone = await directory.person("u2")
    await directory.delete_person(gone)
    await directory.person("not-listed")
    await Directory(engine, tenant + "-other").person("u1")
    spec = {"kind": "users", "userIds": ["u1", "u2", "o'hara'); DROP TABLE person; --", "nobody"]}

    members = await page(engine, tenant, spec)

    assert ids_of(members) == [odd, plain]
    assert roles_of(members) == {odd: None, plain: None}


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "users", "userIds": []},
        {"kind": "role", "roles": []},
        {"kind": "group", "groupIds": []},
        {"kind": "guardians_of_group", "groupIds": []},
        {"kind": "guardians_of_users", "userIds": []},
        {"kind": "compound", "any": [{"kind": "users", "userIds": []}]},
    ],
)
async def test_an_empty_id_list_resolves_to_nobody(
    engine: AsyncEngine, tenant: str, directory: Directory, spec: dict[str, Any]
) -> None:
    """R-AUD-14: an empty list matches nothing, without an error."""
    await directory.people("p", 3)
    assert await page(engine, tenant, spec) == []


# ---------------------------------------------------------------------------------------------
# role


async def test_role_reaches_holders_scoped_to_the_role(
    engine: AsyncEngine, tenant: str, directory: Directory
) -> None:
    """DESIGN §5.1 role scoping: holders of the listed roles, role_id = that role (lowest id if
    several); other roles, deleted holders and another tenant's same-coded role are out."""
    teacher = await directory.role("teacher", "staff")
    coordinator = await directory.role("coordinator", "staff")
    clerk = await directory.role("clerk", "staff")
    a, b, c, d, _holds_nothing = await directory.people("p", 5)
    await directory.grant(a, teacher)
    await directory.grant(b, coordinator)
    await directory.grant(b, teacher)  # holds both listed roles
    await directory.grant(c, clerk)  # holds an unlisted role
    await directory.grant(d, teacher)
    await directory.delete_person(d)
    other = Directory(engine, tenant + "-other")
    other_teacher = await other.role("teacher", "staff")
    await other.grant(await other.person("x"), other_teacher)

    members = await walk(engine, tenant, {"kind": "role", "roles": ["teacher", "coordinator"]}, 1)

    assert roles_of(members) == {a: teacher, b: min(teacher, coordinator)}


# ---------------------------------------------------------------------------------------------
# group


async def test_group_reaches_live_student_members_with_their_student_role(
    engine: AsyncEngine, tenant: str, directory: Directory
) -> None:
    """R-AUD-7, R-AUD-12: live student memberships of live groups; role_id by correlated
    subquery, NULL (and still in) for a pupil without a student role."""
    student_role = await directory.role("student", "student")
    staff_role = await directory.role("teacher", "staff")
    g7a = await directory.group("7a")
    g7b = await directory.group("7b")
    closed = await directory.group("closed")
    (
        with_role,
        without_role,
        staff_only,
        teacher,
        left,
        gone,
        twice,
        in_closed,
    ) = await directory.people("p", 8)
    await directory.grant(with_role, student_role)
    await directory.grant(staff_only, staff_role)
    await directory.grant(teacher, staff_role)
    for pupil in (with_role, without_role, staff_only, left, gone, twice):
        await directory.enrol(g7a, pupil)
    await directory.enrol(g7a, teacher, "teacher")
    await directory.enrol(g7b, twice)
    await directory.enrol(closed, in_closed)
    await directory.delete_group(closed)
    await directory.leave(g7a, left)
    await directory.delete_person(gone)
    other = Directory(engine, tenant + "-other")
    other_7a = await other.group("7a")
    await other.enrol(other_7a, await other.person("x"))

    spec = {"kind": "group", "groupIds": ["7a", "7b", "closed"]}
    members = await walk(engine, tenant, spec, 2)

    assert roles_of(members) == {
        with_role: student_role,
        without_role: None,
        staff_only: None,
        twice: None,
    }
    assert len(ids_of(members)) == len(set(ids_of(members)))


# ---------------------------------------------------------------------------------------------
# guardians


async def test_guardians_of_group_reach_guardians_of_live_student_members(
    engine: AsyncEngine, tenant: str, directory: Directory
) -> None:
    """R-AUD-11, R-AUD-7, R-AUD-12: through guardianship only; a deleted student's guardians are
    not reached through them; a deleted guardian or guardianship is not reached; scoped to the
    guardian-scope role, or NULL without one."""
    parent_role = await directory.role("parent", "guardian")
    staff_role = await directory.role("teacher", "staff")
    g = await directory.group("7a")
    pupil, pupil2, gone_pupil, teacher = await directory.people("s", 4)
    mum, dad, gran, both, teachers_kid_parent, unlinked, gone_parent = await directory.people(
        "g", 7
    )
    for p in (pupil, pupil2, gone_pupil):
        await directory.enrol(g, p)
    await directory.enrol(g, teacher, "teacher")
    await directory.grant(mum, parent_role)
    await directory.grant(dad, staff_role)  # a guardian holding only a staff role
    await directory.grant(both, parent_role)
    await directory.guard(pupil, mum)
    await directory.guard(pupil, dad)
    await directory.guard(pupil, gran)
    await directory.unguard(pupil, gran)  # guardianship ended
    await directory.guard(gone_pupil, both)
    await directory.guard(pupil2, both)  # also reached through a live pupil: once
    await directory.guard(gone_pupil, unlinked)  # only through a deleted pupil
    await directory.delete_person(gone_pupil)
    await directory.guard(teacher, teachers_kid_parent)  # only through a teacher membership
    await directory.guard(pupil2, gone_parent)
    await directory.delete_person(gone_parent)

    members = await walk(engine, tenant, {"kind": "guardians_of_group", "groupIds": ["7a"]}, 2)

    assert roles_of(members) == {mum: parent_role, dad: None, both: parent_role}


async def test_guardians_of_users_reach_the_listed_students_guardians(
    engine: AsyncEngine, tenant: str, directory: Directory
) -> None:
    """R-AUD-11: the list names students; listing a guardian reaches their guardians (none), so
    a caller cannot address a family's notification to a list of guardians it chose."""
    parent_role = await directory.role("parent", "guardian")
    kid, gone_kid, other_kid = await directory.people("k", 3)
    mum, stranger, gone_kids_dad = await directory.people("g", 3)
    await directory.grant(mum, parent_role)
    await directory.guard(kid, mum)
    await directory.guard(other_kid, stranger)
    await directory.guard(gone_kid, gone_kids_dad)
    await directory.delete_person(gone_kid)

    spec = {"kind": "guardians_of_users", "userIds": ["k0", "k1"]}
    assert roles_of(await page(engine, tenant, spec)) == {mum: parent_role}
    assert await page(engine, tenant, {"kind": "guardians_of_users", "userIds": ["g1"]}) == []


# ---------------------------------------------------------------------------------------------
# segment


async def test_segment_filters_and_together(
    engine: AsyncEngine, tenant: str, directory: Directory
) -> None:
    """Segment: statuses, locales, countries and seenWithinDays combine with AND; not scoped."""
    recent = NOW - timedelta(days=2)
    stale = NOW - timedelta(days=40)
    hit = await directory.person("hit", locale="ne", country="NP", last_seen_at=recent)
    await directory.person("wrong-locale", locale="en", country="NP", last_seen_at=recent)
    await directory.person("wrong-country", locale="ne", country="IN", last_seen_at=recent)
    await directory.person("stale", locale="ne", country="NP", last_seen_at=stale)
    await directory.person("never-seen", locale="ne", country="NP")
    suspended = await directory.person(
        "suspended", locale="ne", country="NP", last_seen_at=recent, status="suspended"
    )

    spec = {"kind": "segment", "locales": ["ne"], "countries": ["np"], "seenWithinDays": 30}
    assert roles_of(await page(engine, tenant, spec)) == {hit: None, suspended: None}
    only_active = {**spec, "statuses": ["active"]}
    assert ids_of(await page(engine, tenant, only_active)) == [hit]
    assert ids_of(await page(engine, tenant, {"kind": "segment", "statuses": []})) == []


# ---------------------------------------------------------------------------------------------
# compound


async def test_compound_is_one_deduplicated_keyset_walk(
    engine: AsyncEngine, tenant: str, directory: Directory
) -> None:
    """R-AUD-9, R-AUD-10: one UNION walked with one cursor; a person several members reach is
    produced once; their role_id is NULL if any member reaches them unscoped, else the lowest."""
    teacher_role = await directory.role("teacher", "staff")
    parent_role = await directory.role("parent", "guardian")
    g = await directory.group("7a")
    people = await directory.people("p", 12)
    pupil, teacher_parent, listed_teacher, plain_teacher, listed = people[:5]
    await directory.enrol(g, pupil)
    for t in (teacher_parent, listed_teacher, plain_teacher):
        await directory.grant(t, teacher_role)
    await directory.grant(teacher_parent, parent_role)
    await directory.guard(pupil, teacher_parent)  # reached as teacher AND as guardian
    spec = {
        "kind": "compound",
        "any": [
            {"kind": "role", "roles": ["teacher"]},
            {"kind": "guardians_of_group", "groupIds": ["7a"]},
            {"kind": "users", "userIds": ["p2", "p4"]},  # listed_teacher and listed
            {"kind": "group", "groupIds": ["7a"]},
        ],
    }

    for limit in (1, 2, 500):
        members = await walk(engine, tenant, spec, limit)
        assert roles_of(members) == {
            pupil: None,
            teacher_parent: min(teacher_role, parent_role),
            listed_teacher: None,  # unscoped through `users` wins over the teacher scope
            plain_teacher: teacher_role,
            listed: None,
        }
        assert len(members) == len({m.person_id for m in members}) == 5

    everyone = {"kind": "compound", "any": [{"kind": "all_users"}, {"kind": "all_users"}]}
    assert ids_of(await walk(engine, tenant, everyone, 5)) == people


# ---------------------------------------------------------------------------------------------
# Failing closed, reading only


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "class", "classIds": ["7a"]},
        {"kind": "compound", "any": [{"kind": "compound", "any": [{"kind": "all_users"}]}]},
        {"kind": "users"},
    ],
)
async def test_an_unknown_or_malformed_stored_spec_raises(
    engine: AsyncEngine, tenant: str, directory: Directory, spec: dict[str, Any]
) -> None:
    """R-AUD-16: resolution raises on an unknown kind; it never resolves to nobody."""
    await directory.people("p", 2)
    with pytest.raises(AudienceInvalid):
        await page(engine, tenant, spec)


async def _read_only(conn: AsyncConnection) -> None:
    await conn.execute(text("SET TRANSACTION READ ONLY"))


async def test_resolution_only_reads_the_directory(
    engine: AsyncEngine, tenant: str, directory: Directory
) -> None:
    """R-AUD-2: every kind resolves inside a READ ONLY transaction (a write would fail)."""
    role = await directory.role("teacher", "staff")
    g = await directory.group("7a")
    kid, mum = await directory.people("p", 2)
    await directory.grant(mum, role)
    await directory.enrol(g, kid)
    await directory.guard(kid, mum)
    specs: list[dict[str, Any]] = [
        {"kind": "users", "userIds": ["p0"]},
        {"kind": "role", "roles": ["teacher"]},
        {"kind": "group", "groupIds": ["7a"]},
        {"kind": "guardians_of_group", "groupIds": ["7a"]},
        {"kind": "guardians_of_users", "userIds": ["p0"]},
        {"kind": "all_users"},
        {"kind": "segment", "locales": ["en"]},
    ]
    specs.append({"kind": "compound", "any": list(specs)})
    async with engine.connect() as conn:
        await conn.begin()
        await _read_only(conn)
        for spec in specs:
            assert await resolve_audience_page(conn, tenant, spec, 0, 10)
        await conn.rollback()


# ---------------------------------------------------------------------------------------------
# Plans


def _plan_nodes(plan: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(_plan_nodes(child))
    return nodes


async def _seed_school(conn: AsyncConnection, tenant: str, size: int, groups: int) -> list[int]:
    """A school: `size` people; the first 60% pupils spread over `groups` classes (g0, g1, …),
    every other pupil granted `student`; the rest parents (role `parent`), one per pupil in turn.
    Returns the people's ids in insertion (= id) order."""
    people = [
        int(r.id)
        for r in await conn.execute(
            insert(s.person).returning(s.person.c.id, sort_by_parameter_order=True),
            [{"tenant_id": tenant, "external_id": f"p{i}", "full_name": None} for i in range(size)],
        )
    ]
    role_ids = [
        int(r.id)
        for r in await conn.execute(
            insert(s.role).returning(s.role.c.id, sort_by_parameter_order=True),
            [
                {"tenant_id": tenant, "code": code, "name": code, "scope_kind": scope}
                for code, scope in (("student", "student"), ("parent", "guardian"))
            ],
        )
    ]
    student_role, parent_role = role_ids
    group_ids = [
        int(r.id)
        for r in await conn.execute(
            insert(s.person_group).returning(s.person_group.c.id, sort_by_parameter_order=True),
            [{"tenant_id": tenant, "external_id": f"g{i}", "name": f"g{i}"} for i in range(groups)],
        )
    ]
    cut = size * 3 // 5
    pupils, parents = people[:cut], people[cut:]
    await conn.execute(
        insert(s.group_membership),
        [
            {
                "tenant_id": tenant,
                "group_id": group_ids[i % groups],
                "person_id": p,
                "member_role": "student",
            }
            for i, p in enumerate(pupils)
        ],
    )
    await conn.execute(
        insert(s.guardianship),
        [
            {"tenant_id": tenant, "student_id": p, "guardian_id": parents[i % len(parents)]}
            for i, p in enumerate(pupils)
        ],
    )
    await conn.execute(
        insert(s.person_role),
        [{"tenant_id": tenant, "person_id": p, "role_id": student_role} for p in pupils[::2]]
        + [{"tenant_id": tenant, "person_id": p, "role_id": parent_role} for p in parents],
    )
    return people


async def test_pages_are_index_probes_not_table_scans(engine: AsyncEngine, tenant: str) -> None:
    """R-AUD-1, R-AUD-5: on a 20,000-person tenant every page of every kind is bounded index
    work — no sequential scan of a directory table, and no more rows read than a few pages'
    worth, however far the cursor has walked. (Counts rows from EXPLAIN ANALYZE, not time.)

    The tenant shares the database, as in production (and as in a full test run): two schools
    of the same shape created before it, so its ids are the newest, and a hundred small tenants
    with the same class ids and role codes. Their rows are what mislead the planner — alone in
    the database, a tenant's plans were right by luck (see "Ordered walks" in
    herald.audience.queries)."""
    big = 20_000
    async with engine.begin() as conn:
        for i in range(2):
            await _seed_school(conn, f"{tenant}-older-{i}", big, 200)
        for i in range(100):
            await _seed_school(conn, f"{tenant}-small-{i}", 10, 8)
        people = await _seed_school(conn, tenant, big, 200)
    async with engine.connect() as conn:
        for table in (
            "person",
            "role",
            "person_role",
            "person_group",
            "group_membership",
            "guardianship",
        ):
            await conn.execute(text(f"ANALYZE {table}"))
        await conn.commit()

    specs: list[dict[str, Any]] = [
        {"kind": "all_users"},
        {"kind": "group", "groupIds": ["g5"]},
        {"kind": "group", "groupIds": ["g5", "g6", "g7"]},
        {"kind": "role", "roles": ["parent", "student"]},
        {"kind": "guardians_of_group", "groupIds": ["g5"]},
        {"kind": "guardians_of_users", "userIds": [f"p{i}" for i in range(0, 1000, 2)]},
        {"kind": "users", "userIds": [f"p{i}" for i in range(0, 1000, 2)]},
        {"kind": "segment", "locales": ["en"]},
    ]
    specs.append({"kind": "compound", "any": list(specs)})
    directory_tables = {"person", "person_role", "group_membership", "guardianship"}
    async with engine.connect() as conn:
        for spec in specs:
            for after in (0, people[big // 2], people[-10]):
                compiled = queries.page_query(tenant, validate_audience(spec), after, 500).compile(
                    dialect=conn.dialect
                )
                result = await conn.exec_driver_sql(
                    "EXPLAIN (ANALYZE, FORMAT JSON) " + str(compiled), compiled.params
                )
                raw = result.scalar_one()
                plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
                nodes = _plan_nodes(plan)
                scanned = {n.get("Relation Name") for n in nodes if n["Node Type"] == "Seq Scan"}
                assert not scanned & directory_tables, (spec["kind"], after, scanned)
                # Rows the scans of directory tables read (kept or filtered out), all loops.
                read = sum(
                    (n["Actual Rows"] + n.get("Rows Removed by Filter", 0)) * n["Actual Loops"]
                    for n in nodes
                    if n.get("Relation Name") in directory_tables
                )
                # One page reads about one page per driving key, never the tenant (20,000+).
                assert read <= (12_000 if spec["kind"] == "compound" else 3_000), (
                    spec["kind"],
                    after,
                    read,
                )
