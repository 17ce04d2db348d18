"""`/v1/followups` (DESIGN.md §5.2): arm (idempotent on key), read, acknowledge, reopen, cancel.

Thin: the API key (scope followups:write; events:read to read), one transaction under the
caller's tenant, one service call. Another tenant's key finds nothing: 404.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response, status

from herald.auth.deps import EventsReader, FollowupsWriter, body_of, state, transaction
from herald.followups import service
from herald.followups.schemas import FollowupArm, FollowupOut

router = APIRouter(prefix="/v1/followups", tags=["followups"])

# Taken as plain JSON and validated by the service, so a bad field is a 400
# NOTIFICATION_FOLLOWUP_INVALID naming it rather than the generic 422.
RawBody = Annotated[Any, Body()]


@router.post(
    "",
    response_model=FollowupOut,
    status_code=status.HTTP_201_CREATED,
    openapi_extra=body_of(FollowupArm),
)
async def arm_followup(
    request: Request, response: Response, caller: FollowupsWriter, body: RawBody = None
) -> FollowupOut:
    app = state(request)
    data = service.parse_arm(body)
    values = service.check_arm(caller.tenant_id, app.registry, data, app.settings)
    async with transaction(request) as conn:
        followup, created = await service.run_plan_async(
            conn, service.arm_plan(caller.tenant_id, values, covered=data.covered)
        )
    if not created:
        response.status_code = status.HTTP_200_OK
    return followup


@router.get("/{key}", response_model=FollowupOut)
async def get_followup(request: Request, caller: EventsReader, key: str) -> FollowupOut:
    async with transaction(request) as conn:
        return await service.get(conn, caller.tenant_id, key)


@router.post("/{key}/acknowledge", response_model=FollowupOut)
async def acknowledge_followup(request: Request, caller: FollowupsWriter, key: str) -> FollowupOut:
    async with transaction(request) as conn:
        return await service.aacknowledge(conn, caller.tenant_id, key)


@router.post("/{key}/reopen", response_model=FollowupOut)
async def reopen_followup(request: Request, caller: FollowupsWriter, key: str) -> FollowupOut:
    async with transaction(request) as conn:
        return await service.areopen(conn, caller.tenant_id, key)


@router.post("/{key}/cancel", response_model=FollowupOut)
async def cancel_followup(request: Request, caller: FollowupsWriter, key: str) -> FollowupOut:
    async with transaction(request) as conn:
        return await service.acancel(conn, caller.tenant_id, key)
