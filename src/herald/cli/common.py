"""What every `herald` command shares: the console for people, the options, turning Herald's
errors into one line and an exit status, settings, logging and metrics set-up, the event loop, and
one transaction on the process's database."""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from herald.config import Settings
from herald.errors import HeraldError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

T = TypeVar("T")

# For people; machine-readable answers go to stdout with print().
console = Console(stderr=True, soft_wrap=True, highlight=False)

HostOption = Annotated[str, typer.Option(help="Address to listen on.")]
PortOption = Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")]
TenantOption = Annotated[str, typer.Option("--tenant", help="Tenant id.")]


def fail(message: str, code: int = 1) -> NoReturn:
    console.print(f"[red]error:[/] {escape(message)}", markup=True)
    raise typer.Exit(code)


@contextmanager
def reported_errors() -> Iterator[None]:
    """Turn Herald's own errors, and an unreachable database, into one line on stderr and
    exit status 1; anything else is a bug and keeps its traceback."""
    try:
        yield
    except HeraldError as exc:
        fail(f"{exc.code}: {exc.message}")
    except Exception as exc:
        reason = _connection_failure(exc)
        if reason is None:
            raise
        fail(f"cannot reach the database: {reason}")


def _connection_failure(exc: Exception) -> str | None:
    import psycopg
    from sqlalchemy.exc import OperationalError

    if isinstance(exc, OperationalError):
        return str(exc.orig).strip()
    if isinstance(exc, psycopg.OperationalError):
        return str(exc).strip()
    return None


def load_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"HERALD_{'.'.join(str(p) for p in e['loc']).upper()}: {e['msg']}" for e in exc.errors()
        )
        fail(f"invalid configuration: {problems}", code=2)


def configure_logging(settings: Settings, role: str, *, dev: bool = False) -> None:
    """Logs (JSON a line, or text under `herald dev`), the metrics directory this host's Herald
    processes share, and tracing when an OTLP endpoint is set (herald.observability)."""
    from herald.observability import logs, tracing

    logs.configure(settings, role, dev=dev)
    if not dev:
        # One process in `herald dev`: its own registry is the whole story.
        from herald.observability import metrics

        directory = settings.metrics_dir or (
            Path(os.environ[metrics.MULTIPROC_ENV])
            if os.environ.get(metrics.MULTIPROC_ENV)
            else settings.data_dir / "metrics"
        )
        metrics.use_directory(directory)
    if tracing.configure(settings, role):
        atexit.register(tracing.shutdown)


@contextmanager
def metrics_endpoint(settings: Settings) -> Iterator[None]:
    """HERALD_METRICS_PORT: this process serves /metrics itself (a worker with no API beside it)."""
    if settings.metrics_port is None:
        yield
        return
    from prometheus_client import start_http_server

    from herald.observability import metrics

    server, thread = start_http_server(settings.metrics_port, registry=metrics.registry())
    logging.getLogger(__name__).info("metrics served on port %d", settings.metrics_port)
    try:
        yield
    finally:
        server.shutdown()
        thread.join(timeout=5)


def run(main: Coroutine[Any, Any, T], *, fast_loop: bool = False) -> T:
    """Run `main` to completion; `fast_loop`: on uvloop's event loop when it is installed (the
    API, where the loop's own cost is part of every request's, and the worker and the
    scheduler, whose batches make a dozen round trips each: psycopg's wait on every one of them
    registers and unregisters a reader with the loop, and on the standard loop that was a
    tenth of a worker's CPU a delivery; docs/scaling.md, the worker)."""
    with reported_errors():
        try:
            with asyncio.Runner(loop_factory=fast_loop_factory() if fast_loop else None) as runner:
                return runner.run(main)
        except asyncio.CancelledError:
            # A second Ctrl-C cancelled the graceful stop.
            raise typer.Exit(130) from None


def fast_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop factory, or None (the standard loop) where it is not installed: the
    loop `herald api`, `herald worker` and `herald scheduler` run on (benches use it too)."""
    try:
        import uvloop
    except ImportError:  # not installed (Windows): the standard loop
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


async def in_transaction(settings: Settings, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
    """Run `work` in one transaction on this process's database, then close the pool."""
    from herald.db.engine import make_async_engine
    from herald.runtime.database import resolve_database_url

    engine = make_async_engine(
        resolve_database_url(settings), pool_size=1, application_name="herald-cli"
    )
    try:
        async with engine.begin() as conn:
            return await work(conn)
    finally:
        await engine.dispose()
