"""The history screen: events filtered by kind, category, status and time, and one event with
its deliveries."""

from __future__ import annotations

from fastapi import Response

from herald import vocabulary
from herald.admin.history import service as history
from herald.console import core
from herald.console.core import ConsoleDep, blank, render, tenant_transaction
from herald.errors import ValidationFailed

router = core.screen_router()


@router.get("/history")
async def history_page(
    console: ConsoleDep,
    kind: str | None = None,
    category: str | None = None,
    status: str | None = None,
    cursor: str | None = None,
) -> Response:
    query = console.request.query_params
    filters = history.parse_event_filters(
        kind=blank(kind),
        category=blank(category),
        status=blank(status),
        occurred_from=blank(query.get("from")),
        occurred_to=blank(query.get("to")),
    )
    page = history.parse_page(limit=20, cursor=blank(cursor), pagination=None)
    async with tenant_transaction(console) as conn:
        listed = await history.list_history(conn, console.operator, filters, page)
    return render(
        console,
        "history.html",
        page=listed,
        filters={
            "kind": kind or "",
            "category": category or "",
            "status": status or "",
            "from": query.get("from", ""),
            "to": query.get("to", ""),
        },
        categories=vocabulary.CATEGORIES,
        states=vocabulary.EVENT_STATES,
    )


@router.get("/events/{event_id}")
async def event_page(
    console: ConsoleDep,
    event_id: str,
    channel: str | None = None,
    status: str | None = None,
    cursor: str | None = None,
) -> Response:
    channel, status = blank(channel), blank(status)
    if channel is not None and channel not in vocabulary.CHANNELS:
        raise ValidationFailed("unknown channel")
    if status is not None and status not in vocabulary.DELIVERY_STATUSES:
        raise ValidationFailed("unknown status")
    page = history.parse_page(limit=50, cursor=blank(cursor), pagination=None)
    async with tenant_transaction(console) as conn:
        event = await history.get_history_event(conn, console.operator, event_id)
        deliveries = await history.list_event_deliveries(
            conn, console.operator, event_id, page, channel=channel, status=status
        )
    return render(
        console,
        "event.html",
        event=event,
        deliveries=deliveries,
        filters={"channel": channel or "", "status": status or ""},
        channels=vocabulary.CHANNELS,
        statuses=vocabulary.DELIVERY_STATUSES,
    )
