"""Request dependencies: the application state, one transaction per request, and the caller.

Routes open their transaction with `async with transaction(request) as conn:` and call one
service function inside it; the block commits on success and rolls back on any error, before the
response is sent, so a client that reads right after a write sees it.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar
from urllib.parse import quote

from fastapi import Depends, Query, Request, Security
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald.auth import service as auth
from herald.config import Settings
from herald.db import tenancy
from herald.db.compiled import Driver
from herald.db.engine import driver_transaction
from herald.db.replica import ReadRouting
from herald.errors import Forbidden, Unauthenticated
from herald.kinds import Registry
from herald.ratelimit import RateLimits, enforce, parse_limit
from herald.realtime.hub import RealtimeHub
from herald.secrets.vault import Vault


@dataclass
class AppState:
    settings: Settings
    engine: AsyncEngine
    registry: Registry
    vault: Vault
    # The process's one realtime listener and its open streams (started by the app's lifespan).
    realtime: RealtimeHub
    # Send and end-user rate limits: Redis-backed (shared by every process) or this process's.
    rate_limits: RateLimits
    # Where the inbox's reads run: a read standby when it may answer the person, else the primary.
    reads: ReadRouting


def state(request: Request) -> AppState:
    app_state: AppState = request.app.state.herald
    return app_state


T = TypeVar("T")

# Where the authentication dependency leaves the caller's tenant for the request's transactions.
_TENANT = "herald_tenant"


class NoTenant(RuntimeError):
    """A route opened a tenant transaction before any credential named the tenant: a wiring bug
    (a route without an authentication dependency), never a client error."""


@asynccontextmanager
async def transaction(request: Request) -> AsyncIterator[AsyncConnection]:
    """The request's transaction as role herald_app under the caller's tenant: PostgreSQL's
    row-level security hides every other tenant's row, whatever a query forgets to say."""
    tenant = getattr(request.state, _TENANT, None)
    if tenant is None:
        raise NoTenant(f"{request.method} {request.url.path}: no authenticated tenant")
    async with state(request).engine.begin() as conn:
        await tenancy.enter_tenant(conn, tenant)
        yield conn


@asynccontextmanager
async def all_tenants_transaction(request: Request) -> AsyncIterator[AsyncConnection]:
    """A transaction that sees every tenant, for the few reads that must: finding whose
    credential this is (by its hash or the token's tenant), and the cross-tenant /metrics."""
    async with state(request).engine.begin() as conn:
        yield conn


def remember_tenant(request: Request, tenant_id: str) -> None:
    """The authenticated caller's tenant, for the request's `transaction`s."""
    setattr(request.state, _TENANT, tenant_id)


# The two credentials, declared as OpenAPI security schemes so tools and generated clients know
# which routes need which. Both travel as `Authorization: Bearer …`; neither scheme answers on its
# own (auto_error=False), so a missing or malformed header is Herald's 401, in Herald's envelope.
api_key_scheme = HTTPBearer(
    scheme_name="apiKey",
    bearerFormat="hk_…",
    description="An API key (`herald keys create`), for the host's server-side calls.",
    auto_error=False,
)
jwt_scheme = HTTPBearer(
    scheme_name="userJwt",
    bearerFormat="JWT",
    description="A JWT the host signs for one person of one tenant (`sub`, `tid`, `exp`, `role`).",
    auto_error=False,
)
ApiKeyCredential = Annotated[HTTPAuthorizationCredentials | None, Security(api_key_scheme)]
JwtCredential = Annotated[HTTPAuthorizationCredentials | None, Security(jwt_scheme)]

# Longer than any key or JWT Herald accepts; a longer header is refused before it is parsed.
MAX_CREDENTIAL_LENGTH = 8192


def _bearer(credentials: HTTPAuthorizationCredentials | None) -> str:
    return bearer_credential(credentials.credentials if credentials is not None else None)


def bearer_credential(text: str | None) -> str:
    """The credential of a bearer header (the part after `Bearer `), or 401."""
    if text is None:
        raise Unauthenticated("expected 'Authorization: Bearer <credential>'")
    credential = text.strip()
    if not credential:
        raise Unauthenticated("expected 'Authorization: Bearer <credential>'")
    if len(credential) > MAX_CREDENTIAL_LENGTH:
        raise Unauthenticated("the credential is too long")
    return credential


async def _scoped_caller(
    request: Request, credentials: HTTPAuthorizationCredentials | None, scope: str
) -> auth.ApiCaller:
    key = _bearer(credentials)
    async with all_tenants_transaction(request) as conn:
        caller = await auth.authenticate_key(conn, key)
    if not caller.allows(scope):
        raise Forbidden(f"this API key lacks the {scope} scope")
    remember_tenant(request, caller.tenant_id)
    return caller


def require_scope(scope: str) -> Callable[..., Awaitable[auth.ApiCaller]]:
    """A dependency that authenticates an API key and checks one scope."""

    async def dependency(request: Request, credentials: ApiKeyCredential) -> auth.ApiCaller:
        return await _scoped_caller(request, credentials, scope)

    return dependency


