"""The consumer centre's routes: an end user's own inbox, by JWT, with no permission grant.

Authentication is the only gate (R-CENTRE-5, R-CENTRE-25); what each caller may see is decided by
the service's predicate, never by a permission check here.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from herald.auth.deps import ActorDep, Cursor, Limit, Pagination, UnreadOnly, transaction
from herald.centre import service
from herald.centre.schemas import (
    NotificationPage,
    ReadAllResult,
    ReadReceipt,
    UnreadCount,
)

router = APIRouter(prefix="/v1/me/notifications", tags=["centre"])


@router.get("", response_model=NotificationPage)
async def list_notifications(
    request: Request,
    actor: ActorDep,
    limit: Limit = None,
    cursor: Cursor = None,
    unread_only: UnreadOnly = None,
    pagination: Pagination = None,
) -> NotificationPage:
    params = service.parse_list_params(
        limit=limit, cursor=cursor, unread_only=unread_only, pagination=pagination
    )
    async with transaction(request) as conn:
        return await service.list_notifications(conn, actor, params)


@router.get("/unread-count", response_model=UnreadCount)
async def unread_count(request: Request, actor: ActorDep) -> UnreadCount:
    async with transaction(request) as conn:
        return await service.unread_count(conn, actor)


@router.post("/read-all", response_model=ReadAllResult)
async def mark_all_read(request: Request, actor: ActorDep) -> ReadAllResult:
    async with transaction(request) as conn:
        return await service.mark_all_read(conn, actor)


@router.post("/{notification_id}/read", response_model=ReadReceipt)
async def mark_read(request: Request, actor: ActorDep, notification_id: str) -> ReadReceipt:
    async with transaction(request) as conn:
        return await service.mark_read(conn, actor, notification_id)
