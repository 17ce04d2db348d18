"""Routes of the kinds admin (`/v1/admin/kinds`), for operators. Thin: authenticate, open the
request's transaction, call one service function (which checks the permission and audits)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from herald.admin import paging
from herald.admin.kinds import service
from herald.admin.kinds.schemas import EscalationOverrideIn, KindSummary, KindSummaryPage
from herald.auth.deps import Cursor, Limit, OperatorDep, Pagination, state, transaction

router = APIRouter(prefix="/v1/admin/kinds", tags=["admin: kinds"])


@router.get("", response_model=KindSummaryPage)
async def list_kinds(
    request: Request,
    operator: OperatorDep,
    limit: Limit = None,
    cursor: Cursor = None,
    pagination: Pagination = None,
) -> KindSummaryPage:
    """The registry's kinds: channels, dedupe policy, digest window and escalation plan, with
    this tenant's escalation delays where it has overridden them."""
    page = paging.parse_page(limit=limit, cursor=cursor, pagination=pagination)
    async with transaction(request) as conn:
        return await service.list_kinds(conn, operator, state(request).registry, page)


@router.put("/{kind}/escalation", response_model=KindSummary)
async def put_escalation(
    request: Request, operator: OperatorDep, kind: str, data: EscalationOverrideIn
) -> KindSummary:
    """Set this tenant's delays for the kind's escalation plan (the code's channels, in order)."""
    async with transaction(request) as conn:
        return await service.put_escalation(conn, operator, state(request).registry, kind, data)


@router.delete("/{kind}/escalation", response_model=KindSummary)
async def delete_escalation(request: Request, operator: OperatorDep, kind: str) -> KindSummary:
    """Revert to the code's delays."""
    async with transaction(request) as conn:
        return await service.delete_escalation(conn, operator, state(request).registry, kind)
