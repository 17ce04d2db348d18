"""Routes of the broadcast admin (`/v1/admin/broadcasts`, DESIGN.md §5.2), for operators.

Thin: the feature flag (off: 404 NOTIFICATION_FEATURE_DISABLED on every route, R-BCAST-13),
the operator, the query string, one transaction and one service call, which checks the
permission, validates the body and writes the audit record.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Request, status

from herald.admin.paging import parse_page
from herald.auth.deps import Cursor, Limit, OperatorDep, body_of, state, transaction
from herald.errors import FeatureDisabled
from herald.scheduling.broadcasts import service
from herald.scheduling.broadcasts.schemas import (
    ApproveInput,
    AudiencePreview,
    BroadcastInput,
    BroadcastOut,
    BroadcastPage,
    BroadcastReport,
    BroadcastUpdate,
)


def require_broadcasts(request: Request) -> None:
    """HERALD_FEATURE_BROADCASTS off: every broadcast route answers 404 (R-BCAST-13)."""
    if not state(request).settings.feature_broadcasts:
        raise FeatureDisabled("broadcasts are switched off (HERALD_FEATURE_BROADCASTS)")


router = APIRouter(
    prefix="/v1/admin/broadcasts",
    tags=["admin: broadcasts"],
    dependencies=[Depends(require_broadcasts)],
)

Pagination = Annotated[str | None, Query(include_in_schema=False)]
# Plain JSON validated by the service: a bad field is a 400 naming it, never the generic 422.
RawBody = Annotated[Any, Body()]


@router.get("", response_model=BroadcastPage)
async def list_broadcasts(
    request: Request,
    operator: OperatorDep,
    limit: Limit = None,
    cursor: Cursor = None,
    pagination: Pagination = None,
) -> BroadcastPage:
    page = parse_page(limit=limit, cursor=cursor, pagination=pagination)
    async with transaction(request) as conn:
        return await service.list_broadcasts(conn, operator, page)


@router.post(
    "",
    response_model=BroadcastOut,
    status_code=status.HTTP_201_CREATED,
    openapi_extra=body_of(BroadcastInput),
)
async def create_broadcast(
    request: Request, operator: OperatorDep, body: RawBody = None
) -> BroadcastOut:
    async with transaction(request) as conn:
        return await service.create_broadcast(conn, operator, state(request).registry, body)


@router.get("/{broadcast_id}", response_model=BroadcastOut)
async def get_broadcast(request: Request, operator: OperatorDep, broadcast_id: str) -> BroadcastOut:
    async with transaction(request) as conn:
        return await service.get_broadcast(conn, operator, broadcast_id)


@router.put("/{broadcast_id}", response_model=BroadcastOut, openapi_extra=body_of(BroadcastUpdate))
async def update_broadcast(
    request: Request, operator: OperatorDep, broadcast_id: str, body: RawBody = None
) -> BroadcastOut:
    async with transaction(request) as conn:
        return await service.update_broadcast(
            conn, operator, state(request).registry, broadcast_id, body
        )


@router.post(
    "/{broadcast_id}/approve", response_model=BroadcastOut, openapi_extra=body_of(ApproveInput)
)
async def approve_broadcast(
    request: Request, operator: OperatorDep, broadcast_id: str, body: RawBody = None
) -> BroadcastOut:
    async with transaction(request) as conn:
        return await service.approve_broadcast(
            conn, operator, state(request).registry, broadcast_id, body
        )


@router.post("/{broadcast_id}/cancel", response_model=BroadcastOut)
async def cancel_broadcast(
    request: Request, operator: OperatorDep, broadcast_id: str
) -> BroadcastOut:
    async with transaction(request) as conn:
        return await service.cancel_broadcast(conn, operator, broadcast_id)


@router.get("/{broadcast_id}/audience-preview", response_model=AudiencePreview)
async def audience_preview(
    request: Request, operator: OperatorDep, broadcast_id: str
) -> AudiencePreview:
    async with transaction(request) as conn:
        return await service.audience_preview(conn, operator, broadcast_id)


@router.get("/{broadcast_id}/report", response_model=BroadcastReport)
async def report(request: Request, operator: OperatorDep, broadcast_id: str) -> BroadcastReport:
    async with transaction(request) as conn:
        return await service.report(conn, operator, broadcast_id)
