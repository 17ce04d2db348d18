"""Reminders, with their next occurrences."""

from __future__ import annotations

from fastapi import Response

from herald.admin import paging
from herald.console import core
from herald.console.core import ConsoleDep, blank, render, tenant_transaction
from herald.errors import NotFound
from herald.scheduling.reminders import service as reminders

router = core.screen_router()

NEXT_OCCURRENCES = 3


@router.get("/reminders")
async def reminders_page(console: ConsoleDep, cursor: str | None = None) -> Response:
    if not console.may_reminders:
        raise NotFound()
    page = paging.parse_page(limit=20, cursor=blank(cursor), pagination=None)
    async with tenant_transaction(console) as conn:
        listed = await reminders.list_reminders(conn, console.operator, page)
        upcoming = {
            item.id: (
                await reminders.preview_occurrences(
                    conn, console.operator, str(item.id), None, NEXT_OCCURRENCES
                )
            ).items
            if item.enabled
            else []
            for item in listed.items
        }
    return render(console, "reminders.html", page=listed, upcoming=upcoming)
