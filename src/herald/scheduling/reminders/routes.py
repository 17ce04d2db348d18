"""Routes of the reminder admin (`/v1/admin/reminders`, DESIGN.md §5.2), for operators.

Thin: the feature flag (off: 404 NOTIFICATION_FEATURE_DISABLED on every route), the operator,
the query string, one transaction and one service call, which checks the permission, validates
the body (every refusal a 400 naming the field) and writes the audit record.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Request, Response, status

from herald.admin.paging import parse_page, parse_version
from herald.auth.deps import Cursor, Limit, OperatorDep, body_of, state, transaction
from herald.errors import FeatureDisabled
from herald.scheduling.reminders import service
from herald.scheduling.reminders.schemas import (
    OccurrencePage,
    ReminderInput,
    ReminderOut,
    ReminderPage,
    ReminderUpdate,
    RunPage,
)


def require_reminders(request: Request) -> None:
    """HERALD_FEATURE_REMINDERS off: every reminder route answers 404 (R-REMIND-16)."""
    if not state(request).settings.feature_reminders:
        raise FeatureDisabled("reminders are switched off (HERALD_FEATURE_REMINDERS)")


router = APIRouter(
    prefix="/v1/admin/reminders",
    tags=["admin: reminders"],
    dependencies=[Depends(require_reminders)],
)

Pagination = Annotated[str | None, Query(include_in_schema=False)]
# The body is taken as plain JSON and validated by the service, so a bad field is a 400 with
# NOTIFICATION_REMINDER_INVALID naming it rather than the generic 422.
RawBody = Annotated[Any, Body()]
VersionQuery = Annotated[int | None, Query(ge=1, le=2**31 - 1)]


@router.get("", response_model=ReminderPage)
async def list_reminders(
    request: Request,
    operator: OperatorDep,
    limit: Limit = None,
    cursor: Cursor = None,
    pagination: Pagination = None,
) -> ReminderPage:
    page = parse_page(limit=limit, cursor=cursor, pagination=pagination)
    async with transaction(request) as conn:
        return await service.list_reminders(conn, operator, page)


@router.post(
    "",
    response_model=ReminderOut,
    status_code=status.HTTP_201_CREATED,
    openapi_extra=body_of(ReminderInput),
)
async def create_reminder(
    request: Request, operator: OperatorDep, body: RawBody = None
) -> ReminderOut:
    async with transaction(request) as conn:
        return await service.create_reminder(conn, operator, state(request).registry, body)


@router.get("/{reminder_id}", response_model=ReminderOut)
async def get_reminder(request: Request, operator: OperatorDep, reminder_id: str) -> ReminderOut:
    async with transaction(request) as conn:
        return await service.get_reminder(conn, operator, reminder_id)


@router.put("/{reminder_id}", response_model=ReminderOut, openapi_extra=body_of(ReminderUpdate))
async def update_reminder(
    request: Request, operator: OperatorDep, reminder_id: str, body: RawBody = None
) -> ReminderOut:
    async with transaction(request) as conn:
        return await service.update_reminder(
            conn, operator, state(request).registry, reminder_id, body
        )


@router.delete("/{reminder_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_reminder(
    request: Request, operator: OperatorDep, reminder_id: str, version: VersionQuery = None
) -> Response:
    expected = parse_version(version)
    async with transaction(request) as conn:
        await service.delete_reminder(conn, operator, reminder_id, expected)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{reminder_id}/occurrences", response_model=OccurrencePage)
async def preview_occurrences(
    request: Request,
    operator: OperatorDep,
    reminder_id: str,
    after: Annotated[str | None, Query(json_schema_extra={"format": "date-time"})] = None,
    count: Annotated[int | None, Query(ge=1, le=service.MAX_OCCURRENCES)] = None,
) -> OccurrencePage:
    moment, number = service.parse_occurrence_query(after, count)
    async with transaction(request) as conn:
        return await service.preview_occurrences(conn, operator, reminder_id, moment, number)


@router.get("/{reminder_id}/runs", response_model=RunPage)
async def list_runs(
    request: Request,
    operator: OperatorDep,
    reminder_id: str,
    limit: Limit = None,
    cursor: Cursor = None,
    pagination: Pagination = None,
) -> RunPage:
    page = parse_page(limit=limit, cursor=cursor, pagination=pagination)
    async with transaction(request) as conn:
        return await service.list_runs(conn, operator, reminder_id, page)
