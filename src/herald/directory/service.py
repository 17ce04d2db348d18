"""The directory: people, roles, groups, memberships and guardianships, as the host syncs them.

Herald only reads the directory when it resolves audiences (R-AUD-2); the host writes it, over
HTTP (`directory:write`) or by calling these functions with its own connection. Every function
takes the connection first, scopes every row to `tenant_id` and never commits: the caller owns the
transaction. Each checks everything it can before its first write, so a refused call has written
nothing.

Deletes are soft (`deleted_at`): audiences skip deleted rows (R-AUD-6, R-AUD-7) while history keeps
them, and a later PUT of the same external id revives the row. Deleting a person or group leaves
their memberships, guardianships and role grants in place; they take effect again on revival.

Example (seeding a directory from code):

    from herald.directory import service as directory
    from herald.directory.service import GroupInput, PersonInput, RoleInput

    async with engine.begin() as conn:
        await directory.upsert_role(conn, "t1", "teacher", RoleInput(scope_kind="staff"))
        await directory.upsert_person(
            conn, "t1", "p-1", PersonInput(full_name="Asha", email="a@x.np", roles=["teacher"])
        )
        await directory.upsert_group(conn, "t1", "class-7a", GroupInput(name="Class 7A"))
        await directory.put_membership(conn, "t1", "class-7a", "p-1", "teacher")
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.admin.providers import service as provider_accounts
from herald.audit import service as audit
from herald.auth.service import Operator
from herald.channels import destination
from herald.config import Settings, get_settings
from herald.directory.queries import erasure, records
from herald.directory.schemas import (
    MAX_BATCH,
    GroupInput,
    PersonBatchItem,
    PersonInput,
    RoleInput,
)
from herald.errors import (
    DirectoryBatchDuplicate,
    DirectoryBatchTooLarge,
    DirectoryGuardianshipSelf,
    DirectoryRoleUnknown,
    DirectoryValueInvalid,
    GroupNotFound,
    GuardianshipNotFound,
    MembershipNotFound,
    PersonNotFound,
    ValidationFailed,
)
from herald.scheduling.broadcasts import service as broadcasts

__all__ = [
    "BatchResult",
    "Erasure",
    "GroupInput",
    "PersonBatchItem",
    "PersonInput",
    "RoleInput",
    "UpsertResult",
    "delete_group",
    "delete_guardianship",
    "delete_membership",
    "delete_person",
    "erase_person",
    "put_guardianship",
    "put_guardianships",
    "put_membership",
    "put_memberships",
    "upsert_group",
    "upsert_people",
    "upsert_person",
    "upsert_role",
]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class UpsertResult:
    """The row's public id, and whether this call inserted it (False: updated or revived)."""

    id: uuid.UUID
    created: bool


@dataclass(frozen=True)
class BatchResult:
    created: int
    updated: int


def _key(value: str, what: str) -> str:
    """Library callers skip the HTTP schema, so the path-style keys are checked here too."""
    if not value or len(value) > 255 or _CONTROL.search(value):
        raise DirectoryValueInvalid(
            f"{what} must be 1 to 255 characters without control characters"
        )
    return value


# ---------------------------------------------------------------------------------------------
# People


async def upsert_person(
    conn: AsyncConnection,
    tenant_id: str,
    external_id: str,
    person: PersonInput,
    *,
    settings: Settings | None = None,
) -> UpsertResult:
    """Create or replace one person by external id, reviving a soft-deleted one.

    The whole record is replaced: a field `person` leaves unset takes its default, and
    `person.roles` becomes the person's entire role set. Raises DirectoryRoleUnknown (nothing
    written) when a role code is not defined in the tenant.
    """
    _key(external_id, "externalId")
    (row,) = await _write_people(conn, tenant_id, [(external_id, person)], settings)
    return UpsertResult(id=row.public_id, created=row.created)


async def upsert_people(
    conn: AsyncConnection,
    tenant_id: str,
    people: Sequence[PersonBatchItem],
    *,
    settings: Settings | None = None,
) -> BatchResult:
    """Create or replace up to 1,000 people in a few set-based statements.

    Each item has upsert_person's meaning. All or nothing: a batch that is too large, names an
    external id twice or uses an unknown role code raises before anything is written.
    """
    if len(people) > MAX_BATCH:
        raise DirectoryBatchTooLarge(
            f"a batch holds at most {MAX_BATCH} people; this one has {len(people)}"
        )
    repeated = sorted(eid for eid, n in Counter(p.external_id for p in people).items() if n > 1)
    if repeated:
        raise DirectoryBatchDuplicate(
            f"external id(s) appear more than once: {', '.join(repeated[:10])}"
        )
    rows = await _write_people(conn, tenant_id, [(p.external_id, p) for p in people], settings)
    created = sum(1 for row in rows if row.created)
    return BatchResult(created=created, updated=len(rows) - created)


