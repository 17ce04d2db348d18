"""The consumer centre's routes: an end user's own inbox, by JWT, with no permission grant.

Authentication is the only gate (R-CENTRE-5, R-CENTRE-25); what each caller may see is decided by
the service's predicate, never by a permission check here.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from herald.auth import service as auth
from herald.auth.deps import (
    JSON,
    ActorClaimsDep,
    Cursor,
    Limit,
    Pagination,
    UnreadOnly,
    actor_transaction,
    json_response,
)
from herald.centre import service
from herald.centre.schemas import (
    NotificationPage,
    ReadAllResult,
    ReadReceipt,
    UnreadCount,
)
from herald.centre.service import ListParams

router = APIRouter(prefix="/v1/me/notifications", tags=["centre"])

# Each route is one transaction whose first statement both checks that the person (and the
# active role) is live and enters the tenant (deps.actor_transaction), and whose answer is
# serialised once by pydantic-core straight to JSON bytes (response_model still publishes it).
# The answers are functions of their own: herald.centre.fast answers a plain request with the
# same ones, so the two ways in cannot drift apart.


async def list_answer(request: Request, claims: auth.ActorClaims, params: ListParams) -> Response:
    async with actor_transaction(request, claims) as (conn, actor):
        page, next_cursor = await service.list_notifications(conn, actor, params)
    return Response(service.page_json(page, next_cursor), media_type=JSON)


async def unread_count_answer(request: Request, claims: auth.ActorClaims) -> Response:
    async with actor_transaction(request, claims) as (conn, actor):
        count = await service.unread_count(conn, actor)
    return json_response(count)


async def mark_all_read_answer(request: Request, claims: auth.ActorClaims) -> Response:
    async with actor_transaction(request, claims) as (conn, actor):
        result = await service.mark_all_read(conn, actor)
    return json_response(result)


async def mark_read_answer(
    request: Request, claims: auth.ActorClaims, notification_id: str
) -> Response:
    async with actor_transaction(request, claims) as (conn, actor):
        receipt = await service.mark_read(conn, actor, notification_id)
    return json_response(receipt)


@router.get("", response_model=NotificationPage)
async def list_notifications(
    request: Request,
    claims: ActorClaimsDep,
    limit: Limit = None,
    cursor: Cursor = None,
    unread_only: UnreadOnly = None,
    pagination: Pagination = None,
) -> Response:
    params = service.parse_list_params(
        limit=limit, cursor=cursor, unread_only=unread_only, pagination=pagination
    )
    return await list_answer(request, claims, params)


@router.get("/unread-count", response_model=UnreadCount)
async def unread_count(request: Request, claims: ActorClaimsDep) -> Response:
    return await unread_count_answer(request, claims)


@router.post("/read-all", response_model=ReadAllResult)
async def mark_all_read(request: Request, claims: ActorClaimsDep) -> Response:
    return await mark_all_read_answer(request, claims)


@router.post("/{notification_id}/read", response_model=ReadReceipt)
async def mark_read(request: Request, claims: ActorClaimsDep, notification_id: str) -> Response:
    return await mark_read_answer(request, claims, notification_id)
