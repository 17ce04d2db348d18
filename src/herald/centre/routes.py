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
    actor_read,
    actor_transaction,
    json_response,
    written,
)
from herald.centre import service
from herald.centre.schemas import (
    NotificationPage,
    ReadAllResult,
    ReadReceipt,
    UnreadCount,
)
from herald.centre.service import ListParams
from herald.db.compiled import Driver

router = APIRouter(prefix="/v1/me/notifications", tags=["centre"])

# Each route is one transaction whose first statement both checks that the person (and the
# active role) is live and enters the tenant (deps.actor_transaction), and whose answer is
# serialised once by pydantic-core straight to JSON bytes (response_model still publishes it).
# The answers are functions of their own: herald.centre.fast answers a plain request with the
# same ones, so the two ways in cannot drift apart.


# The two reads may run on a read standby (actor_read, herald.db.replica); the two writes leave
# the person's fence once committed (`written`), so their next reads see them.


async def list_answer(request: Request, claims: auth.ActorClaims, params: ListParams) -> Response:
    async def work(conn: Driver, actor: auth.Actor) -> bytes:
        page, next_cursor = await service.list_notifications(conn, actor, params)
        return service.page_json(page, next_cursor)

    return Response(await actor_read(request, claims, work), media_type=JSON)


async def unread_count_answer(request: Request, claims: auth.ActorClaims) -> Response:
    return json_response(await actor_read(request, claims, service.unread_count))


async def mark_all_read_answer(request: Request, claims: auth.ActorClaims) -> Response:
    async with actor_transaction(request, claims) as (conn, actor):
        result = await service.mark_all_read(conn, actor)
    await written(request, claims.tenant_id, claims.subject)
    return json_response(result)


async def mark_read_answer(
    request: Request, claims: auth.ActorClaims, notification_id: str
) -> Response:
    async with actor_transaction(request, claims) as (conn, actor):
        receipt = await service.mark_read(conn, actor, notification_id)
    await written(request, claims.tenant_id, claims.subject)
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
