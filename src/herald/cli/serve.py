"""The long-lived processes: `migrate`, `api`, `worker` and `scheduler` (DESIGN.md §1)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from herald.cli import common
from herald.cli.common import HostOption, PortOption, console
from herald.config import Settings


def migrate() -> None:
    """Apply the database migrations (idempotent)."""
    from herald.db import migrate as db_migrate
    from herald.runtime.database import resolve_database_url

    settings = common.load_settings()
    with common.reported_errors():
        db_migrate.upgrade(resolve_database_url(settings))
    console.print("database is up to date")


def api(host: HostOption = "127.0.0.1", port: PortOption = 8000) -> None:
    """Serve the HTTP API (FastAPI under uvicorn) until SIGINT/SIGTERM."""
    settings = common.load_settings()
    common.configure_logging(settings, "api")
    common.run(_serve(settings, host, port), fast_loop=True)


async def _serve(settings: Settings, host: str, port: int) -> None:
    from herald.api.app import create_app
    from herald.db.engine import API_PING_AFTER_IDLE_SECONDS, make_async_engine
    from herald.kinds import get_registry
    from herald.runtime import server
    from herald.runtime.database import plan_connections, plan_reads

    registry = get_registry()
    connections = await plan_connections(settings, "api")
    engine = make_async_engine(
        connections.url,
        pool_size=settings.db_pool_size,
        ping_after_idle=API_PING_AFTER_IDLE_SECONDS,
        application_name="herald-api",
        prepare=not connections.pooled,
    )
    stop = asyncio.Event()
    try:
        # The inbox's reads: on HERALD_DATABASE_READ_URL's standby when set (herald.db.replica).
        reads = await plan_reads(settings, connections, engine)
        try:
            with server.stop_on_signals(stop):
                app = create_app(settings, engine, registry, reads=reads)
                await server.serve_api(app, host=host, port=port, stop=stop, freeze=True)
        finally:
            if reads.standby is not None:
                await reads.standby.dispose()
    finally:
        await engine.dispose()


def worker(
    tenant: Annotated[
        str | None,
        typer.Option(help="Work for this tenant only (sharding workers by tenant); default: all."),
    ] = None,
    fanout: Annotated[
        bool,
        typer.Option(
            "--fanout/--no-fanout",
            help="Fan events out (--no-fanout: a process for the channel senders only).",
        ),
    ] = True,
    channels: Annotated[
        bool,
        typer.Option(
            "--channels/--no-channels",
            help="Send deliveries (--no-channels: a fan-out process whose event loop no "
            "sender shares, so a big broadcast's sends do not slow its own fan-out).",
        ),
    ] = True,
) -> None:
    """Run the background worker until SIGINT/SIGTERM, then drain and exit."""
    if not fanout and not channels:
        raise typer.BadParameter("--no-fanout and --no-channels together leave nothing to run")
    settings = common.load_settings()
    common.configure_logging(settings, "worker")
    with common.metrics_endpoint(settings):
        common.run(_work(settings, tenant, fanout=fanout, channels=channels), fast_loop=True)


async def _work(
    settings: Settings, tenant: str | None = None, *, fanout: bool = True, channels: bool = True
) -> None:
    from herald.db.engine import make_async_engine
    from herald.kinds import get_registry
    from herald.runtime import server
    from herald.runtime.database import plan_connections
    from herald.runtime.worker import run_worker

    registry = get_registry()
    connections = await plan_connections(settings, "worker")
    engine = make_async_engine(
        connections.url,
        pool_size=settings.db_pool_size,
        application_name="herald-worker",
        prepare=not connections.pooled,
    )
    stop = asyncio.Event()
    # Everything alive now lives as long as the process: out of the collector's walks.
    server.freeze_startup_objects()
    try:
        with server.stop_on_signals(stop):
            await run_worker(
                settings,
                engine,
                registry,
                stop,
                tenant_id=tenant,
                fanout=fanout,
                channels=channels,
            )
    finally:
        # R-OPS-12: the pool is closed before the process exits.
        await engine.dispose()


def scheduler() -> None:
    """Run the scheduler (reminder occurrences) until SIGINT/SIGTERM, then stop cleanly.

    Several may run against one database: a database lease lets one fire at a time.
    """
    settings = common.load_settings()
    common.configure_logging(settings, "scheduler")
    with common.metrics_endpoint(settings):
        common.run(_schedule(settings), fast_loop=True)


async def _schedule(settings: Settings) -> None:
    from herald.db.engine import make_async_engine
    from herald.kinds import get_registry
    from herald.runtime import server
    from herald.runtime.database import plan_connections
    from herald.runtime.scheduler import run_scheduler

    registry = get_registry()
    connections = await plan_connections(settings, "scheduler")
    # One tick's transactions run one after another: a small pool is plenty.
    engine = make_async_engine(
        connections.url,
        pool_size=2,
        application_name="herald-scheduler",
        prepare=not connections.pooled,
    )
    stop = asyncio.Event()
    try:
        with server.stop_on_signals(stop):
            await run_scheduler(settings, engine, registry, stop)
    finally:
        # R-OPS-12: the pool is closed before the process exits.
        await engine.dispose()
