"""The operations feed over HTTP: the host publishes with an API key, operators read their bell.

`POST /v1/feed` needs the `feed:write` scope. The operator routes under `/v1/admin/feed` declare
no permission: they are the feed's permission-exempt routes of R-SEC-5, and the service's
visibility predicate (herald.feed.queries.visible_to) is their only access control (R-FEED-6).
"""

from __future__ import annotations

from typing import Final

from fastapi import APIRouter, Request

from herald.auth.deps import (
    Cursor,
    FeedWriter,
    Limit,
    OperatorDep,
    Pagination,
    UnreadOnly,
    transaction,
)
from herald.feed import service
from herald.feed.schemas import (
    FeedPage,
    FeedPublish,
    FeedPublished,
    FeedReadAllResult,
    FeedReadReceipt,
    FeedUnreadCount,
)

ADMIN_PREFIX = "/v1/admin/feed"

# The operator routes guarded only by the visibility predicate, for whoever enforces R-SEC-6's
# "no admin route ships without a permission" at startup. R-SEC-5 counts three feed routes (the
# seed's list, mark read and mark all read); Herald also serves the list's unread count on its own
# path, filtered by the same predicate.
PERMISSION_EXEMPT_ROUTES: Final[tuple[tuple[str, str], ...]] = (
    ("GET", ADMIN_PREFIX),
    ("GET", f"{ADMIN_PREFIX}/unread-count"),
    ("POST", f"{ADMIN_PREFIX}/{{notification_id}}/read"),
    ("POST", f"{ADMIN_PREFIX}/read-all"),
)

router = APIRouter(tags=["feed"])
admin = APIRouter(prefix=ADMIN_PREFIX, tags=["feed"])


@router.post("/v1/feed", response_model=FeedPublished, status_code=201)
async def publish(body: FeedPublish, request: Request, caller: FeedWriter) -> FeedPublished:
    async with transaction(request) as conn:
        public_id = await service.publish(
            conn,
            tenant_id=caller.tenant_id,
            kind=body.kind,
            title=body.title,
            body=body.body,
            link=body.link,
            permission_code=body.permission_code,
            occurred_at=body.occurred_at,
        )
    return FeedPublished(id=public_id)


@admin.get("", response_model=FeedPage)
async def list_feed(
    request: Request,
    operator: OperatorDep,
    limit: Limit = None,
    cursor: Cursor = None,
    unread_only: UnreadOnly = None,
    pagination: Pagination = None,
) -> FeedPage:
    params = service.parse_list_params(
        limit=limit, cursor=cursor, unread_only=unread_only, pagination=pagination
    )
    async with transaction(request) as conn:
        return await service.list_feed(conn, operator, params)


@admin.get("/unread-count", response_model=FeedUnreadCount)
async def unread_count(request: Request, operator: OperatorDep) -> FeedUnreadCount:
    async with transaction(request) as conn:
        return await service.unread_count(conn, operator)


@admin.post("/read-all", response_model=FeedReadAllResult)
async def mark_all_read(request: Request, operator: OperatorDep) -> FeedReadAllResult:
    async with transaction(request) as conn:
        return await service.mark_all_read(conn, operator)


@admin.post("/{notification_id}/read", response_model=FeedReadReceipt)
async def mark_read(
    request: Request, operator: OperatorDep, notification_id: str
) -> FeedReadReceipt:
    async with transaction(request) as conn:
        return await service.mark_read(conn, operator, notification_id)


router.include_router(admin)
