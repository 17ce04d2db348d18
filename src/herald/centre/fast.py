"""The inbox's routes without FastAPI's per-request machinery, for the requests that need none of it.

FastAPI spends about as much CPU on an inbox request before and after the endpoint as the endpoint
spends on its own work outside PostgreSQL: its request handler (telemetry, the endpoint's context,
the body check), solving the dependency tree (the bearer scheme, the claims, four query
parameters validated by pydantic) and its route wrapper. For these four routes almost every
request is the same plain shape — a bearer token, and for the list at most `limit`, `cursor` and
`unreadOnly` written the one way every client writes them — and what FastAPI decides for such a
request is known in advance.

So each route has a `FastRoute` ahead of every other route in the app's route table. It matches
only a request of that plain shape (`matches` reads the method, the path and the query string)
and answers it with one statement: the route's function (herald.centre.functions), which runs the
liveness check and the route's own statement — the same statement objects the FastAPI endpoint
runs in its four-trip transaction — in one round trip. Where the functions cannot be created, a
fast route answers with the FastAPI endpoint's own answer functions (herald.centre.routes'
`*_answer`). Any other request — a query parameter written another way, repeated, empty or out
of range — does not match it, and routing goes on to the FastAPI route, which validates and
answers exactly as before. The FastAPI routes stay the published contract (they
generate the OpenAPI document) and the answer to everything unusual; a fast route is an ASGI app
inside the same middleware and exception handlers, so an error it raises is answered by the same
handler. tests/integration/test_centre_fast.py sends each route a corpus of requests, plain and
not, with the fast routes and without, and requires the same status, body and headers.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl
from uuid import UUID

from fastapi import FastAPI
from fastapi.responses import Response
from fastapi.security.utils import get_authorization_scheme_param
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette._utils import get_route_path
from starlette.requests import Request
from starlette.routing import BaseRoute, Match, NoMatchFound, compile_path
from starlette.types import Receive, Scope, Send
from typing_extensions import override

from herald.auth import service as auth
from herald.auth.deps import (
    CURSOR_PATTERN,
    JSON,
    MAX_LIMIT,
    bearer_credential,
    enforce_person_limit,
    json_response,
    remember_tenant,
    state,
    written,
)
from herald.centre import functions, routes, service
from herald.centre.queries import PageRow
from herald.centre.schemas import ReadAllResult, ReadReceipt
from herald.errors import NotificationNotFound

PREFIX = routes.router.prefix
# What FastAPI's validation of the list's parameters accepts and reads the same way as this
# module: a limit of 1..MAX_LIMIT in plain digits, a cursor of the published alphabet and length,
# unreadOnly as one of the spellings the service itself reads.
_PLAIN_LIMIT = re.compile(r"[1-9][0-9]{0,2}")
_PLAIN_CURSOR = re.compile(CURSOR_PATTERN.strip("^$"))
_PLAIN_FLAGS = {"true": True, "false": False, "1": True, "0": False}
_CURSOR_MAX = 1024

Handler = Callable[[Request, dict[str, Any]], Awaitable[Response]]


class FastRoute(BaseRoute):
    """One inbox route's plain requests (module docstring). `path` is the route's template, so
    the request's metrics and log line name the route as the FastAPI route would."""

    def __init__(
        self,
        method: str,
        path: str,
        handler: Handler,
        read_query: Callable[[bytes], dict[str, Any] | None] | None = None,
    ) -> None:
        self.method = method
        self.methods = {method}
        self.path = path
        self.path_format = path
        self.path_regex, _, self.param_convertors = compile_path(path)
        self.has_params = "{" in path
        self.handler = handler
        self.read_query = read_query
        self.include_in_schema = False

    @override
    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http" or scope["method"] != self.method:
            return Match.NONE, {}
        path = get_route_path(scope)
        if self.has_params:
            found = self.path_regex.match(path)
            if found is None:
                return Match.NONE, {}
            path_params = found.groupdict()
        elif path != self.path:
            return Match.NONE, {}
        else:
            path_params = {}
        query: dict[str, Any] = {}
        raw = scope["query_string"]
        if self.read_query is not None:
            read = self.read_query(raw)
            if read is None:
                return Match.NONE, {}
            query = read
        elif raw:
            # Routes with no parameters of their own: FastAPI ignores any query string, and so
            # would this; but a query string on them is rare enough to leave to FastAPI.
            return Match.NONE, {}
        return Match.FULL, {
            "route": self,
            "path_params": path_params,
            "herald.fast_query": query,
        }

    @override
    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = await self.handler(request, scope["herald.fast_query"])
        await response(scope, receive, send)

    @override
    def url_path_for(self, name: str, /, **path_params: Any) -> Any:
        # Not named: `url_for` passes over it to the routes that are (Starlette's contract).
        raise NoMatchFound(name, path_params)


def _read_list_query(raw: bytes) -> dict[str, Any] | None:
    """The list's parameters from a plain query string, or None when FastAPI should read it."""
    if not raw:
        return {}
    read: dict[str, Any] = {}
    for name, value in parse_qsl(raw.decode("latin-1"), keep_blank_values=True):
        if name in read:
            return None
        if name == "limit":
            if not _PLAIN_LIMIT.fullmatch(value) or int(value) > MAX_LIMIT:
                return None
            read[name] = int(value)
        elif name == "cursor":
            if len(value) > _CURSOR_MAX or not _PLAIN_CURSOR.fullmatch(value):
                return None
            read[name] = value
        elif name == "unreadOnly":
            flag = _PLAIN_FLAGS.get(value)
            if flag is None:
                return None
            read[name] = flag
        elif name == "pagination":
            return None
        # Any other name: FastAPI ignores it, and so does this.
    return read


