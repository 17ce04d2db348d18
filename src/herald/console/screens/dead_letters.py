"""Dead letters: a screen only for operators who may read them; a 404 for everyone else."""

from __future__ import annotations

from fastapi import Response
from fastapi.responses import RedirectResponse

from herald import vocabulary
from herald.admin.dead_letters import service as dead_letters
from herald.admin.history import service as history
from herald.console import core
from herald.console.core import Console, ConsoleDep, blank, form_of, render, tenant_transaction
from herald.errors import NotFound, ValidationFailed

router = core.screen_router()


def _failures_only(console: Console) -> None:
    if not console.may_failures:
        raise NotFound()


@router.get("/dead-letters")
async def dead_letters_page(
    console: ConsoleDep, channel: str | None = None, cursor: str | None = None
) -> Response:
    _failures_only(console)
    channel = blank(channel)
    if channel is not None and channel not in vocabulary.CHANNELS:
        raise ValidationFailed("unknown channel")
    page = history.parse_page(limit=20, cursor=blank(cursor), pagination=None)
    async with tenant_transaction(console) as conn:
        listed = await dead_letters.list_dead_letters(conn, console.operator, page, channel=channel)
    return render(
        console,
        "dead_letters.html",
        page=listed,
        channel=channel or "",
        channels=vocabulary.CHANNELS,
    )


@router.post("/dead-letters/{dead_letter_id}/replay")
async def replay(console: ConsoleDep, dead_letter_id: str) -> Response:
    _failures_only(console)
    await form_of(console)
    async with tenant_transaction(console) as conn:
        result = await dead_letters.replay_dead_letter(conn, console.operator, dead_letter_id)
    if console.request.headers.get("HX-Request"):
        return render(console, "_replayed.html", delivery_id=result.delivery_id)
    return RedirectResponse("/console/dead-letters", status_code=303)
