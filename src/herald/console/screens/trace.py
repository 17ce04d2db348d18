"""The trace: why one person of an event got (or did not get) each delivery, reached from the
event's look-up form or a delivery's "why?" link, and a delivery's live status."""

from __future__ import annotations

from fastapi import Response
from fastapi.responses import RedirectResponse

from herald.admin.trace import reasons
from herald.admin.trace import service as trace
from herald.auth.deps import state
from herald.console import core
from herald.console.core import ConsoleDep, error_page, render, tenant_transaction

router = core.screen_router()


@router.get("/events/{event_id}/people")
async def event_person_lookup(console: ConsoleDep, event_id: str, externalId: str = "") -> Response:
    """The "look up a person in this event" form's target."""
    external_id = externalId.strip()
    if not external_id:
        return RedirectResponse(f"/console/events/{event_id}", status_code=303)
    return RedirectResponse(
        str(console.request.url_for("recipient_page", event_id=event_id, external_id=external_id)),
        status_code=303,
    )


@router.get("/events/{event_id}/people/{external_id}")
async def recipient_page(console: ConsoleDep, event_id: str, external_id: str) -> Response:
    async with tenant_transaction(console) as conn:
        traced = await trace.trace_recipient(
            conn, console.operator, state(console.request).registry, event_id, external_id
        )
    return render(console, "trace.html", trace=traced, channel_word=reasons.channel_word)


@router.get("/deliveries/{delivery_id}")
async def delivery_why(console: ConsoleDep, delivery_id: str) -> Response:
    """A delivery row's "why?" link: the trace of the person it was for."""
    async with tenant_transaction(console) as conn:
        event_public_id, external_id = await trace.locate_delivery(
            conn, console.operator, delivery_id
        )
    if external_id is None:
        return error_page(404, "The person this delivery was for has been erased.")
    return RedirectResponse(
        str(
            console.request.url_for(
                "recipient_page", event_id=str(event_public_id), external_id=external_id
            )
        ),
        status_code=303,
    )


@router.get("/deliveries/{delivery_id}/status")
async def delivery_status(console: ConsoleDep, delivery_id: str) -> Response:
    """A delivery's status as a fragment; polls itself while the delivery is still in flight,
    so a replay's result appears without a reload."""
    async with tenant_transaction(console) as conn:
        found = await trace.delivery_status(conn, console.operator, delivery_id)
    return render(console, "_delivery_status.html", delivery=found)
