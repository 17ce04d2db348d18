"""The operations feed: the operator's own notifications, the unread badge, marking read."""

from __future__ import annotations

from fastapi import Response
from fastapi.responses import RedirectResponse

from herald.console import core
from herald.console.core import ConsoleDep, blank, form_of, render, tenant_transaction
from herald.feed import service as feed

router = core.screen_router()


@router.get("/feed")
async def feed_page(console: ConsoleDep, cursor: str | None = None) -> Response:
    params = feed.parse_list_params(
        limit=20, cursor=blank(cursor), unread_only=None, pagination=None
    )
    async with tenant_transaction(console) as conn:
        page = await feed.list_feed(conn, console.operator, params)
    return render(console, "feed.html", page=page)


@router.get("/feed/badge")
async def feed_badge(console: ConsoleDep) -> Response:
    async with tenant_transaction(console) as conn:
        unread = await feed.unread_count(conn, console.operator)
    return render(console, "_badge.html", count=unread.count)


@router.post("/feed/read-all")
async def feed_read_all(console: ConsoleDep) -> Response:
    await form_of(console)
    async with tenant_transaction(console) as conn:
        await feed.mark_all_read(conn, console.operator)
    return RedirectResponse("/console/feed", status_code=303)


@router.post("/feed/{notification_id}/read")
async def feed_read(console: ConsoleDep, notification_id: str) -> Response:
    await form_of(console)
    async with tenant_transaction(console) as conn:
        await feed.mark_read(conn, console.operator, notification_id)
    return RedirectResponse("/console/feed", status_code=303)
