"""A round-robin TCP proxy in front of several `herald api` processes, for the cluster test.

    python -m tests.e2e.rrproxy --listen 8080 --backend 127.0.0.1:8001 --backend 127.0.0.1:8002

Each new client connection goes to the next backend in turn; a backend that refuses the
connection (its process is gone) is skipped for that connection and the next one is tried, as a
load balancer's health check would take it out of rotation. Bytes are copied both ways until
either side closes. A connection open on a backend that dies is cut: the client sees its
connection reset, as it would behind any TCP load balancer. It prints `listening on PORT` once
it accepts connections, and one line per backend it could not reach (first time only).

Standard library only, in its own process so that its copying never shares an event loop (or
a core's turn) with the test's load clients.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import signal
import sys

CHUNK = 65536


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            pass


class Proxy:
    def __init__(self, backends: list[tuple[str, int]]) -> None:
        self.backends = backends
        self._turn = itertools.cycle(range(len(backends)))
        self._reported: set[int] = set()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        for _ in range(len(self.backends)):
            index = next(self._turn)
            host, port = self.backends[index]
            try:
                return await asyncio.open_connection(host, port)
            except OSError as exc:
                if index not in self._reported:
                    self._reported.add(index)
                    print(f"backend {host}:{port} unreachable ({exc}); skipped", flush=True)
        return None

    async def handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        upstream = await self._connect()
        if upstream is None:
            client_w.close()
            return
        backend_r, backend_w = upstream
        try:
            await asyncio.gather(_pipe(client_r, backend_w), _pipe(backend_r, client_w))
        finally:
            for writer in (backend_w, client_w):
                writer.close()


async def serve(port: int, backends: list[tuple[str, int]]) -> None:
    proxy = Proxy(backends)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", port, backlog=512)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        print(f"listening on {port}", flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--backend", action="append", required=True, help="host:port")
    args = parser.parse_args(argv)
    backends = []
    for value in args.backend:
        host, _, port = value.rpartition(":")
        backends.append((host, int(port)))
    asyncio.run(serve(args.listen, backends))


if __name__ == "__main__":
    main(sys.argv[1:])
