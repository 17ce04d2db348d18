"""The directory surface (DESIGN.md §5.1): the host writes people, roles, groups, memberships and
guardianships with an API key of scope `directory:write`. Every row lands in the key's tenant, so
another tenant's external ids are simply not found (404)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response

from herald.auth.deps import DirectoryWriter, state, transaction
from herald.db import conflicts
from herald.directory import service
from herald.directory.schemas import (
    ROLE_CODE_PATTERN,
    GroupInput,
    GroupUpserted,
    GuardianshipPut,
    MembershipInput,
    MembershipPut,
    PeopleBatch,
    PeopleBatchResult,
    PersonErased,
    PersonInput,
    PersonUpserted,
    RoleInput,
    RoleUpserted,
)

router = APIRouter(prefix="/v1", tags=["directory"])

_KEY = r"^[^\x00-\x1f\x7f]+$"
# Path keys are the host's external ids (camelCase names, as in DESIGN.md §5.1).
ExternalIdPath = Annotated[
    str, Path(alias="externalId", min_length=1, max_length=255, pattern=_KEY)
]
GroupIdPath = Annotated[
    str, Path(alias="groupExternalId", min_length=1, max_length=255, pattern=_KEY)
]
PersonIdPath = Annotated[
    str, Path(alias="personExternalId", min_length=1, max_length=255, pattern=_KEY)
]
StudentIdPath = Annotated[
    str, Path(alias="studentExternalId", min_length=1, max_length=255, pattern=_KEY)
]
GuardianIdPath = Annotated[
    str, Path(alias="guardianExternalId", min_length=1, max_length=255, pattern=_KEY)
]
RoleCodePath = Annotated[str, Path(min_length=1, max_length=64, pattern=ROLE_CODE_PATTERN)]


def _updated(model: type[Any]) -> dict[int | str, dict[str, Any]]:
    """A PUT answers 201 when it created the record and 200 when it replaced one."""
    return {200: {"model": model, "description": "Updated (or revived)"}}


def _created(response: Response, created: bool) -> None:
    response.status_code = 201 if created else 200


@router.put(
    "/people/{externalId}",
    response_model=PersonUpserted,
    status_code=201,
    responses=_updated(PersonUpserted),
)
async def put_person(
    external_id: ExternalIdPath,
    body: PersonInput,
    request: Request,
    response: Response,
    caller: DirectoryWriter,
) -> PersonUpserted:
    """Create or replace a person (201 created / 200 updated or revived)."""
    async with transaction(request) as conn:
        result = await service.upsert_person(
            conn, caller.tenant_id, external_id, body, settings=state(request).settings
        )
    _created(response, result.created)
    return PersonUpserted(id=result.id, external_id=external_id, created=result.created)


@router.delete("/people/{externalId}", status_code=204)
async def delete_person(
    external_id: ExternalIdPath, request: Request, caller: DirectoryWriter
) -> None:
    """Soft-delete a person; 404 PERSON_NOT_FOUND when the tenant has none."""
    async with transaction(request) as conn:
        await service.delete_person(conn, caller.tenant_id, external_id)


@router.post("/people/{externalId}/erase", response_model=PersonErased)
async def erase_person(
    external_id: ExternalIdPath, request: Request, caller: DirectoryWriter
) -> PersonErased:
    """Hard-delete a person on a genuine erasure request: their notification records stay with an
    orphaned id and no personal data; 404 PERSON_NOT_FOUND when the tenant has none."""

    async def erase() -> service.Erasure:
        async with transaction(request) as conn:
            return await service.erase_person(conn, caller.tenant_id, external_id)

    # The erasure rewrites every delivery of the person, which a worker may be recording at the
    # same moment: a deadlock between the two rolls one back, and the erasure is run again.
    erased = await conflicts.retrying(erase, what="erasure")
    return PersonErased(
        id=erased.id,
        recipients_kept=erased.recipients_kept,
        deliveries_scrubbed=erased.deliveries_scrubbed,
        events_scrubbed=erased.events_scrubbed,
    )


@router.post("/people:batch", response_model=PeopleBatchResult)
async def put_people(
    body: PeopleBatch, request: Request, caller: DirectoryWriter
) -> PeopleBatchResult:
    """Create or replace up to 1,000 people in one transaction: all of them or none."""
    async with transaction(request) as conn:
        result = await service.upsert_people(
            conn, caller.tenant_id, body.people, settings=state(request).settings
        )
    return PeopleBatchResult(created=result.created, updated=result.updated)


@router.put(
    "/roles/{code}", response_model=RoleUpserted, status_code=201, responses=_updated(RoleUpserted)
)
async def put_role(
    code: RoleCodePath,
    body: RoleInput,
    request: Request,
    response: Response,
    caller: DirectoryWriter,
) -> RoleUpserted:
    """Create or replace a role (201 created / 200 updated)."""
    async with transaction(request) as conn:
        result = await service.upsert_role(conn, caller.tenant_id, code, body)
    _created(response, result.created)
    return RoleUpserted(id=result.id, code=code, created=result.created)


@router.put(
    "/groups/{externalId}",
    response_model=GroupUpserted,
    status_code=201,
    responses=_updated(GroupUpserted),
)
async def put_group(
    external_id: ExternalIdPath,
    body: GroupInput,
    request: Request,
    response: Response,
    caller: DirectoryWriter,
) -> GroupUpserted:
    """Create or replace a group (201 created / 200 updated or revived)."""
    async with transaction(request) as conn:
        result = await service.upsert_group(conn, caller.tenant_id, external_id, body)
    _created(response, result.created)
    return GroupUpserted(id=result.id, external_id=external_id, created=result.created)


@router.delete("/groups/{externalId}", status_code=204)
async def delete_group(
    external_id: ExternalIdPath, request: Request, caller: DirectoryWriter
) -> None:
    """Soft-delete a group; 404 GROUP_NOT_FOUND when the tenant has none."""
    async with transaction(request) as conn:
        await service.delete_group(conn, caller.tenant_id, external_id)


@router.put(
    "/groups/{groupExternalId}/members/{personExternalId}",
    response_model=MembershipPut,
    status_code=201,
    responses=_updated(MembershipPut),
)
async def put_membership(
    group_external_id: GroupIdPath,
    person_external_id: PersonIdPath,
    body: MembershipInput,
    request: Request,
    response: Response,
    caller: DirectoryWriter,
) -> MembershipPut:
    """Put a person in a group (201 new / 200 updated or revived)."""
    async with transaction(request) as conn:
        created = await service.put_membership(
            conn, caller.tenant_id, group_external_id, person_external_id, body.member_role
        )
    _created(response, created)
    return MembershipPut(
        group_external_id=group_external_id,
        person_external_id=person_external_id,
        member_role=body.member_role,
        created=created,
    )


@router.delete("/groups/{groupExternalId}/members/{personExternalId}", status_code=204)
async def delete_membership(
    group_external_id: GroupIdPath,
    person_external_id: PersonIdPath,
    request: Request,
    caller: DirectoryWriter,
) -> None:
    """Soft-delete a membership; 404 when the group, the person or the membership is unknown."""
    async with transaction(request) as conn:
        await service.delete_membership(
            conn, caller.tenant_id, group_external_id, person_external_id
        )


@router.put(
    "/guardianships/{studentExternalId}/{guardianExternalId}",
    response_model=GuardianshipPut,
    status_code=201,
    responses=_updated(GuardianshipPut),
)
async def put_guardianship(
    student_external_id: StudentIdPath,
    guardian_external_id: GuardianIdPath,
    request: Request,
    response: Response,
    caller: DirectoryWriter,
) -> GuardianshipPut:
    """Record a guardian of a student (201 new / 200 revived or unchanged); no body."""
    async with transaction(request) as conn:
        created = await service.put_guardianship(
            conn, caller.tenant_id, student_external_id, guardian_external_id
        )
    _created(response, created)
    return GuardianshipPut(
        student_external_id=student_external_id,
        guardian_external_id=guardian_external_id,
        created=created,
    )


@router.delete("/guardianships/{studentExternalId}/{guardianExternalId}", status_code=204)
async def delete_guardianship(
    student_external_id: StudentIdPath,
    guardian_external_id: GuardianIdPath,
    request: Request,
    caller: DirectoryWriter,
) -> None:
    """Soft-delete a guardianship; 404 when either person or the guardianship is unknown."""
    async with transaction(request) as conn:
        await service.delete_guardianship(
            conn, caller.tenant_id, student_external_id, guardian_external_id
        )