async def _check_teams_webhooks(
    people: Sequence[tuple[str, PersonInput]], settings: Settings | None
) -> None:
    """Every Teams webhook URL through the webhook SSRF guard: https, public addresses only (or
    what HERALD_WEBHOOK_ALLOWED_HOSTS / _ALLOW_LOOPBACK allow). Raises before anything is written;
    the message names the person, never the URL (it is a credential)."""
    wanted = [(eid, p.teams_webhook_url) for eid, p in people if p.teams_webhook_url]
    if not wanted:
        return
    settings = settings or get_settings()
    checked: dict[str, None] = {}
    for external_id, url in wanted:
        if url in checked:
            continue
        try:
            await destination.resolve(url, settings)
        except ValidationFailed as exc:
            raise type(exc)(f"teamsWebhookUrl of {external_id}: {exc.message}") from None
        checked[url] = None


async def _write_people(
    conn: AsyncConnection,
    tenant_id: str,
    people: Sequence[tuple[str, PersonInput]],
    settings: Settings | None = None,
) -> list[records.UpsertedPerson]:
    await _check_teams_webhooks(people, settings)
    # Every role code of the whole batch is resolved in one query, before any write.
    wanted = {code for _, person in people for code in person.role_codes()}
    role_ids = await records.role_ids_by_code(conn, tenant_id, sorted(wanted))
    unknown = sorted(wanted - role_ids.keys())
    if unknown:
        raise DirectoryRoleUnknown(
            f"unknown role code(s): {', '.join(unknown[:10])}; define them with PUT /v1/roles/{{code}}"
        )
    upserted = await records.upsert_people(
        conn,
        tenant_id,
        [
            records.PersonRow(
                external_id=external_id,
                full_name=person.full_name,
                email=person.email,
                phone=person.phone,
                locale=person.locale,
                timezone=person.timezone,
                country=person.country,
                status=person.status,
                telegram_chat_id=person.telegram_chat_id,
                slack_id=person.slack_id,
                teams_webhook_url=person.teams_webhook_url,
            )
            for external_id, person in people
        ],
    )
    person_ids = {row.external_id: row.id for row in upserted}
    grants = [
        (person_ids[external_id], role_ids[code])
        for external_id, person in people
        for code in person.role_codes()
    ]
    await records.replace_person_roles(conn, tenant_id, list(person_ids.values()), grants)
    return upserted


async def delete_person(conn: AsyncConnection, tenant_id: str, external_id: str) -> None:
    """Soft-delete a person (idempotent); raises PersonNotFound when the tenant has none."""
    if not await records.soft_delete_person(conn, tenant_id, external_id):
        raise PersonNotFound(f"no person {external_id!r}")


@dataclass(frozen=True)
class Erasure:
    """What an erasure left: the person's public id (now the orphaned snapshot on the kept
    recipient rows), how many recipient rows were kept and how many deliveries were scrubbed."""

    id: uuid.UUID
    recipients_kept: int
    deliveries_scrubbed: int
    # Events addressed to this person alone whose variables were emptied.
    events_scrubbed: int = 0


