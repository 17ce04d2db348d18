"""The admin dead-letter screen: GET /v1/admin/dead-letters and
POST /v1/admin/dead-letters/{id}/replay.

Operators only. The permission checks (NotificationFailure_READ / _UPDATE) are in the service:
an empty page for the list, 404 for ids.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from herald.admin.dead_letters import service
from herald.admin.dead_letters.schemas import DeadLetterPage, ReplayResult
from herald.admin.history import service as history
from herald.auth.deps import (
    Cursor,
    Limit,
    OperatorDep,
    Pagination,
    operator_fence,
    transaction,
    written,
)
from herald.vocabulary import Channel

router = APIRouter(prefix="/v1/admin/dead-letters", tags=["admin"])


@router.get("", response_model=DeadLetterPage)
async def list_dead_letters(
    request: Request,
    operator: OperatorDep,
    channel: Channel | None = None,
    limit: Limit = None,
    cursor: Cursor = None,
    pagination: Pagination = None,
) -> DeadLetterPage:
    page = history.parse_page(limit=limit, cursor=cursor, pagination=pagination)
    async with transaction(request) as conn:
        return await service.list_dead_letters(conn, operator, page, channel=channel)


@router.post("/{dead_letter_id}/replay", response_model=ReplayResult, status_code=201)
async def replay_dead_letter(
    request: Request, operator: OperatorDep, dead_letter_id: str
) -> ReplayResult:
    async with transaction(request) as conn:
        replayed = await service.replay_dead_letter(conn, operator, dead_letter_id)
    # The replay is a new delivery the operator's next history reads must show.
    await written(request, operator.tenant_id, operator_fence(operator))
    return replayed
