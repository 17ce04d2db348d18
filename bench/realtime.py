"""1,000 open SSE streams on one `herald api` process while 10,000 in-app deliveries fan out.

    .venv/bin/python bench/realtime.py [--people 1000] [--events 10] [--clients 2]

Uses HERALD_BENCH_DATABASE_URL (any database on the server is fine: the bench creates and drops
its own), else the embedded PostgreSQL under .herald/bench. The shape: `--people` people, every
one of them holding one open stream (so --people streams), and `--events` announcements to all of
them over in_app only, i.e. people × events in-app deliveries (1,000 × 10 = 10,000 by default).

  - the API is a real `herald api` subprocess (LISTEN/NOTIFY transport, default pool size);
  - the streams are raw asyncio HTTP/1.1 clients parsing SSE, spread over `--clients`
    subprocesses, so the client side is not the bottleneck;
  - this process runs the real fan-out (fan_out_next_event, batches of 500) with the real
    NotifyPublisher, stamping each notice's publish time just before its batch is published.

Prints publish-to-receive latency (p50 / p90 / p99 / max, over every delivery received), how many
arrived, a baseline from the same run (the same batch payloads sent by NOTIFY straight to a raw
LISTEN connection, no hub, no HTTP: what the transport alone costs), and the API process's open database connections (pg_stat_activity by application_name:
its pool and its one listener) with no stream, with every stream open, and the most seen while
the fan-out ran — bounded by the pool, independent of the number of streams.
Never part of the test run's pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.harness import free_port  # noqa: E402

from bench import _harness  # noqa: E402
from herald.auth.service import sign_token  # noqa: E402
from herald.config import Settings  # noqa: E402
from herald.db import migrate  # noqa: E402
from herald.db.engine import libpq_url, make_async_engine  # noqa: E402
from herald.fanout.service import InAppNotice  # noqa: E402
from herald.fanout.worker import fan_out_next_event  # noqa: E402
from herald.kinds.sample import SAMPLE_REGISTRY  # noqa: E402
from herald.realtime import service  # noqa: E402
from herald.realtime.hub import LISTENER_APPLICATION_NAME  # noqa: E402
from herald.realtime.publisher import NotifyPublisher  # noqa: E402
from herald.sending.service import SendInput, asend  # noqa: E402

TENANT = "bench"
API_APPLICATION_NAME = "herald-bench-api"
STREAM_PATH = "/v1/me/notifications/stream"


# ---------------------------------------------------------------------------------------------
# Client side (runs in --client subprocesses)


async def _stream(
    host: str,
    port: int,
    token: str,
    connect_gate: asyncio.Semaphore,
    subscribed: asyncio.Event,
    pending: list[int],
    received: list[tuple[str, float]],
    done: asyncio.Event,
    expected: int,
) -> None:
    async with connect_gate:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(
            (
                f"GET {STREAM_PATH} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
            ).encode()
        )
        await writer.drain()
        status = await reader.readline()
        if b" 200 " not in status:
            raise RuntimeError(f"stream refused: {status!r}")
        while (await reader.readline()) not in (b"\r\n", b""):
            pass  # response headers
        # Chunked framing lines are skipped: each SSE event is one chunk, so its lines are whole.
        while not (line := await reader.readline()).startswith(b": subscribed"):
            if not line:
                raise RuntimeError("stream ended before it was registered")
    pending[0] -= 1
    if pending[0] == 0:
        subscribed.set()
    try:
        while line := await reader.readline():
            if line.startswith(b"data: "):
                at = time.time()
                received.append((json.loads(line[6:])["recipientId"], at))
                if len(received) >= expected:
                    done.set()
    finally:
        writer.close()


async def run_clients(spec: dict[str, Any]) -> list[tuple[str, float]]:
    tokens: list[str] = spec["tokens"]
    expected = len(tokens) * int(spec["events"])
    subscribed, done = asyncio.Event(), asyncio.Event()
    pending = [len(tokens)]
    received: list[tuple[str, float]] = []
    gate = asyncio.Semaphore(50)
    tasks = [
        asyncio.create_task(
            _stream(
                spec["host"],
                spec["port"],
                token,
                gate,
                subscribed,
                pending,
                received,
                done,
                expected,
            )
        )
        for token in tokens
    ]
    await asyncio.wait_for(subscribed.wait(), 120)
    print("READY", flush=True)
    # Until every expected event arrived, or nothing has arrived for a while.
    last = -1
    while not done.is_set():
        try:
            await asyncio.wait_for(done.wait(), float(spec["idle_seconds"]))
        except TimeoutError:
            if len(received) == last and last >= 0:
                break
            last = len(received)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return received


# ---------------------------------------------------------------------------------------------
# Orchestration


def seed_people(url: str, people: int) -> list[str]:
    with psycopg.connect(libpq_url(url)) as conn:
        externals = _harness.seed_people(conn, TENANT, people)
        conn.execute("ANALYZE person")
    return externals


def api_connections(url: str) -> int:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name IN (%s, %s)",
            (API_APPLICATION_NAME, LISTENER_APPLICATION_NAME),
        ).fetchone()
    return int(row[0]) if row else 0


def notify_baseline(url: str, rounds: int = 20, batch: int = 500) -> list[float]:
    """Per-notice latency (ms) of the bare transport: one fan-out batch's payloads NOTIFYed in
    one transaction, timed until each payload reaches a plain LISTEN connection."""
    channel = "herald_bench_baseline"
    notices = [
        InAppNotice(
            tenant_id=TENANT,
            person_id=i,
            recipient_public_id=uuid.uuid4(),
            kind="announcement.posted",
            category="announcement",
            priority="normal",
            occurred_at=datetime.now(UTC),
        )
        for i in range(batch)
    ]
    payloads = service.encode(notices)
    sizes = [len(service.decode(p)) for p in payloads]
    latencies: list[float] = []
    with (
        psycopg.connect(libpq_url(url), autocommit=True) as listener,
        psycopg.connect(libpq_url(url), autocommit=True) as sender,
    ):
        listener.execute(f"LISTEN {channel}")
        for _ in range(rounds):
            started = time.time()
            with sender.transaction():
                sender.execute(
                    "SELECT pg_notify(%s, p) FROM unnest(%s::text[]) AS p", (channel, payloads)
                )
            for n, _notify in enumerate(listener.notifies(timeout=10, stop_after=len(payloads))):
                latencies.extend([(time.time() - started) * 1000] * sizes[n])
    return sorted(latencies)


async def fan_out(url: str, events: int, sampler_url: str) -> tuple[dict[str, float], float, int]:
    """Send `events` announcements to everyone and fan them out with the real publisher;
    return publish times per recipient id, the fan-out's seconds and the most API connections
    sampled meanwhile."""
    engine = make_async_engine(url, pool_size=2)
    published: dict[str, float] = {}
    notify = NotifyPublisher(engine)

    async def timed_publish(notices: Any) -> None:
        at = time.time()
        for notice in notices:
            assert isinstance(notice, InAppNotice)
            published[str(notice.recipient_public_id)] = at
        await notify(notices)

    for n in range(events):
        async with engine.begin() as conn:
            await asend(
                conn,
                SendInput(
                    tenant_id=TENANT,
                    kind="announcement.posted",
                    audience={"kind": "all_users"},
                    channels=["in_app"],
                    variables={"title": f"Bench {n}", "message": "Realtime bench."},
                ),
                registry=SAMPLE_REGISTRY,
            )

    most = 0
    running = True

    async def sample() -> None:
        nonlocal most
        while running:
            most = max(most, await asyncio.to_thread(api_connections, sampler_url))
            await asyncio.sleep(0.1)

    sampler = asyncio.create_task(sample())
    started = time.perf_counter()
    while await fan_out_next_event(
        engine, SAMPLE_REGISTRY, batch_size=500, publish=timed_publish, tenant_id=TENANT
    ):
        pass
    elapsed = time.perf_counter() - started
    running = False
    await sampler
    await engine.dispose()
    return published, elapsed, most


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 10) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--people", type=int, default=1000, help="people = open streams")
    parser.add_argument("--events", type=int, default=10)
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    parser.add_argument("--client", help=argparse.SUPPRESS)  # internal: a client's spec file
    args = parser.parse_args()
    if args.client:
        spec = json.loads(Path(args.client).read_text())
        Path(spec["out"]).write_text(json.dumps(asyncio.run(run_clients(spec))))
        return

    bench = _harness.BenchDatabase.create(None, "herald_bench")
    url = bench.url
    work = Path(tempfile.mkdtemp(prefix="herald-bench-realtime-"))
    api: subprocess.Popen[bytes] | None = None
    clients: list[subprocess.Popen[str]] = []
    try:
        migrate.upgrade(url)
        version = bench.server_version()
        externals = seed_people(url, args.people)
        baseline = notify_baseline(url)
        print(
            f"PostgreSQL {version}; {args.people:,} people, each with one open stream; "
            f"{args.events} events to all of them over in_app = "
            f"{args.people * args.events:,} in-app deliveries; {args.clients} client processes"
        )
        port = free_port()
        # libpq names every connection of the API's pool after this; the listener names itself.
        environment = {"PGAPPNAME": API_APPLICATION_NAME}
        api = _harness.start_api(url, bench.secret, port, work / "api.log", environment)
        time.sleep(1.0)  # let the listener connect
        idle_connections = api_connections(url)

        tokens = [sign_token(bench.settings, tenant_id=TENANT, subject=e) for e in externals]
        share = -(-len(tokens) // args.clients)
        outs = []
        opened = time.perf_counter()
        for i in range(args.clients):
            spec = work / f"client{i}.json"
            out = work / f"received{i}.json"
            spec.write_text(
                json.dumps(
                    {
                        "host": "127.0.0.1",
                        "port": port,
                        "tokens": tokens[i * share : (i + 1) * share],
                        "events": args.events,
                        "idle_seconds": 15,
                        "out": str(out),
                    }
                )
            )
            outs.append(out)
            clients.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--client", str(spec)],
                    stdout=subprocess.PIPE,
                    text=True,
                    stdin=subprocess.DEVNULL,
                )
            )
        for client in clients:
            assert client.stdout is not None
            line = client.stdout.readline().strip()
            if line != "READY":
                raise RuntimeError(f"a client failed to open its streams: {line!r}")
        open_seconds = time.perf_counter() - opened
        streaming_connections = api_connections(url)

        published, fan_seconds, most = asyncio.run(fan_out(url, args.events, url))
        for client in clients:
            client.wait(timeout=300)
        received = [tuple(r) for out in outs for r in json.loads(out.read_text())]

        latencies = sorted((at - published[rid]) * 1000 for rid, at in received if rid in published)
        expected = args.people * args.events
        print(f"streams   {args.people:,} opened and registered in {open_seconds:.2f} s")
        print(
            f"fan-out   {len(published):,} in-app deliveries published in {fan_seconds:.2f} s "
            f"({len(published) / fan_seconds:,.0f}/s)"
        )
        print(f"received  {len(received):,} of {expected:,} events on the streams")
        if latencies:
            print(
                "latency   publish→receive: "
                f"p50 {percentile(latencies, 50):.1f} ms, p90 {percentile(latencies, 90):.1f} ms, "
                f"p99 {percentile(latencies, 99):.1f} ms, max {latencies[-1]:.1f} ms"
            )
        print(
            "baseline  NOTIFY→raw LISTEN of the same 500-notice batches, no hub, no HTTP: "
            f"p50 {percentile(baseline, 50):.1f} ms, p99 {percentile(baseline, 99):.1f} ms"
        )
        print(
            "db conns  API process (pool + listener): "
            f"{idle_connections} with no stream, {streaming_connections} with "
            f"{args.people:,} streams open, at most {most} during the fan-out "
            f"(bound: 2 × HERALD_DB_POOL_SIZE + 1 listener = {2 * Settings().db_pool_size + 1})"
        )
    finally:
        for client in clients:
            if client.poll() is None:
                client.kill()
                client.wait()
        if api is not None:
            _harness.stop_process(api)
        bench.drop()


if __name__ == "__main__":
    main()