async def erase_person(
    conn: AsyncConnection,
    tenant_id: str,
    external_id: str,
    *,
    operator: Operator | None = None,
) -> Erasure:
    """Hard-delete a person on a genuine erasure request (R-ERASE-1..3), in the caller's
    transaction, live or soft-deleted alike; raises PersonNotFound when the tenant has none.

    Their notification_recipient rows stay, with user_id NULL and user_public_id_snapshot intact,
    so the record that a (security) notice was sent survives (R-ERASE-1); in the same transaction
    every delivery beneath them loses its destination_hint, rendered_title and rendered_body, and
    the recipient rows lose their per-recipient variables (the person's name), so only the kind,
    the orphaned uuid and the timestamps remain (R-ERASE-2, R-ERASE-3). Events addressed to them
    alone (a `users` audience of just them) lose their variables too, which were theirs alone;
    events others received keep theirs (erasure.scrub_variables_of_events_for says why). Role
    grants, memberships, guardianships, preferences, push tokens, feed read receipts, the
    follow-ups whose audience names the person and their escalation steps (a pending one must
    never send) go with the person.

    Audited as `erase` on the person's public id, with counts only (nothing personal); an API key
    caller is recorded as `api_key` unless `operator` says who acted.
    """
    _key(external_id, "externalId")
    person = await erasure.lock_person_for_erasure(conn, tenant_id, external_id)
    if person is None:
        raise PersonNotFound(f"no person {external_id!r}")
    scrubbed = await erasure.scrub_deliveries_of_person(conn, person.id)
    events = await erasure.scrub_variables_of_events_for(conn, tenant_id, external_id)
    # An operator's name on the broadcasts they drafted or approved (kept distinct per person).
    await broadcasts.forget_operator(conn, tenant_id, external_id, person.public_id)
    # And on the provider accounts they last changed (the accounts are the tenant's and stay).
    await provider_accounts.forget_operator(conn, tenant_id, external_id, person.public_id)
    kept = await erasure.orphan_recipients_of_person(conn, person.id)
    followups = await erasure.delete_followups_naming_person(conn, tenant_id, external_id)
    await erasure.delete_undeliverable_of_person(conn, person.id)
    await erasure.delete_escalation_steps_of_person(conn, person.id)
    await erasure.hard_delete_person(conn, person.id)
    await audit.record_audit(
        conn,
        operator or _api_key_operator(tenant_id),
        "erase",
        "person",
        str(person.public_id),
        {
            "recipientsKept": kept,
            "deliveriesScrubbed": scrubbed,
            "eventsScrubbed": events,
            **({"followupsDeleted": followups} if followups else {}),
        },
    )
    return Erasure(
        id=person.public_id,
        recipients_kept=kept,
        deliveries_scrubbed=scrubbed,
        events_scrubbed=events,
    )


def _api_key_operator(tenant_id: str) -> Operator:
    return Operator(
        tenant_id=tenant_id,
        actor_kind="api_key",
        actor_id="api_key",
        person_id=None,
        permissions=frozenset(),
        superadmin=True,
    )


async def _live_person(conn: AsyncConnection, tenant_id: str, external_id: str) -> int:
    found = await records.live_person_ids(conn, tenant_id, [external_id])
    if external_id not in found:
        raise PersonNotFound(f"no person {external_id!r}")
    return found[external_id]


# ---------------------------------------------------------------------------------------------
# Roles


async def upsert_role(
    conn: AsyncConnection, tenant_id: str, code: str, role: RoleInput
) -> UpsertResult:
    """Create or replace a role by code; its name defaults to the code."""
    _key(code, "role code")
    if any(ch.isspace() for ch in code):
        raise DirectoryValueInvalid("a role code has no whitespace")
    public_id, created = await records.upsert_role(
        conn,
        tenant_id,
        code,
        name=role.name or code,
        scope_kind=role.scope_kind,
        permissions=role.permission_list(),
        is_superadmin=role.superadmin,
    )
    return UpsertResult(id=public_id, created=created)


# ---------------------------------------------------------------------------------------------
# Groups


async def upsert_group(
    conn: AsyncConnection, tenant_id: str, external_id: str, group: GroupInput
) -> UpsertResult:
    """Create or replace a group by external id, reviving a soft-deleted one."""
    _key(external_id, "externalId")
    public_id, created = await records.upsert_group(
        conn, tenant_id, external_id, name=group.name, kind=group.kind
    )
    return UpsertResult(id=public_id, created=created)


async def delete_group(conn: AsyncConnection, tenant_id: str, external_id: str) -> None:
    """Soft-delete a group (idempotent); raises GroupNotFound when the tenant has none."""
    if not await records.soft_delete_group(conn, tenant_id, external_id):
        raise GroupNotFound(f"no group {external_id!r}")


async def _live_group(conn: AsyncConnection, tenant_id: str, external_id: str) -> int:
    group_id = await records.live_group_id(conn, tenant_id, external_id)
    if group_id is None:
        raise GroupNotFound(f"no group {external_id!r}")
    return group_id


async def put_membership(
    conn: AsyncConnection,
    tenant_id: str,
    group_external_id: str,
    person_external_id: str,
    member_role: vocabulary.MemberRole,
) -> bool:
    """Put a live person in a live group as `student` or `teacher`; True when the row is new.

    Re-putting updates the member role and revives a soft-deleted membership. Raises
    GroupNotFound / PersonNotFound when either is unknown or deleted.
    """
    if member_role not in vocabulary.MEMBER_ROLES:
        raise ValidationFailed(f"memberRole must be one of {', '.join(vocabulary.MEMBER_ROLES)}")
    group_id = await _live_group(conn, tenant_id, group_external_id)
    person_id = await _live_person(conn, tenant_id, person_external_id)
    return await records.upsert_membership(conn, tenant_id, group_id, person_id, member_role)