def limit_sends(scope: str, route: str) -> Callable[..., Awaitable[auth.ApiCaller]]:
    """require_scope, then the send limits (R-SEC-14): one hit on the key's window and one on
    the tenant's, counted per route (`events`, `secrets`), 429 RATE_LIMITED when either is full."""

    async def dependency(request: Request, credentials: ApiKeyCredential) -> auth.ApiCaller:
        caller = await _scoped_caller(request, credentials, scope)
        app_state = state(request)
        settings = app_state.settings
        limiter = app_state.rate_limits
        await enforce(
            limiter, parse_limit(settings.rate_limit_send_per_key), route, "key", caller.key_id
        )
        await enforce(
            limiter,
            parse_limit(settings.rate_limit_send_per_tenant),
            route,
            "tenant",
            caller.tenant_id,
        )
        return caller

    return dependency


async def current_actor(request: Request, credentials: JwtCredential) -> auth.Actor:
    """The end user of a /v1/me route, within their per-person rate limit (R-SEC-14)."""
    token = _bearer(credentials)
    app_state = state(request)
    async with all_tenants_transaction(request) as conn:
        actor = await auth.authenticate_actor(conn, app_state.settings, token)
    remember_tenant(request, actor.tenant_id)
    await enforce_person_limit(request, actor.tenant_id, actor.external_id)
    return actor


async def enforce_person_limit(request: Request, tenant_id: str, subject: str) -> None:
    """One hit of the person's limit (R-SEC-14), shared by every /v1/me route: keyed by the
    person's external id in the tenant (the token's subject), so the inbox's routes can count it
    before they touch the database. Both are quoted: the limiter joins its key's parts with "/",
    and an external id may contain one (tenant "a", person "b/c" must not share "a/b"'s "c")."""
    app_state = state(request)
    await enforce(
        app_state.rate_limits,
        parse_limit(app_state.settings.rate_limit_per_person),
        "person",
        quote(tenant_id, safe=""),
        quote(subject, safe=""),
    )


ActorDep = Annotated[auth.Actor, Depends(current_actor)]


async def actor_claims(request: Request, credentials: JwtCredential) -> auth.ActorClaims:
    """The end user of a /v1/me route, by a verified JWT alone (no database yet): for routes that
    read the person in their own transaction with `actor_transaction`."""
    claims = await auth.verify_actor_token(state(request).settings, _bearer(credentials))
    remember_tenant(request, claims.tenant_id)
    return claims


ActorClaimsDep = Annotated[auth.ActorClaims, Depends(actor_claims)]


@asynccontextmanager
async def actor_transaction(
    request: Request, claims: auth.ActorClaims
) -> AsyncIterator[tuple[Driver, auth.Actor]]:
    """`current_actor` and `transaction` in one transaction and one statement fewer: the
    per-person rate limit (R-SEC-14), then the person and role liveness check as the statement
    that enters the tenant (auth.live_actor), then the route's own statements under row-level
    security. Two round trips fewer than the two transactions apart (a BEGIN and a COMMIT), and
    one pool checkout instead of two. The transaction is the pooled connection's own psycopg one
    (db.engine.driver_transaction): every statement of these routes runs on psycopg's cursor.
    The limit comes first, as in herald.centre.fast's one-statement path, which cannot count it
    between the two statements: a person over the limit costs no database work."""
    app_state = state(request)
    await enforce_person_limit(request, claims.tenant_id, claims.subject)
    async with driver_transaction(app_state.engine) as conn:
        actor = await auth.live_actor(conn, claims, enter_tenant=True)
        yield conn, actor


async def actor_read(
    request: Request,
    claims: auth.ActorClaims,
    work: Callable[[Driver, auth.Actor], Awaitable[T]],
) -> T:
    """actor_transaction for a read that a standby may answer (HERALD_DATABASE_READ_URL): the
    rate limit, then the liveness check and `work` in one transaction on the engine
    `reads` chooses for the person — run again on the primary if the standby fails it."""
    app_state = state(request)
    await enforce_person_limit(request, claims.tenant_id, claims.subject)

    async def on(engine: AsyncEngine) -> T:
        async with driver_transaction(engine) as conn:
            actor = await auth.live_actor(conn, claims, enter_tenant=True)
            return await work(conn, actor)

    return await app_state.reads.run(claims.tenant_id, claims.subject, on)


def operator_fence(operator: auth.Operator) -> str:
    """The name an operator's read-your-writes fence is kept under, beside people's."""
    return f"operator:{operator.actor_kind}:{operator.actor_id}"


