"""Real faults for tests: a TCP proxy that can cut a server off, and a private Redis to freeze.

The proxy runs in a thread of its own, so it serves in-process engines and `herald` subprocesses
alike. `cut()` closes every open connection and stops listening (clients see connection refused,
as with a stopped PostgreSQL); `restore()` listens again on the same port.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from functools import partial
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests.e2e.harness import free_port


class TcpProxy:
    """Listens on 127.0.0.1; forwards to a TCP server, or to a Unix socket (`target_host` a
    directory, as libpq names one: the embedded PostgreSQL listens on a socket only)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._generation = 0  # bumped by every cut
        self._lose_answer_to: bytes | None = None
        self._serving: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.restore()

    def url_for(self, database_url: str) -> str:
        """`database_url` with its host and port pointed at this proxy."""
        url = make_url(database_url)
        query = {k: v for k, v in url.query.items() if k not in ("host", "port")}
        return url.set(host="127.0.0.1", port=self.port, query=query).render_as_string(
            hide_password=False
        )

    def _call(self, coro: object) -> None:
        assert asyncio.iscoroutine(coro)
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    def restore(self) -> None:
        self._call(self._listen())

    def cut(self) -> None:
        self._call(self._cut())

    def lose_answer_to(self, message: bytes) -> None:
        """Arm a one-shot fault: the next client message containing `message` reaches the server,
        and when the server answers, the answer is dropped and the connection closed — a COMMIT
        that lands while its client is told the connection was lost."""
        self._lose_answer_to = message

    def close(self) -> None:
        self.cut()
        self._call(self._drain())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    async def _listen(self) -> None:
        if self._server is None:
            # each connection carries the generation of the listener that accepted it
            self._server = await asyncio.start_server(
                partial(self._serve, generation=self._generation),
                "127.0.0.1",
                self.port,
                reuse_address=True,
            )

    async def _cut(self) -> None:
        self._generation += 1
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _drain(self) -> None:
        """Let the connections the cut aborted finish, so no task is left pending at close."""
        if self._serving:
            await asyncio.wait(self._serving, timeout=5)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, generation: int
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)
        host, port = self.target
        if generation != self._generation:  # accepted by a listener since cut
            writer.transport.abort()
            return
        try:
            if host.startswith("/"):
                up_reader, up_writer = await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
            else:
                up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.transport.abort()
            return
        if generation != self._generation:
            # cut while this one connected upstream: a cut must leave no connection alive (one
            # did once, in CI, and a worker used it all through the "outage")
            writer.transport.abort()
            up_writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        answer_lost = asyncio.Event()

        async def pipe(
            src: asyncio.StreamReader, dst: asyncio.StreamWriter, upstream: bool
        ) -> None:
            with suppress(OSError, asyncio.CancelledError):
                while data := await src.read(65536):
                    if not upstream and answer_lost.is_set():
                        up_writer.transport.abort()  # the server answered the marked message:
                        break  # the answer is dropped and both sides are closed
                    dst.write(data)
                    await dst.drain()
                    armed = self._lose_answer_to
                    if upstream and armed is not None and armed in data:
                        self._lose_answer_to = None
                        answer_lost.set()
            dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))
        self._writers -= {writer, up_writer}


@contextmanager
def proxy_for(database_url: str) -> Iterator[TcpProxy]:
    url = make_url(database_url)
    socket_dir = url.query.get("host")
    host = socket_dir if isinstance(socket_dir, str) else url.host
    proxy = TcpProxy(host or "127.0.0.1", url.port or 5432)
    try:
        yield proxy
    finally:
        proxy.close()


class PrivateRedis:
    """A redis-server of the test's own on a free port, so freezing it disturbs nobody else."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            if os.environ.get("HERALD_TEST_REDIS_URL"):
                pytest.fail("HERALD_TEST_REDIS_URL is set but redis-server is not installed")
            pytest.skip("Redis tests skipped: no redis-server on this machine (CI has one)")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._wait_until_up()

    def _wait_until_up(self) -> None:
        import redis

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                redis.Redis(port=self.port, socket_connect_timeout=0.5).ping()
                return
            except redis.RedisError:
                time.sleep(0.05)
        raise AssertionError("the private redis-server never answered")

    def freeze(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        self.thaw()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@contextmanager
def private_redis(workdir: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(workdir)
    try:
        yield server
    finally:
        server.close()
