"""GET /metrics (Prometheus text format)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from herald.auth.deps import MetricsReader, all_tenants_transaction, state
from herald.observability import service

router = APIRouter(tags=["ops"])


@router.get("/metrics", include_in_schema=False, dependencies=[MetricsReader])
async def metrics(request: Request) -> Response:
    async with all_tenants_transaction(request) as conn:
        body = await service.render_metrics(conn, state(request).registry)
    return Response(content=body, media_type=CONTENT_TYPE_LATEST)
