"""Assemble the FastAPI application: routers, error rendering, health."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import redis.exceptions
import sqlalchemy.exc
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.exceptions import HTTPException as StarletteHTTPException

import herald
from herald import outages
from herald.api import docs, limits, openapi
from herald.auth.deps import AppState
from herald.centre import fast
from herald.config import Settings
from herald.db import health
from herald.db.replica import ReadRouting
from herald.errors import (
    DatabaseConflict,
    DatabaseUnavailable,
    HeraldError,
    InternalError,
    MethodNotAllowed,
    NotFound,
    RateLimited,
    RedisUnavailable,
    RequestMalformed,
    ServiceUnavailable,
)
from herald.kinds import Registry
from herald.observability.http import ObservabilityMiddleware, route_template
from herald.ratelimit import RateLimits
from herald.realtime.hub import RealtimeHub, build_hub
from herald.secrets.vault import Vault, build_vault

log = logging.getLogger(__name__)


def error_body(code: str, message: str) -> dict[str, dict[str, str]]:
    return {"error": {"code": code, "message": message}}


def unavailable_response(error: ServiceUnavailable, **extra: Any) -> JSONResponse:
    return JSONResponse(
        {**extra, **error_body(error.code, error.message)},
        status_code=error.status,
        headers={"Retry-After": str(error.retry_after)},
    )


def outage_error(dependency: str) -> ServiceUnavailable:
    if dependency == outages.DATABASE:
        return DatabaseUnavailable()
    if dependency == outages.REDIS:
        return RedisUnavailable()
    return ServiceUnavailable()  # e.g. "migrations": the schema is behind the code


def create_app(
    settings: Settings,
    engine: AsyncEngine,
    registry: Registry,
    *,
    vault: Vault | None = None,
    realtime: RealtimeHub | None = None,
    reads: ReadRouting | None = None,
) -> FastAPI:
    """`reads`: where the inbox's reads run (herald.db.replica); default: the primary alone."""
    hub = realtime if realtime is not None else build_hub(settings, engine)
    rate_limits = RateLimits.build(settings.redis_url)
    read_routing = reads if reads is not None else ReadRouting(engine)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # One realtime listener per API process, shared by all its open streams.
        hub.start()
        try:
            yield
        finally:
            await hub.aclose()
            await rate_limits.aclose()
            await read_routing.aclose()

    # /docs and /redoc come from herald.api.docs, which serves their scripts itself (no CDN).
    app = FastAPI(
        title="Herald",
        version=herald.__version__,
        docs_url=None,
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
        lifespan=lifespan,
    )
    app.include_router(docs.router(app.title, app.openapi_url or "/openapi.json"))
    app.state.herald = AppState(
        settings=settings,
        engine=engine,
        registry=registry,
        vault=vault if vault is not None else build_vault(settings, engine),
        realtime=hub,
        rate_limits=rate_limits,
        reads=read_routing,
    )

    _note_database_recoveries(engine)
    # Request id, request log line, latency histogram and server span (herald.observability).
    app.add_middleware(ObservabilityMiddleware)

    @app.exception_handler(HeraldError)
    async def herald_error(_: Request, exc: HeraldError) -> JSONResponse:
        if isinstance(exc, ServiceUnavailable):
            return unavailable_response(exc)
        if isinstance(exc, RateLimited):
            return JSONResponse(
                error_body(exc.code, exc.message),
                status_code=exc.status,
                headers={"Retry-After": str(exc.retry_after)},
            )
        return JSONResponse(error_body(exc.code, exc.message), status_code=exc.status)

    # A dependency's outage is a quick 503 with Retry-After in Herald's envelope, logged once per
    # outage and never with a traceback; any other escaped error is a 500 in the same envelope.
    async def dependency_error(request: Request, exc: Exception) -> JSONResponse:
        if outages.is_conflict(exc):
            # PostgreSQL chose this request's transaction to break a deadlock with other work
            # (a worker recording the same rows): rolled back whole, the server up. Not an
            # outage, and not a bug: the caller is told to run it again.
            log.warning(
                "%s %s rolled back to break a lock conflict: %s",
                request.method,
                route_template(request.scope),
                outages.describe(exc),
            )
            return unavailable_response(DatabaseConflict())
        dependency = outages.unavailable(exc)
        if dependency is None:
            log.error(
                "%s %s failed: %s",
                request.method,
                request.url.path,
                outages.describe(exc),
                exc_info=exc,
            )
            return JSONResponse(error_body(InternalError.code, InternalError().message), 500)
        outages.state(dependency).failed(exc)
        return unavailable_response(outage_error(dependency))

    for error_class in (
        sqlalchemy.exc.SQLAlchemyError,
        psycopg.Error,
        redis.exceptions.RedisError,
    ):
        app.add_exception_handler(error_class, dependency_error)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        return await dependency_error(request, exc)

    @app.exception_handler(RequestValidationError)
    async def malformed(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err.get('loc', ()))}: {err.get('msg')}"
            for err in exc.errors()
        )
        return JSONResponse(error_body(RequestMalformed.code, problems), RequestMalformed.status)

    # What the router and FastAPI answer by themselves (an unknown path, a method the path does
    # not serve, a body that cannot be decoded) in the same envelope as every other error.
    @app.exception_handler(StarletteHTTPException)
    async def routing_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 405:
            allowed = _allowed_methods(app, request.url.path)
            return JSONResponse(
                error_body(MethodNotAllowed.code, MethodNotAllowed.default_message()),
                MethodNotAllowed.status,
                headers={"Allow": ", ".join(allowed)},
            )
        if exc.status_code == 404:
            return JSONResponse(error_body(NotFound.code, "No such path."), NotFound.status)
        if exc.status_code == 400:
            # FastAPI's "There was an error parsing the body" (e.g. a body that is not UTF-8).
            message = "body: the body could not be read as JSON (is it UTF-8?)"
            return JSONResponse(error_body(RequestMalformed.code, message), RequestMalformed.status)
        return JSONResponse(
            error_body(HeraldError.code, str(exc.detail)), exc.status_code, headers=exc.headers
        )

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz(request: Request) -> JSONResponse:
        """Ready when every dependency answers within a second or two and the schema is at the
        code's migration head; else 503 naming each check that fails."""
        herald_state: AppState = request.app.state.herald
        vault = herald_state.vault
        checks = await health.check(herald_state.engine, vault.ping if vault.remote else None)
        down = [name for name, result in checks.items() if result != "ok"]
        if not down:
            return JSONResponse({"status": "ready", "checks": checks})
        return unavailable_response(outage_error(down[0]), status="unavailable", checks=checks)

    for router in _routers():
        app.include_router(router)
    # The inbox's plain requests skip FastAPI's per-request machinery (herald.centre.fast).
    fast.install(app)
    app.add_middleware(limits.BodySizeLimit, max_bytes=limits.MAX_BODY_BYTES)
    _allow_origins(app, settings.cors_origin_list)
    openapi.install(app)
    return app