async def put_memberships(
    conn: AsyncConnection,
    tenant_id: str,
    memberships: Sequence[tuple[str, str, vocabulary.MemberRole]],
) -> int:
    """put_membership for up to 1,000 (group, person, member role) triples in a few set-based
    statements; returns how many are new. All or nothing: an unknown group or person raises
    before anything is written. Each pair at most once."""
    if len(memberships) > MAX_BATCH:
        raise DirectoryBatchTooLarge(f"a batch holds at most {MAX_BATCH} memberships")
    for _, _, member_role in memberships:
        if member_role not in vocabulary.MEMBER_ROLES:
            raise ValidationFailed(
                f"memberRole must be one of {', '.join(vocabulary.MEMBER_ROLES)}"
            )
    groups = await records.live_group_ids(conn, tenant_id, sorted({g for g, _, _ in memberships}))
    people = await records.live_person_ids(conn, tenant_id, sorted({p for _, p, _ in memberships}))
    for group, person, _ in memberships:
        if group not in groups:
            raise GroupNotFound(f"no group {group!r}")
        if person not in people:
            raise PersonNotFound(f"no person {person!r}")
    return await records.upsert_memberships(
        conn, tenant_id, [(groups[g], people[p], role) for g, p, role in memberships]
    )


async def delete_membership(
    conn: AsyncConnection, tenant_id: str, group_external_id: str, person_external_id: str
) -> None:
    """Soft-delete a membership (idempotent); MembershipNotFound when there never was one."""
    group_id = await _live_group(conn, tenant_id, group_external_id)
    person_id = await _live_person(conn, tenant_id, person_external_id)
    if not await records.soft_delete_membership(conn, tenant_id, group_id, person_id):
        raise MembershipNotFound(f"{person_external_id!r} is not in group {group_external_id!r}")


# ---------------------------------------------------------------------------------------------
# Guardianships


async def _student_and_guardian(
    conn: AsyncConnection, tenant_id: str, student_external_id: str, guardian_external_id: str
) -> tuple[int, int]:
    if student_external_id == guardian_external_id:
        raise DirectoryGuardianshipSelf()
    found = await records.live_person_ids(
        conn, tenant_id, [student_external_id, guardian_external_id]
    )
    for external_id in (student_external_id, guardian_external_id):
        if external_id not in found:
            raise PersonNotFound(f"no person {external_id!r}")
    return found[student_external_id], found[guardian_external_id]


async def put_guardianship(
    conn: AsyncConnection, tenant_id: str, student_external_id: str, guardian_external_id: str
) -> bool:
    """Record that a guardian answers for a student (both live people); True when new.

    Revives a soft-deleted guardianship. Guardian audiences reach guardians only through these
    rows (R-AUD-11).
    """
    student_id, guardian_id = await _student_and_guardian(
        conn, tenant_id, student_external_id, guardian_external_id
    )
    return await records.upsert_guardianship(conn, tenant_id, student_id, guardian_id)


async def put_guardianships(
    conn: AsyncConnection, tenant_id: str, pairs: Sequence[tuple[str, str]]
) -> int:
    """put_guardianship for up to 1,000 (student, guardian) pairs in a few set-based
    statements; returns how many are new. All or nothing, like put_memberships."""
    if len(pairs) > MAX_BATCH:
        raise DirectoryBatchTooLarge(f"a batch holds at most {MAX_BATCH} guardianships")
    if any(student == guardian for student, guardian in pairs):
        raise DirectoryGuardianshipSelf()
    found = await records.live_person_ids(
        conn, tenant_id, sorted({x for pair in pairs for x in pair})
    )
    for external_id in (x for pair in pairs for x in pair):
        if external_id not in found:
            raise PersonNotFound(f"no person {external_id!r}")
    return await records.upsert_guardianships(
        conn, tenant_id, [(found[st], found[gd]) for st, gd in pairs]
    )


async def delete_guardianship(
    conn: AsyncConnection, tenant_id: str, student_external_id: str, guardian_external_id: str
) -> None:
    """Soft-delete a guardianship (idempotent); GuardianshipNotFound when there never was one."""
    student_id, guardian_id = await _student_and_guardian(
        conn, tenant_id, student_external_id, guardian_external_id
    )
    if not await records.soft_delete_guardianship(conn, tenant_id, student_id, guardian_id):
        raise GuardianshipNotFound(
            f"{guardian_external_id!r} is not a guardian of {student_external_id!r}"
        )
