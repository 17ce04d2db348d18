"""The admin history screen: GET /v1/admin/events, GET /v1/admin/events/{id},
GET /v1/admin/events/{id}/deliveries and POST /v1/admin/events/{id}/cancel.

Operators only (a JWT through its active role, or an admin-scope API key). The permission checks
(NotificationHistory_READ / _UPDATE) are in the service: an empty page for the list, 404 for ids.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from herald.admin.history import service
from herald.admin.history.schemas import DeliveryPage, EventCancelled, HistoryEvent, HistoryPage
from herald.auth.deps import OperatorDep, transaction

router = APIRouter(prefix="/v1/admin/events", tags=["admin"])


@router.get("", response_model=HistoryPage)
async def list_history(
    request: Request,
    operator: OperatorDep,
    # Taken as text and validated by the service, so a bad value is a 400 with a code.
    kind: str | None = None,
    category: str | None = None,
    status: str | None = None,
    occurred_from: Annotated[str | None, Query(alias="from")] = None,
    occurred_to: Annotated[str | None, Query(alias="to")] = None,
    limit: str | None = None,
    cursor: str | None = None,
    pagination: Annotated[str | None, Query(include_in_schema=False)] = None,
) -> HistoryPage:
    page = service.parse_page(limit=limit, cursor=cursor, pagination=pagination)
    filters = service.parse_event_filters(
        kind=kind,
        category=category,
        status=status,
        occurred_from=occurred_from,
        occurred_to=occurred_to,
    )
    async with transaction(request) as conn:
        return await service.list_history(conn, operator, filters, page)


@router.get("/{event_id}", response_model=HistoryEvent)
async def get_history_event(request: Request, operator: OperatorDep, event_id: str) -> HistoryEvent:
    async with transaction(request) as conn:
        return await service.get_history_event(conn, operator, event_id)


@router.get("/{event_id}/deliveries", response_model=DeliveryPage)
async def list_event_deliveries(
    request: Request,
    operator: OperatorDep,
    event_id: str,
    channel: str | None = None,
    status: str | None = None,
    limit: str | None = None,
    cursor: str | None = None,
    pagination: Annotated[str | None, Query(include_in_schema=False)] = None,
) -> DeliveryPage:
    page = service.parse_page(limit=limit, cursor=cursor, pagination=pagination)
    channel, status = service.parse_delivery_filters(channel=channel, status=status)
    async with transaction(request) as conn:
        return await service.list_event_deliveries(
            conn, operator, event_id, page, channel=channel, status=status
        )


@router.post("/{event_id}/cancel", response_model=EventCancelled)
async def cancel_event(request: Request, operator: OperatorDep, event_id: str) -> EventCancelled:
    async with transaction(request) as conn:
        return await service.cancel_event(conn, operator, event_id)