async def _claims(request: Request) -> auth.ActorClaims:
    """What the routes' ActorClaimsDep gives them: the bearer scheme as FastAPI's HTTPBearer
    reads it, then herald.auth.deps.actor_claims."""
    authorization = request.headers.get("Authorization")
    scheme, credentials = get_authorization_scheme_param(authorization)
    bearer = credentials if authorization and scheme.lower() == "bearer" and credentials else None
    claims = await auth.verify_actor_token(state(request).settings, bearer_credential(bearer))
    remember_tenant(request, claims.tenant_id)
    return claims


async def _one_statement(
    request: Request,
    claims: auth.ActorClaims,
    function: functions.RouteFunction,
    values: dict[str, Any],
    *,
    read: bool = False,
) -> list[tuple[Any, ...]] | None:
    """The route's rows from its one-statement function (herald.centre.functions), after the
    person's rate limit; None when the functions cannot be created here (the caller then answers
    through the four-trip transaction, which counts the limit itself). A `read` runs where
    the app's ReadRouting says (a read standby that may answer the person, else the primary);
    the functions are created on the primary and reach a standby by replication."""
    app_state = state(request)
    engine = app_state.engine
    if not await functions.ensure(engine):
        return None
    await enforce_person_limit(request, claims.tenant_id, claims.subject)
    if not read:
        return await functions.call(engine, function, claims, values)

    async def on(chosen: AsyncEngine) -> list[tuple[Any, ...]]:
        if chosen is engine:
            return await functions.call(engine, function, claims, values)
        return await functions.call(chosen, function, claims, values, create=False)

    return await app_state.reads.run(claims.tenant_id, claims.subject, on)


async def _list(request: Request, query: dict[str, Any]) -> Response:
    claims = await _claims(request)
    params = service.parse_list_params(
        limit=query.get("limit"),
        cursor=query.get("cursor"),
        unread_only=query.get("unreadOnly"),
        pagination=None,
    )
    # One row more than the page says whether another page follows (service.list_notifications).
    values: dict[str, Any] = {"limit": params.limit + 1}
    if params.after is not None:
        values["after_at"], values["after_id"] = params.after
    function = functions.LIST[(params.after is not None, params.unread_only)]
    rows = await _one_statement(request, claims, function, values, read=True)
    if rows is None:
        return await routes.list_answer(request, claims, params)
    read = [PageRow(recipient_id=row[0], occurred_at=row[1], item=row[2]) for row in rows]
    page, next_cursor = service.page_of(read, params.limit)
    return Response(service.page_json(page, next_cursor), media_type=JSON)


async def _unread_count(request: Request, _: dict[str, Any]) -> Response:
    claims = await _claims(request)
    rows = await _one_statement(request, claims, functions.UNREAD_COUNT, {}, read=True)
    if rows is None:
        return await routes.unread_count_answer(request, claims)
    return json_response(service.unread_of(int(rows[0][0])))


async def _mark_all_read(request: Request, _: dict[str, Any]) -> Response:
    claims = await _claims(request)
    rows = await _one_statement(request, claims, functions.MARK_ALL_READ, {})
    if rows is None:
        return await routes.mark_all_read_answer(request, claims)
    await written(request, claims.tenant_id, claims.subject)
    return json_response(ReadAllResult(updated=int(rows[0][0])))


async def _mark_read(request: Request, _: dict[str, Any]) -> Response:
    claims = await _claims(request)
    notification_id = request.scope["path_params"]["notification_id"]
    try:
        public_id = UUID(notification_id)
    except ValueError:
        # Not an id at all: the FastAPI route's answer (the liveness check, then 404).
        return await routes.mark_read_answer(request, claims, notification_id)
    rows = await _one_statement(request, claims, functions.MARK_READ, {"public_id": public_id})
    if rows is None:
        return await routes.mark_read_answer(request, claims, notification_id)
    if not rows:
        raise NotificationNotFound()  # absent, someone else's or outside the role alike
    await written(request, claims.tenant_id, claims.subject)
    return json_response(ReadReceipt(id=rows[0][0], read_at=rows[0][1]))


def fast_routes() -> list[FastRoute]:
    return [
        FastRoute("GET", PREFIX, _list, _read_list_query),
        FastRoute("GET", f"{PREFIX}/unread-count", _unread_count),
        FastRoute("POST", f"{PREFIX}/read-all", _mark_all_read),
        FastRoute("POST", f"{PREFIX}/{{notification_id}}/read", _mark_read),
    ]


def install(app: FastAPI) -> None:
    """Put the fast routes ahead of every route of the app (they match nothing else)."""
    app.router.routes[0:0] = fast_routes()


def uninstall(app: FastAPI) -> None:
    """Take them out again: every request then goes through FastAPI (tests compare the two)."""
    app.router.routes[:] = [r for r in app.router.routes if not isinstance(r, FastRoute)]
