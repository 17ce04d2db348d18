"""The admin history screen: GET /v1/admin/events, GET /v1/admin/events/{id},
GET /v1/admin/events/{id}/deliveries and POST /v1/admin/events/{id}/cancel.

Operators only (a JWT through its active role, or an admin-scope API key). The permission checks
(NotificationHistory_READ / _UPDATE) are in the service: an empty page for the list, 404 for ids.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from herald import vocabulary
from herald.admin.history import service
from herald.admin.history.schemas import DeliveryPage, EventCancelled, HistoryEvent, HistoryPage
from herald.auth.deps import (
    Cursor,
    Limit,
    OperatorDep,
    Pagination,
    operator_fence,
    operator_read,
    transaction,
    written,
)

router = APIRouter(prefix="/v1/admin/events", tags=["admin"])

# RFC 3339 moments with a zone; parsed by the service (400 VALIDATION_FAILED when unreadable).
MOMENT: dict[str, object] = {"format": "date-time"}
KindFilter = Annotated[str | None, Query(pattern=service.KIND_FILTER_PATTERN)]


@router.get("", response_model=HistoryPage)
async def list_history(
    request: Request,
    operator: OperatorDep,
    kind: KindFilter = None,
    category: vocabulary.Category | None = None,
    status: vocabulary.EventState | None = None,
    occurred_from: Annotated[str | None, Query(alias="from", json_schema_extra=MOMENT)] = None,
    occurred_to: Annotated[str | None, Query(alias="to", json_schema_extra=MOMENT)] = None,
    limit: Limit = None,
    cursor: Cursor = None,
    pagination: Pagination = None,
) -> HistoryPage:
    page = service.parse_page(limit=limit, cursor=cursor, pagination=pagination)
    filters = service.parse_event_filters(
        kind=kind,
        category=category,
        status=status,
        occurred_from=occurred_from,
        occurred_to=occurred_to,
    )
    return await operator_read(
        request, operator, lambda conn: service.list_history(conn, operator, filters, page)
    )


@router.get("/{event_id}", response_model=HistoryEvent)
async def get_history_event(request: Request, operator: OperatorDep, event_id: str) -> HistoryEvent:
    return await operator_read(
        request, operator, lambda conn: service.get_history_event(conn, operator, event_id)
    )


@router.get("/{event_id}/deliveries", response_model=DeliveryPage)
async def list_event_deliveries(
    request: Request,
    operator: OperatorDep,
    event_id: str,
    channel: vocabulary.Channel | None = None,
    status: vocabulary.DeliveryStatus | None = None,
    limit: Limit = None,
    cursor: Cursor = None,
    pagination: Pagination = None,
) -> DeliveryPage:
    page = service.parse_page(limit=limit, cursor=cursor, pagination=pagination)
    return await operator_read(
        request,
        operator,
        lambda conn: service.list_event_deliveries(
            conn, operator, event_id, page, channel=channel, status=status
        ),
    )


@router.post("/{event_id}/cancel", response_model=EventCancelled)
async def cancel_event(request: Request, operator: OperatorDep, event_id: str) -> EventCancelled:
    async with transaction(request) as conn:
        cancelled = await service.cancel_event(conn, operator, event_id)
    # The operator's next history reads see the cancel, whatever a standby has replayed.
    await written(request, operator.tenant_id, operator_fence(operator))
    return cancelled
