"""Outcomes per channel over time (the chart's data as JSON), and queue depth."""

from __future__ import annotations

from fastapi import Response
from fastapi.responses import JSONResponse

from herald import vocabulary
from herald.console import core, outcomes
from herald.console.core import ConsoleDep, render, tenant_transaction
from herald.errors import NotFound

router = core.screen_router()


@router.get("/outcomes")
async def outcomes_page(console: ConsoleDep) -> Response:
    if not console.may_history:
        raise NotFound()
    async with tenant_transaction(console) as conn:
        depth = await outcomes.queue_depth(conn, console.operator)
    return render(console, "outcomes.html", depth=depth, channels=vocabulary.CHANNELS)


@router.get("/outcomes/data")
async def outcomes_data(console: ConsoleDep, hours: int = 24) -> Response:
    if not console.may_history:
        raise NotFound()
    async with tenant_transaction(console) as conn:
        series = await outcomes.outcome_series(conn, console.operator, hours=hours)
    return JSONResponse(series.model_dump(by_alias=True))
