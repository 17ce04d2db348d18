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
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald.auth import service as auth
from herald.config import Settings
from herald.db import tenancy
from herald.errors import Forbidden, Unauthenticated
from herald.kinds import Registry
from herald.ratelimit import RateLimits, parse_limit
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


def state(request: Request) -> AppState:
    app_state: AppState = request.app.state.herald
    return app_state


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


def _enter(request: Request, tenant_id: str) -> None:
    setattr(request.state, _TENANT, tenant_id)


def _bearer(authorization: str | None) -> str:
    if not authorization:
        raise Unauthenticated("missing Authorization header")
    scheme, _, credential = authorization.partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        raise Unauthenticated("expected 'Authorization: Bearer <credential>'")
    return credential.strip()


async def _scoped_caller(
    request: Request, authorization: str | None, x_api_key: str | None, scope: str
) -> auth.ApiCaller:
    key = x_api_key or _bearer(authorization)
    async with all_tenants_transaction(request) as conn:
        caller = await auth.authenticate_key(conn, key)
    if not caller.allows(scope):
        raise Forbidden(f"this API key lacks the {scope} scope")
    _enter(request, caller.tenant_id)
    return caller


def require_scope(scope: str) -> Callable[..., Awaitable[auth.ApiCaller]]:
    """A dependency that authenticates an API key and checks one scope."""

    async def dependency(
        request: Request,
        authorization: Annotated[str | None, Header()] = None,
        x_api_key: Annotated[str | None, Header()] = None,
    ) -> auth.ApiCaller:
        return await _scoped_caller(request, authorization, x_api_key, scope)

    return dependency


def limit_sends(scope: str, route: str) -> Callable[..., Awaitable[auth.ApiCaller]]:
    """require_scope, then the send limits (R-SEC-14): one hit on the key's window and one on
    the tenant's, counted per route (`events`, `secrets`), 429 RATE_LIMITED when either is full."""

    async def dependency(
        request: Request,
        authorization: Annotated[str | None, Header()] = None,
        x_api_key: Annotated[str | None, Header()] = None,
    ) -> auth.ApiCaller:
        caller = await _scoped_caller(request, authorization, x_api_key, scope)
        app_state = state(request)
        settings = app_state.settings
        limiter = app_state.rate_limits
        await limiter.check(
            parse_limit(settings.rate_limit_send_per_key), route, "key", caller.key_id
        )
        await limiter.check(
            parse_limit(settings.rate_limit_send_per_tenant), route, "tenant", caller.tenant_id
        )
        return caller

    return dependency


async def current_actor(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> auth.Actor:
    """The end user of a /v1/me route, within their per-person rate limit (R-SEC-14)."""
    token = _bearer(authorization)
    app_state = state(request)
    async with all_tenants_transaction(request) as conn:
        actor = await auth.authenticate_actor(conn, app_state.settings, token)
    _enter(request, actor.tenant_id)
    await app_state.rate_limits.check(
        parse_limit(app_state.settings.rate_limit_per_person),
        "person",
        actor.tenant_id,
        str(actor.person_id),
    )
    return actor


ActorDep = Annotated[auth.Actor, Depends(current_actor)]


async def current_operator(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> auth.Operator:
    credential = _bearer(authorization)
    async with all_tenants_transaction(request) as conn:
        operator = await auth.authenticate_operator(conn, state(request).settings, credential)
    _enter(request, operator.tenant_id)
    return operator


OperatorDep = Annotated[auth.Operator, Depends(current_operator)]


async def metrics_reader(
    request: Request,
    authorization: Annotated[str | None, Header()] = None,
    x_api_key: Annotated[str | None, Header()] = None,
) -> None:
    """GET /metrics needs HERALD_METRICS_TOKEN as a bearer token, or an API key with the
    metrics:read scope: the backlog figures say how busy each channel is, which is nobody's
    business but the operator's."""
    credential = x_api_key or _bearer(authorization)
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