def _allow_origins(app: FastAPI, origins: list[str]) -> None:
    """CORS for the browser origins in HERALD_CORS_ORIGINS and no others; outermost, so errors,
    refusals and preflights carry the headers too. Bearer tokens, not cookies: no credentials."""
    if not origins:
        return
    app.add_middleware(
        CORSMiddleware,
        allow_origins=origins,
        allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
        allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID"],
        expose_headers=["Retry-After", "X-Request-Id", "Location"],
        max_age=600,
    )


def _allowed_methods(app: FastAPI, path: str) -> list[str]:
    """Every method served at the path the request named. Starlette's own 405 lists only the
    methods of the first route whose path matched, so `OPTIONS /v1/admin/templates` said `GET`
    though POST is served there too: here the methods of every route with that path are joined
    (the path being the first route template that matches, as routing picks it)."""
    template: str | None = None
    methods: set[str] = set()
    for route in openapi.leaf_routes(app):
        served = getattr(route, "methods", None)
        regex = getattr(route, "path_regex", None)
        if not served or regex is None:
            continue
        if template is None and regex.match(path):
            template = route.path_format
        if template is not None and route.path_format == template:
            methods |= served
    return sorted(methods)


def _note_database_recoveries(engine: AsyncEngine) -> None:
    """A new pooled connection means the database answers: the end of an outage, if one was on."""
    if not event.contains(engine.sync_engine, "connect", _database_answered):
        event.listen(engine.sync_engine, "connect", _database_answered)


def _database_answered(*_: object) -> None:
    outages.state(outages.DATABASE).succeeded()


def _routers() -> list[APIRouter]:
    """Every stage's router, assembled in one place so the route table reads top to bottom.

    The end user's inbox comes first: FastAPI tries the routers in this order on every request,
    and each router tried before the matching one cost the inbox ~9 µs (46 µs a request from
    sixth place, a twentieth of a list request's whole cost in the API process). No two routers
    serve the same path, so the order decides nothing else."""
    from herald.admin.dead_letters import routes as admin_dead_letters
    from herald.admin.history import routes as admin_history
    from herald.admin.kinds import routes as admin_kinds
    from herald.admin.providers import routes as admin_providers
    from herald.admin.templates import routes as admin_templates
    from herald.admin.trace import routes as admin_trace
    from herald.centre import routes as centre
    from herald.console import routes as console
    from herald.devices import routes as devices
    from herald.directory import routes as directory
    from herald.feed import routes as feed
    from herald.followups import routes as followups
    from herald.observability import routes as observability
    from herald.preferences import routes as preferences
    from herald.realtime import routes as realtime
    from herald.receipts import routes as receipts
    from herald.scheduling.broadcasts import routes as admin_broadcasts
    from herald.scheduling.reminders import routes as admin_reminders
    from herald.secrets import routes as secrets
    from herald.sending import routes as sending
    from herald.webhooks import routes as admin_webhooks
    from herald.widget import routes as widget

    return [
        centre.router,
        sending.router,
        widget.router,
        followups.router,
        directory.router,
        secrets.router,
        realtime.router,
        observability.router,
        preferences.router,
        devices.router,
        devices.webpush_router,
        feed.router,
        admin_templates.router,
        admin_kinds.router,
        admin_history.router,
        admin_dead_letters.router,
        admin_trace.router,
        console.router,
        admin_reminders.router,
        admin_broadcasts.router,
        admin_webhooks.router,
        admin_providers.router,
        receipts.router,
    ]
