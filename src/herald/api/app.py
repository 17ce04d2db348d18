"""Assemble the FastAPI application: routers, error rendering, health."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.api.deps import AppState, transaction
from herald.config import Settings
from herald.db import health
from herald.errors import HeraldError
from herald.kinds import Registry
from herald.realtime.hub import RealtimeHub, build_hub
from herald.secrets.vault import Vault, build_vault

log = logging.getLogger(__name__)


def error_body(code: str, message: str) -> dict[str, dict[str, str]]:
    return {"error": {"code": code, "message": message}}


def create_app(
    settings: Settings,
    engine: AsyncEngine,
    registry: Registry,
    *,
    vault: Vault | None = None,
    realtime: RealtimeHub | None = None,
) -> FastAPI:
    hub = realtime if realtime is not None else build_hub(settings, engine)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # One realtime listener per API process, shared by all its open streams.
        hub.start()
        try:
            yield
        finally:
            await hub.aclose()

    app = FastAPI(title="Herald", version="0.1.0", docs_url="/docs", lifespan=lifespan)
    app.state.herald = AppState(
        settings=settings,
        engine=engine,
        registry=registry,
        vault=vault if vault is not None else build_vault(settings, engine),
        realtime=hub,
    )

    @app.exception_handler(HeraldError)
    async def herald_error(_: Request, exc: HeraldError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def malformed(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err.get('loc', ()))}: {err.get('msg')}"
            for err in exc.errors()
        )
        return JSONResponse(error_body("REQUEST_MALFORMED", problems), status_code=422)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz(request: Request) -> dict[str, str]:
        async with transaction(request) as conn:
            await health.ping(conn)
        return {"status": "ready"}

    for router in _routers():
        app.include_router(router)
    return app


def _routers() -> list[APIRouter]:
    """Every stage's router, assembled in one place so the route table reads top to bottom."""
    from herald.admin.dead_letters import routes as admin_dead_letters
    from herald.admin.history import routes as admin_history
    from herald.admin.templates import routes as admin_templates
    from herald.centre import routes as centre
    from herald.devices import routes as devices
    from herald.directory import routes as directory
    from herald.feed import routes as feed
    from herald.observability import routes as observability
    from herald.preferences import routes as preferences
    from herald.realtime import routes as realtime
    from herald.secrets import routes as secrets
    from herald.sending import routes as sending

    return [
        sending.router,
        directory.router,
        secrets.router,
        centre.router,
        realtime.router,
        observability.router,
        preferences.router,
        devices.router,
        feed.router,
        admin_templates.router,
        admin_history.router,
        admin_dead_letters.router,
    ]
