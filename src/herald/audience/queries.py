"""SQL of the audience stage: one keyset page of the people an audience spec names.

Every kind has a *fragment*: a SELECT of `(person_id, role_id)`, one row per person, for live
people of the tenant with `person_id > :after`, `ORDER BY person_id LIMIT :limit`. The page query
(`page_query`) walks a fragment and reads each person through the outer person filter —
`tenant_id`, `deleted_at IS NULL` (R-AUD-6) and `person.id > :after ORDER BY person.id LIMIT`
(R-AUD-5, never OFFSET). Inside, each fragment applies its link tables' own `deleted_at IS NULL`
(group_membership, guardianship, person_group) together with the linked person's (R-AUD-7). The
fan-out calls this once per page, so the spec is re-evaluated every time and nothing is
materialised (R-AUD-3, R-AUD-4).

Performance (checked with EXPLAIN ANALYZE, PostgreSQL 15 and 18, on a 20,000-person tenant that
shares the database with other tenants: big ones created before or after it, hundreds of small
ones): every page is a bounded set of index probes, never a scan of a table.
- Each fragment filters, orders and limits on its own. PostgreSQL does not carry an inequality
  across a join, so without it every page would compute the whole audience first.
- Fragments that start from a link table are driven per key (per role, per group, per student,
  per listed id) by a LATERAL page read in order from that table's (key, person) index.
- Listed ids (people, groups, roles) are probed one by one in their (tenant_id, key) unique
  index (`_listed_rows`).
- People are reached by `_live_person_at`, a LATERAL probe on `id = :person_id`. Its LIMIT 1
  keeps the planner from flattening it into an ordinary join, which — not knowing the
  candidates are one page — it ran as a hash join over a sequential scan of `person`, or as a
  merge join re-reading the tenant's people from the cursor on, on every page.
Limiting a fragment (or a per-key page) is sound because it yields one row per live person: a
person on the final page has fewer than `limit` people before them in every list that names them.

Ordered walks. A page of a walk — the tenant's people, a role's holders, a group's members — must
be read in order from the walk's (key, person) index, stopping after `limit` rows. The planner does
that only while it expects many rows past the cursor; expecting few, it reads them all and sorts
them, or walks another index that also yields person order and filters. Other tenants' rows make it
expect few: it takes a tenant's rows to be spread evenly over the ids (so a tenant created late
seems to have few rows past any cursor), multiplies the tenant's share of a link table into per-key
estimates, and estimates a LATERAL key by the average key of every tenant. With two tenants created
first, a mid-walk page of two roles read all 9,000 of their grants past the cursor, probed each
holder and sorted them (18,499 rows for 500 people), and `all_users` walked the primary key through
40,000 other tenants' people. So each walk states `key = :value AND person > :after` as
`(key, person) >= (:value, :after + 1) AND key <= :value ORDER BY key, person` (`_past_cursor`):
with no equality on the key, no other index yields that order, and PostgreSQL estimates the range
from the key alone — never the cursor — at no less than the tenant's share of `person`, or a ninth
of a link table for a LATERAL key: many rows, so reading in order and stopping wins. Link tables
are not filtered on tenant_id for the same reason; their rows are reached through the tenant's own
role or group, and each person through the tenant-checked probe.

These are the custom plans PostgreSQL makes for a page's actual tenant and cursor. A generic
plan (an option once psycopg has prepared the statement, from its sixth run on a connection)
knows neither, and can still misjudge a tenant's size; keep this statement custom-planned.

Read-only: nothing here writes the directory (R-AUD-2), and nothing filters on a "can log in"
notion, which Herald does not have (R-AUD-8). Every row read is the tenant's: a person by
`tenant_id`, a role or group by its tenant probe, a link row through that role, group or person.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Interval,
    Row,
    Select,
    Text,
    any_,
    case,
    cast,
    func,
    literal,
    null,
    select,
    true,
    tuple_,
    union_all,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.db import compiled
from herald.db import schema as s
from herald.errors import AudienceInvalid, ConfigurationError

# (tenant_id, normalised spec, after_person_id, limit) → SELECT person_id, role_id (one page)
# A page's cursor: a person id, or a bound parameter holding one (a statement built once and run
# page after page with a new value, as the fan-out does).
Cursor = int | ColumnElement[Any]
Fragment = Callable[[str, Mapping[str, Any], Cursor, int], Select[Any]]


def text_array(values: Iterable[str]) -> ColumnElement[Any]:
    """An id list as ONE bound `text[]` parameter, never spliced into the SQL (R-AUD-13).

    The explicit cast keeps an empty list typed, so `= ANY('{}'::text[])` matches nothing
    rather than failing (R-AUD-14). Host ids are text, so the array is text[] (not uuid[]).
    """
    return cast(literal(list(values), ARRAY(Text)), ARRAY(Text))


def _no_role() -> ColumnElement[Any]:
    # Typed, so a UNION ALL of scoped and unscoped fragments agrees on bigint.
    return cast(null(), BigInteger).label("role_id")


def _live_person_at(
    person_id: ColumnElement[Any], tenant_id: str, after: Cursor | None, name: str
) -> Any:
    """The live person `person_id` points at, as a LATERAL primary-key probe (see module doc).

    Tenant, liveness (R-AUD-6, R-AUD-7) and, when given, the keyset (R-AUD-5), stated on the
    person row itself. `id = :person_id` makes it one index entry whichever index serves it.
    """
    p = s.person.alias(f"{name}_p")
    live = [p.c.id == person_id, p.c.tenant_id == tenant_id, p.c.deleted_at.is_(None)]
    if after is not None:
        live.append(p.c.id > after)
    return select(p.c.id.label("person_id")).where(*live).limit(1).lateral(name)


def _past_cursor(
    key: ColumnElement[Any], person: ColumnElement[Any], value: Any, after: Cursor
) -> list[ColumnElement[bool]]:
    """`key = value AND person > after`, written as a range over the (key, person) index.

    The same rows (a database's default collation is deterministic, so a text key that is both
    >= and <= the value equals it). See "Ordered walks" in the module doc: the row comparison
    positions an index on (key, person) at (value, after + 1) and `key <= value` ends the walk
    at the key's last entry, so only that index can deliver `ORDER BY key, person`, and the row
    estimate ignores the cursor: at least the key's share of the table for a known key (the
    tenant), a ninth of the table for a LATERAL one. `>=` with `after + 1` (ids are integers)
    rather than `>` with `after`: PostgreSQL estimates a row comparison by its first column
    alone, and `key > value` would leave the key's own rows out of that estimate.
    """
    first = literal(after + 1, BigInteger) if isinstance(after, int) else after + 1
    return [tuple_(key, person) >= tuple_(value, first), key <= value]


def role_for_scope(person_id: ColumnElement[Any], tenant_id: str, scope_kind: str) -> Any:
    """roleForScope: the person's lowest-id role of `scope_kind`, or NULL (R-AUD-12).

    A correlated subquery, never a join: a pupil who holds no student role stays in the class
    audience with role_id NULL ("not role-scoped") instead of silently dropping out.
    """
    pr = s.person_role.alias("scope_pr")
    r = s.role.alias("scope_r")
    return (
        select(func.min(r.c.id))
        .select_from(pr.join(r, r.c.id == pr.c.role_id))
        .where(
            pr.c.person_id == person_id,
            pr.c.tenant_id == tenant_id,
            r.c.tenant_id == tenant_id,
            r.c.scope_kind == scope_kind,
        )
        .correlate_except(pr, r)
        .scalar_subquery()
    )


# ---------------------------------------------------------------------------------------------
# Fragments, one per audience kind. Each returns one row per person:
# (person_id, role_id), ordered by person id, at most one page.


def _listed_rows(
    table: Any, key: str, values: Iterable[str], tenant_id: str, name: str
) -> Select[Any]:
    """The `id`s of the tenant's rows of `table` whose `key` a list names: per listed value, one
    LIMIT 1 probe of the (tenant_id, key) unique index (and `deleted_at IS NULL` where the table
    has it).

    Probes rather than `key = ANY(:values)`: for the ANY form the planner multiplied the share
    of rows the tenant holds by the share any tenant's rows hold that key (the same group ids
    recur across tenants), expected a hundred groups where the list named one, and hash-joined
    every group membership in the table to them. Probed, a list of n values is n rows.
    """
    listed = func.unnest(text_array(values)).table_valued("value").render_derived(name=f"{name}s")
    row = table.alias(f"{name}_row")
    match = [row.c.tenant_id == tenant_id, row.c[key] == listed.c.value]
    if "deleted_at" in row.c:
        match.append(row.c.deleted_at.is_(None))
    found = select(row.c.id).where(*match).limit(1).lateral(name)
    return select(found.c.id).select_from(listed.join(found, true()))


def _listed_people(
    tenant_id: str, external_ids: Iterable[str], after: Cursor | None
) -> Select[Any]:
    """The live people a list of external ids names: one unique-index probe per listed id.

    Driven from the list, never by walking `person` in id order hoping to meet listed ids — the
    page after the last one would otherwise read every person past the cursor. The cursor is
    applied to what the probes return, outside their LIMIT 1: inside, `id > :after` offered the
    planner a walk of the primary key from the cursor on, filtering on external_id, for every
    listed id — which it took whenever few ids looked to lie past the cursor (a cursor late in
    a tenant whose ids are the newest in the table).
    """
    people = _listed_rows(s.person, "external_id", external_ids, tenant_id, "listed_person")
    found = people.selected_columns.id
    return people.with_only_columns(found.label("person_id")).where(
        *([] if after is None else [found > after])
    )


def _users(tenant_id: str, spec: Mapping[str, Any], after: Cursor, limit: int) -> Select[Any]:
    """The listed people, not role-scoped."""
    listed = _listed_people(tenant_id, spec["userIds"], after).subquery("listed_people")
    return (
        select(listed.c.person_id, _no_role()).distinct().order_by(listed.c.person_id).limit(limit)
    )


def _tenant_walk(
    p: Any, tenant_id: str, after: Cursor, *filters: ColumnElement[bool]
) -> Select[Any]:
    """The tenant's live people past the cursor that pass `filters`, in id order: one ordered
    walk of person_live_keyset_idx (tenant_id, id) WHERE deleted_at IS NULL from (tenant, after).

    Never the primary key: ordered by id alone, the planner read it from the cursor on, discarding
    other tenants' rows (all 40,000 of them, for a tenant created after two others), because it
    takes a tenant's rows to be spread evenly over the ids. See "Ordered walks" in the module doc.
    `p` is the alias of `person` the filters are written against.

    Under row-level security that is not enough: the policy's `tenant_id = current_setting(…)`
    makes the tenant a constant to the planner, so `ORDER BY tenant_id, id` is just `ORDER BY
    id` and the primary key delivers it too. The fan-out's pages were read that way, with the
    cursor's row comparison only a filter — every page walked the tenant's people from the first
    (batch 79 of a 40,000-person event: 39,000 rows removed by the filter), so the fan-out grew
    quadratically. `id > (SELECT after)` as well makes the cursor an index condition on either
    index. As a sub-select it is a parameter to the planner, estimated at the default third of the
    rows rather than from the id histogram: a plain `id > after` let a mid-walk page's estimate
    fall to "few", and the planner read every row past the cursor and sorted them (10,499 rows
    for a 500-person page in test_audience.py's shared database).
    """
    first = literal(after, BigInteger) if isinstance(after, int) else after
    return (
        select(p.c.id.label("person_id"), _no_role())
        .where(
            *_past_cursor(p.c.tenant_id, p.c.id, literal(tenant_id, Text), after),
            p.c.id > select(first).scalar_subquery(),
            p.c.deleted_at.is_(None),
            *filters,
        )
        .order_by(p.c.tenant_id, p.c.id)
    )


def _all_users(tenant_id: str, spec: Mapping[str, Any], after: Cursor, limit: int) -> Select[Any]:
    return _tenant_walk(s.person.alias("p"), tenant_id, after).limit(limit)


def _segment(tenant_id: str, spec: Mapping[str, Any], after: Cursor, limit: int) -> Select[Any]:
    p = s.person.alias("p")
    filters: list[ColumnElement[bool]] = []
    if "statuses" in spec:
        filters.append(p.c.status == any_(text_array(spec["statuses"])))
    if "locales" in spec:
        filters.append(p.c.locale == any_(text_array(spec["locales"])))
    if "countries" in spec:
        # The directory stores countries upper-case, as validation normalises them.
        filters.append(p.c.country == any_(text_array(spec["countries"])))
    if "seenWithinDays" in spec:
        window = literal(timedelta(days=int(spec["seenWithinDays"])), Interval())
        filters.append(p.c.last_seen_at >= func.now() - window)
    # Walks the keyset index in id order, filtering: the whole walk reads each person once.
    return _tenant_walk(p, tenant_id, after, *filters).limit(limit)


def _role(tenant_id: str, spec: Mapping[str, Any], after: Cursor, limit: int) -> Select[Any]:
    """Holders of the listed roles, scoped to the role (several listed → the lowest role id).

    Per listed role, a LATERAL page of its live holders past the cursor, read in order from
    person_role_role_id_idx (role_id, person_id) from (role, after): a rare role costs a few
    probes, not a walk over every role grant in the tenant. The grants are the tenant's because
    the role is (probed by tenant), and each holder is a tenant-checked person probe; a
    tenant_id filter on person_role itself would only shrink the row estimate by the tenant's
    share of the table (see "Ordered walks").
    """
    r = _listed_rows(s.role, "code", spec["roles"], tenant_id, "listed_role").subquery("r")
    pr = s.person_role.alias("pr")
    lp = _live_person_at(pr.c.person_id, tenant_id, after, "holder")
    holders = (
        select(lp.c.person_id, pr.c.role_id)
        .select_from(pr.join(lp, true()))
        .where(*_past_cursor(pr.c.role_id, pr.c.person_id, r.c.id, after))
        .order_by(pr.c.role_id, pr.c.person_id)
        .limit(limit)
        .lateral("holders")
    )
    return (
        select(holders.c.person_id, func.min(holders.c.role_id).label("role_id"))
        .select_from(r.join(holders, true()))
        .group_by(holders.c.person_id)
        .order_by(holders.c.person_id)
        .limit(limit)
    )


def _listed_groups(tenant_id: str, spec: Mapping[str, Any]) -> Any:
    """The tenant's live groups the spec lists (`id`), one unique-index probe per listed id."""
    return _listed_rows(
        s.person_group, "external_id", spec["groupIds"], tenant_id, "listed_group"
    ).subquery("g")


def _group(tenant_id: str, spec: Mapping[str, Any], after: Cursor, limit: int) -> Select[Any]:
    """Student members of the listed live groups, scoped to their student-scope role if any.

    Per listed group, a LATERAL page of its live student members past the cursor, read in order
    from group_membership's primary key (group_id, person_id) from (group, after). The
    memberships are the tenant's because the group is; as for roles, no tenant_id filter on
    the link table (see "Ordered walks").
    """
    g = _listed_groups(tenant_id, spec)
    gm = s.group_membership.alias("gm")
    lp = _live_person_at(gm.c.person_id, tenant_id, after, "member")
    members = (
        select(lp.c.person_id)
        .select_from(gm.join(lp, true()))
        .where(
            *_past_cursor(gm.c.group_id, gm.c.person_id, g.c.id, after),
            # The membership and the person are live together (R-AUD-7).
            gm.c.deleted_at.is_(None),
            gm.c.member_role == "student",
        )
        .order_by(gm.c.group_id, gm.c.person_id)
        .limit(limit)
        .lateral("members")
    )
    return (
        select(
            members.c.person_id,
            role_for_scope(members.c.person_id, tenant_id, "student").label("role_id"),
        )
        .select_from(g.join(members, true()))
        # A pupil in two listed groups is one row.
        .group_by(members.c.person_id)
        .order_by(members.c.person_id)
        .limit(limit)
    )


def _guardians_of(tenant_id: str, students: Select[Any], after: Cursor, limit: int) -> Select[Any]:
    """Guardians of the live students (`person_id`s) `students` selects, only through
    guardianship (R-AUD-11).

    The guardianship, the student and the guardian must all be live (R-AUD-7): a deleted
    student's guardians are not reached through that student, and a deleted guardian is not
    reached at all. Scoped to the guardian's guardian-scope role if they hold one. Per student,
    a LATERAL page of live guardians past the cursor, from guardianship's primary key
    (student_id, guardian_id). A student has a handful of guardians, so reading all of them is
    as bounded as reading them in order: this walk keeps the plain equality.
    """
    student = students.subquery("students")
    gs = s.guardianship.alias("gs")
    lp = _live_person_at(gs.c.guardian_id, tenant_id, after, "guardian")
    guardians = (
        select(lp.c.person_id)
        .select_from(gs.join(lp, true()))
        .where(
            gs.c.student_id == student.c.person_id,
            gs.c.tenant_id == tenant_id,
            gs.c.deleted_at.is_(None),
            gs.c.guardian_id > after,
        )
        .order_by(gs.c.guardian_id)
        .limit(limit)
        .lateral("guardians")
    )
    return (
        select(
            guardians.c.person_id,
            role_for_scope(guardians.c.person_id, tenant_id, "guardian").label("role_id"),
        )
        .select_from(student.join(guardians, true()))
        # A guardian of two pupils in the audience is one row.
        .group_by(guardians.c.person_id)
        .order_by(guardians.c.person_id)
        .limit(limit)
    )


def _guardians_of_group(
    tenant_id: str, spec: Mapping[str, Any], after: Cursor, limit: int
) -> Select[Any]:
    g = _listed_groups(tenant_id, spec)
    gm = s.group_membership.alias("gm")
    # Every live student of the groups (guardian order is not student order, so no cursor
    # here), each checked by a person probe rather than a join to `person` as a whole.
    student = _live_person_at(gm.c.person_id, tenant_id, None, "student")
    students = (
        select(student.c.person_id)
        .select_from(g.join(gm, gm.c.group_id == g.c.id).join(student, true()))
        .where(
            gm.c.deleted_at.is_(None),
            # Only through student memberships: a teacher's family is not the class's family.
            gm.c.member_role == "student",
        )
    )
    return _guardians_of(tenant_id, students, after, limit)


def _guardians_of_users(
    tenant_id: str, spec: Mapping[str, Any], after: Cursor, limit: int
) -> Select[Any]:
    # The listed people are the students, never the recipients (R-AUD-11).
    return _guardians_of(tenant_id, _listed_people(tenant_id, spec["userIds"], None), after, limit)


def _compound(tenant_id: str, spec: Mapping[str, Any], after: Cursor, limit: int) -> Select[Any]:
    """ONE SQL UNION ALL of the members, deduplicated by person id, one keyset (R-AUD-9/10).

    Each member contributes at most one page, already past the cursor; the union is grouped by
    person, so a person several members reach is one row. Their role_id: NULL if any member
    reaches them unscoped (the union is at least as visible as its widest member), otherwise the
    lowest role id among the members that reach them.
    """
    members = []
    for index, member in enumerate(spec["any"]):
        if member["kind"] == "compound":
            raise AudienceInvalid("a compound audience member may not itself be compound")
        members.append(
            select(
                fragment_for(member["kind"])(tenant_id, member, after, limit).subquery(f"m{index}")
            )
        )
    u = union_all(*members).subquery("united")
    role_id = case(
        (func.bool_or(u.c.role_id.is_(None)), cast(null(), BigInteger)),
        else_=func.min(u.c.role_id),
    )
    return (
        select(u.c.person_id, role_id.label("role_id"))
        .group_by(u.c.person_id)
        .order_by(u.c.person_id)
        .limit(limit)
    )


FRAGMENTS: Mapping[str, Fragment] = {
    "users": _users,
    "role": _role,
    "group": _group,
    "guardians_of_group": _guardians_of_group,
    "guardians_of_users": _guardians_of_users,
    "all_users": _all_users,
    "segment": _segment,
    "compound": _compound,
}


def check_fragments_cover(kinds: Sequence[str], fragments: Mapping[str, Fragment]) -> None:
    """Every audience kind has a fragment, and every fragment a kind (R-PLAT, fail loudly).

    A kind without a fragment would otherwise surface as a fan-out that completes having
    notified nobody; the CHECK on audience->>'kind' guards the data path, this the code path.
    """
    missing = sorted(set(kinds) - set(fragments))
    extra = sorted(set(fragments) - set(kinds))
    if missing or extra:
        raise ConfigurationError(
            f"audience resolver map out of step with the vocabulary: "
            f"no fragment for {missing}, fragment for unknown kinds {extra}"
        )


check_fragments_cover(vocabulary.AUDIENCE_KINDS, FRAGMENTS)


def fragment_for(kind: object) -> Fragment:
    """The fragment of a kind; an unknown kind raises, never resolves to nobody (R-AUD-16)."""
    fragment = FRAGMENTS.get(kind) if isinstance(kind, str) else None
    if fragment is None:
        raise AudienceInvalid(f"unknown audience kind {kind!r}")
    return fragment


def page_query(
    tenant_id: str,
    spec: Mapping[str, Any],
    after_person_id: Cursor,
    limit: int,
    *,
    created_until: datetime | None = None,
) -> Select[Any]:
    """One page: live people, `person.id > :after ORDER BY person.id LIMIT :limit` (R-AUD-5).

    The outer person filter applies whatever the fragment did (R-AUD-6); the person is read by
    a primary-key probe per matched id, never by joining `person` as a whole.

    With `created_until` (a broadcast's frozen audience, R-BCAST-8) each row also says whether
    the person existed then (`admitted`). It is a column, not a filter: the page keeps its
    length, so a page whose tail joined after the freeze is not mistaken for the last one.
    """
    matched = fragment_for(spec.get("kind"))(tenant_id, spec, after_person_id, limit).subquery(
        "matched"
    )
    p = s.person
    person = (
        select(p.c.id, p.c.public_id, p.c.full_name, p.c.locale, p.c.status, p.c.created_at)
        .where(
            p.c.id == matched.c.person_id,
            p.c.tenant_id == tenant_id,
            p.c.deleted_at.is_(None),
            p.c.id > after_person_id,
        )
        .limit(1)
        .lateral("person")
    )
    return (
        select(
            person.c.id,
            person.c.public_id,
            person.c.full_name,
            person.c.locale,
            person.c.status,
            matched.c.role_id,
            (
                true()
                if created_until is None
                else person.c.created_at <= literal(created_until, s.TZ)
            ).label("admitted"),
        )
        .select_from(matched.join(person, true()))
        .order_by(person.c.id)
        .limit(limit)
    )


async def select_page(
    conn: AsyncConnection,
    tenant_id: str,
    spec: Mapping[str, Any],
    after_person_id: int,
    limit: int,
    *,
    created_until: datetime | None = None,
) -> Sequence[Row[Any]]:
    # A page's best plan depends on the tenant and the cursor. psycopg prepares a statement after
    # a few runs and PostgreSQL may then switch to one generic plan that knows neither, which can
    # read a whole tenant per page; the page is sent unprepared, so it is planned afresh each
    # time with its values (about 0.5 ms). Not plan_cache_mode = force_custom_plan for the
    # transaction: the fan-out writes the page's rows after it in the same transaction, and that
    # setting re-planned the foreign-key check of every row written (herald.db.compiled).
    async with compiled.unprepared(conn):
        result = await conn.execute(
            page_query(tenant_id, spec, after_person_id, limit, created_until=created_until)
        )
        rows: Sequence[Row[Any]] = result.all()
    return rows
