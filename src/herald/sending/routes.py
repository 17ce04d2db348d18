"""POST /v1/events, GET /v1/events/{id} and POST /v1/events/{id}/cancel."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Header, Request, Response

from herald.auth.deps import EventsReader, EventsSender, EventsWriter, state, transaction
from herald.errors import EventNotFound
from herald.sending import service
from herald.sending.schemas import EventCancelled, EventCreate, EventCreated, EventStatus

router = APIRouter(prefix="/v1/events", tags=["events"])


@router.post(
    "",
    response_model=EventCreated,
    status_code=201,
    response_model_by_alias=True,
    responses={
        200: {
            "model": EventCreated,
            "description": "Folded into an event already recorded (same Idempotency-Key, or a "
            "kind that collapses)",
        }
    },
)
async def create_event(
    body: EventCreate,
    request: Request,
    response: Response,
    caller: EventsSender,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> EventCreated:
    send_input = service.SendInput(
        tenant_id=caller.tenant_id,
        kind=body.kind,
        audience=body.audience,
        channels=body.channels,
        variables=body.variables,
        action_url=body.action_url,
        scheduled_for=body.scheduled_for,
        deliver_local_time=None if body.deliver_at is None else body.deliver_at.local_time,
        deliver_local_date=None if body.deliver_at is None else body.deliver_at.date,
        request_id=idempotency_key,
    )
    async with transaction(request) as conn:
        result = await service.record_event(conn, send_input, registry=state(request).registry)
    if not result.created:
        response.status_code = 200
    return EventCreated(id=result.id, created=result.created)


@router.get("/{event_id}", response_model=EventStatus, response_model_by_alias=True)
async def get_event(event_id: str, request: Request, caller: EventsReader) -> EventStatus:
    try:
        public_id = uuid.UUID(event_id)
    except ValueError:
        raise EventNotFound() from None
    async with transaction(request) as conn:
        found = await service.get_event(conn, caller.tenant_id, public_id)
    return EventStatus(**found)


# ApiCaller carries no key id, so a server-side cancel is recorded as made by "an API key".
SERVER_CANCEL_ACTOR = "api_key"


@router.post("/{event_id}/cancel", response_model=EventCancelled, response_model_by_alias=True)
async def cancel_event(event_id: str, request: Request, caller: EventsWriter) -> EventCancelled:
    """Cancel an event the fan-out has not started; 409 with the reason when it has, or when it
    was already cancelled (R-ADMIN-15, R-ADMIN-16)."""
    try:
        public_id = uuid.UUID(event_id)
    except ValueError:
        raise EventNotFound() from None
    async with transaction(request) as conn:
        cancelled = await service.cancel_event(
            conn, caller.tenant_id, public_id, actor=SERVER_CANCEL_ACTOR
        )
    return EventCancelled(**cancelled)