async def operator_read(
    request: Request,
    operator: auth.Operator,
    work: Callable[[AsyncConnection], Awaitable[T]],
) -> T:
    """`transaction` for an operator's history read that a standby may answer
    (HERALD_DATABASE_READ_URL): the events list, an event and its deliveries, a person's
    deliveries. The operator's own changes to them (cancel, replay) fence them like a person's
    mark-read (`written(..., operator_fence(operator))`); what workers wrote is at most
    HERALD_READ_MAX_LAG_SECONDS late, as the inbox's is."""

    async def on(engine: AsyncEngine) -> T:
        async with engine.begin() as conn:
            await tenancy.enter_tenant(conn, operator.tenant_id)
            return await work(conn)

    return await state(request).reads.run(operator.tenant_id, operator_fence(operator), on)


async def written(request: Request, tenant_id: str, external_id: str) -> None:
    """After the person's own write committed: their next reads wait for a read standby to
    have replayed it (herald.db.replica's fence); nothing without a standby."""
    await state(request).reads.fence(tenant_id, external_id)


async def current_operator(
    request: Request, jwt_credentials: JwtCredential, key_credentials: ApiKeyCredential
) -> auth.Operator:
    """A person's JWT (acting through its active role) or an API key with the admin scope: both
    arrive in the same header, so the two schemes name the same credential."""
    credential = _bearer(jwt_credentials or key_credentials)
    async with all_tenants_transaction(request) as conn:
        operator = await auth.authenticate_operator(conn, state(request).settings, credential)
    remember_tenant(request, operator.tenant_id)
    return operator


OperatorDep = Annotated[auth.Operator, Depends(current_operator)]


async def metrics_reader(request: Request, credentials: ApiKeyCredential) -> None:
    """GET /metrics needs HERALD_METRICS_TOKEN as a bearer token, or an API key with the
    metrics:read scope: the backlog figures say how busy each channel is, which is nobody's
    business but the operator's."""
    credential = _bearer(credentials)
    expected = state(request).settings.metrics_token
    if expected and hmac.compare_digest(credential.encode(), expected.encode()):
        return
    if not credential.startswith(auth.KEY_PREFIX):
        raise Unauthenticated("expected HERALD_METRICS_TOKEN or an API key")
    async with all_tenants_transaction(request) as conn:
        caller = await auth.authenticate_key(conn, credential)
    if not caller.allows("metrics:read"):
        raise Forbidden("this API key lacks the metrics:read scope")


EventsWriter = Annotated[auth.ApiCaller, Depends(require_scope("events:write"))]
EventsReader = Annotated[auth.ApiCaller, Depends(require_scope("events:read"))]
DirectoryWriter = Annotated[auth.ApiCaller, Depends(require_scope("directory:write"))]
SecretsWriter = Annotated[auth.ApiCaller, Depends(limit_sends("secrets:write", "secrets"))]
# POST /v1/events: the events:write scope and the send limits.
EventsSender = Annotated[auth.ApiCaller, Depends(limit_sends("events:write", "events"))]
MetricsReader = Depends(metrics_reader)
FeedWriter = Annotated[auth.ApiCaller, Depends(require_scope("feed:write"))]


def json_response(model: BaseModel, status_code: int = 200) -> Response:
    """An answer serialised once, by pydantic-core, straight to JSON bytes.

    FastAPI's path for a route that returns a model validates the value against the response
    model again, turns it into Python primitives and encodes those with the standard library's
    json: three passes over the answer. A hot route returns `json_response(model)` instead (by
    alias, as FastAPI would have written it) and keeps `response_model=` in its decorator, so the
    OpenAPI schema is unchanged."""
    return Response(model.model_dump_json(by_alias=True), status_code, media_type=JSON)


JSON = "application/json"


# Query parameters every list shares, published as what the server accepts: `limit` an integer
# of 1..100, `unreadOnly` a boolean, `cursor` the opaque base64url text a previous page returned.
MAX_LIMIT = 100
CURSOR_PATTERN = r"^[A-Za-z0-9_-]+$"
Limit = Annotated[int | None, Query(ge=1, le=MAX_LIMIT, description="Items per page (default 20).")]
Cursor = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=1024,
        pattern=CURSOR_PATTERN,
        description="The `nextCursor` of the previous page, as it was returned.",
    ),
]
UnreadOnly = Annotated[bool | None, Query(alias="unreadOnly")]
# Refused with 400 PAGINATION_REQUIRED in any spelling, so it is not published.
Pagination = Annotated[str | None, Query(include_in_schema=False)]
FollowupsWriter = Annotated[auth.ApiCaller, Depends(require_scope("followups:write"))]


# A route that reads its JSON body itself, so that a refused field is a 400 with the feature's
# own code naming it (never FastAPI's generic 422), still publishes the model its service applies:
# `openapi_extra=body_of(Model)`; herald.api.openapi puts the model's schema in the document.
BODY_MODEL = "x-herald-body-model"
BODY_MODELS: dict[str, type[BaseModel]] = {}


def body_of(model: type[BaseModel]) -> dict[str, Any]:
    """openapi_extra for a route whose body is `model`, applied by its service."""
    BODY_MODELS[model.__name__] = model
    return {BODY_MODEL: model.__name__}
