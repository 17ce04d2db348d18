"""Running Herald's long-lived roles in one asyncio loop: uvicorn in-process, and the signals
that stop them.

Uvicorn normally owns SIGINT/SIGTERM and re-raises the signal after its own shutdown, which ends
the process before `atexit` handlers run — and the embedded PostgreSQL is stopped by one. Here
the process owns its signals instead: the first sets a `stop` event that every role watches (the
API stops accepting and finishes its requests, the worker drains), a second one cancels the run.
"""

from __future__ import annotations

import asyncio
import gc
import signal
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from socket import socket
from typing import Any

import uvicorn
from typing_extensions import override

from herald.errors import ConfigurationError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _InProcessServer(uvicorn.Server):
    """A uvicorn server that leaves signals to the process and reports when it listens."""

    def __init__(
        self, config: uvicorn.Config, listening: asyncio.Event | None, freeze: bool
    ) -> None:
        super().__init__(config)
        self._listening = listening
        self._freeze = freeze

    @override
    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    @override
    async def startup(self, sockets: list[socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self._freeze:
            freeze_startup_objects()
        if self.started and self._listening is not None:
            self._listening.set()


def freeze_startup_objects() -> None:
    """Move every object alive after start-up (modules, routes, models, compiled SQL) out of the
    collector's reach, so that a full collection walks only what requests and batches made
    since, and let the young generation grow to 10,000 objects before a collection. For Herald's
    own processes only (`herald api`, `herald dev`, `herald worker`), never a host's or a test's:
    gen-2 pauses of up to 64 ms were the API's p99 at 16 clients (docs/performance.md), and the
    collector was a fifth of the worker's Python a delivery with a fast provider (8.5 of 40 µs;
    1.1 µs with this), the in-process drain 16,000 → 19,500 deliveries a second
    (docs/scaling.md, the worker). The worker was once left out because a 1,000,000-person broadcast
    ran slower with this and the JSON outcome batch together; a bisection put all of that
    on the outcome batch's plan, since fixed (docs/scaling.md, generic plans), and none on this."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 10)


async def serve_api(
    app: Any,
    *,
    host: str,
    port: int,
    stop: asyncio.Event,
    listening: asyncio.Event | None = None,
    log_level: str = "info",
    freeze: bool = False,
) -> None:
    """Serve `app` until `stop` is set, then finish the requests in flight and return.

    `listening` is set once the socket is bound, so a caller can announce the URL truthfully.
    `freeze`: the process is Herald's own (`herald api`, `herald dev`), so what is alive once it
    listens is frozen out of the collector's walks (freeze_startup_objects); never in a host's
    or a test's process.
    """
    # log_config=None: uvicorn's loggers go through the process's handler (herald.observability.logs:
    # JSON lines, redaction) instead of handlers of their own. No access log: it carries the
    # client's address and raw query strings; the HTTP middleware logs each request instead.
    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, log_config=None, access_log=False
    )
    server = _InProcessServer(config, listening, freeze)

    async def exit_on_stop() -> None:
        await stop.wait()
        server.should_exit = True
        # Uvicorn waits for open responses before it shuts the app down, and a live SSE stream
        # never ends by itself: end the streams (closing the realtime hub is idempotent) so a
        # stop request is not held hostage by an open browser tab.
        hub = getattr(getattr(getattr(app, "state", None), "herald", None), "realtime", None)
        if hub is not None:
            await hub.aclose()

    watcher = asyncio.create_task(exit_on_stop())
    try:
        await server.serve()
    except SystemExit as exc:
        # uvicorn logs the bind error and calls sys.exit(); say which address it was.
        raise ConfigurationError(f"the API could not listen on {host}:{port}") from exc
    finally:
        watcher.cancel()


@contextmanager
def stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """SIGINT/SIGTERM set `stop` (graceful drain); a second one cancels the running task."""
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()

    def on_signal() -> None:
        if stop.is_set() and main is not None:
            main.cancel()
        stop.set()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal)
    try:
        yield
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


async def run_roles(stop: asyncio.Event, *roles: Awaitable[None]) -> None:
    """Run roles side by side; when any one ends (or fails), set `stop` so the others drain.

    The first failure is re-raised once every role has returned.
    """

    async def role_then_stop(role: Awaitable[None]) -> None:
        try:
            await role
        finally:
            stop.set()

    outcomes = await asyncio.gather(*(role_then_stop(r) for r in roles), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
