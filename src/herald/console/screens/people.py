"""The people screen: one person's deliveries across events, and their preference matrix."""

from __future__ import annotations

from typing import Any

from fastapi import Response

from herald import vocabulary
from herald.admin.history import service as history
from herald.admin.trace import reasons
from herald.admin.trace import service as trace
from herald.admin.trace.queries import PersonDeliveryFilters
from herald.auth.deps import state
from herald.console import core
from herald.console.core import ConsoleDep, blank, render, tenant_transaction
from herald.errors import ValidationFailed
from herald.preferences.service import locked_categories

router = core.screen_router()


@router.get("/people")
async def person_page(
    console: ConsoleDep,
    externalId: str = "",
    kind: str | None = None,
    channel: str | None = None,
    status: str | None = None,
    cursor: str | None = None,
) -> Response:
    external_id = externalId.strip()
    values: dict[str, Any] = {
        "external_id": external_id,
        "filters": {"kind": kind or "", "channel": channel or "", "status": status or ""},
        "channels": vocabulary.CHANNELS,
        "statuses": vocabulary.DELIVERY_STATUSES,
        "categories": vocabulary.CATEGORIES,
        "deliveries": None,
        "matrix": None,
    }
    if not external_id:
        return render(console, "person.html", **values)
    kind, channel, status = blank(kind), blank(channel), blank(status)
    if kind is not None and not history.KIND_FILTER.match(kind):
        raise ValidationFailed("kind must be 1 to 200 printable characters")
    if channel is not None and channel not in vocabulary.CHANNELS:
        raise ValidationFailed("unknown channel")
    if status is not None and status not in vocabulary.DELIVERY_STATUSES:
        raise ValidationFailed("unknown status")
    page = history.parse_page(limit=20, cursor=blank(cursor), pagination=None)
    registry = state(console.request).registry
    async with tenant_transaction(console) as conn:
        values["deliveries"] = await trace.person_deliveries(
            conn,
            console.operator,
            registry,
            external_id,
            PersonDeliveryFilters(kind=kind, channel=channel, status=status),
            page,
        )
        person = await trace.readable_person(conn, console.operator, external_id)
        view = await reasons.PreferenceView.load(conn, console.operator.tenant_id, person["id"])
    locked = locked_categories(registry)
    values["matrix"] = [
        (
            category,
            category in locked,
            [
                (channel_name, *view.rule(category, channel_name))
                for channel_name in vocabulary.CHANNELS
            ],
        )
        for category in vocabulary.CATEGORIES
    ]
    return render(console, "person.html", **values)
