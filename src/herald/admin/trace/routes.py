"""The trace: GET /v1/admin/events/{id}/recipients/{externalId} and
GET /v1/admin/people/{externalId}/deliveries (NotificationHistory_READ; 404 without it)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from herald import vocabulary
from herald.admin.history import service as history
from herald.admin.trace import service
from herald.admin.trace.queries import PersonDeliveryFilters
from herald.admin.trace.schemas import PersonDeliveryPage, RecipientTrace
from herald.auth.deps import (
    Cursor,
    Limit,
    OperatorDep,
    Pagination,
    operator_read,
    state,
    transaction,
)

router = APIRouter(prefix="/v1/admin", tags=["admin"])
KindFilter = Annotated[str | None, Query(pattern=history.KIND_FILTER_PATTERN)]


@router.get("/events/{event_id}/recipients/{external_id}", response_model=RecipientTrace)
async def trace_recipient(
    request: Request, operator: OperatorDep, event_id: str, external_id: str
) -> RecipientTrace:
    """Was this person in the event's audience, and if so what happened on each channel, with
    the reason in words."""
    async with transaction(request) as conn:
        return await service.trace_recipient(
            conn, operator, state(request).registry, event_id, external_id
        )


@router.get("/people/{external_id}/deliveries", response_model=PersonDeliveryPage)
async def person_deliveries(
    request: Request,
    operator: OperatorDep,
    external_id: str,
    kind: KindFilter = None,
    channel: vocabulary.Channel | None = None,
    status: vocabulary.DeliveryStatus | None = None,
    limit: Limit = None,
    cursor: Cursor = None,
    pagination: Pagination = None,
) -> PersonDeliveryPage:
    """The person's deliveries, newest first, each with its reason."""
    page = history.parse_page(limit=limit, cursor=cursor, pagination=pagination)
    filters = PersonDeliveryFilters(kind=kind, channel=channel, status=status)
    registry = state(request).registry
    return await operator_read(
        request,
        operator,
        lambda conn: service.person_deliveries(
            conn, operator, registry, external_id, filters, page
        ),
    )
