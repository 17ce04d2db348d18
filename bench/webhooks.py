"""Outbound webhooks (issue 16): what the outbox costs the delivery path, and the sender's rate,
each beside a baseline measured in the same run.

    .venv/bin/python bench/webhooks.py [--deliveries 20000] [--messages 5000]

1. Outbox cost: N queued email deliveries through the real delivery path (claim, send context,
   render, an instant provider, the recorder's batched write) with no webhook endpoint — the
   baseline — and again with one endpoint subscribed to delivery.sent, where the recorder's
   statement also writes N webhook messages.
2. Sender: M webhook messages claimed, signed (standardwebhooks), posted to a local HTTP server
   answering 204 and recorded, beside the baseline of the same M signed posts from a bare httpx
   loop with the same concurrency and no database.

Uses HERALD_BENCH_DATABASE_URL (a server; the bench creates and drops its own databases), else
the embedded PostgreSQL under .herald/bench. Never part of the test run's pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import psycopg
from typing_extensions import override

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cryptography.fernet import Fernet  # noqa: E402
from tests.conftest import create_database, drop_database  # noqa: E402

from bench.delivery import TENANT, InstantProvider, seed_people, seed_queue  # noqa: E402
from herald.config import Settings  # noqa: E402
from herald.db import embedded, migrate  # noqa: E402
from herald.db.engine import libpq_url, make_async_engine  # noqa: E402
from herald.delivery.worker import drain_channel  # noqa: E402
from herald.kinds.sample import SAMPLE_REGISTRY  # noqa: E402
from herald.secrets.vault import TableVault  # noqa: E402
from herald.webhooks import service as webhook_service  # noqa: E402
from herald.webhooks import worker as webhooks  # noqa: E402


class _Quiet(BaseHTTPRequestHandler):
    # Keep-alive, as a real receiver would: the figure is then the sender's, not TCP setup's.
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(204)
        self.send_header("content-length", "0")
        self.end_headers()

    @override
    def log_message(self, format: str, *args: Any) -> None:
        return None


def receiver() -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/hook"


def add_endpoint(url: str, settings: Settings, target: str) -> None:
    secret = webhook_service.new_secret()
    with psycopg.connect(libpq_url(url)) as conn:
        conn.execute(
            "INSERT INTO webhook_endpoint (tenant_id, url, event_types, secret_ciphertext) "
            "VALUES (%s, %s, ARRAY['delivery.sent'], %s)",
            (TENANT, target, webhook_service.encrypt_secret(settings, secret)),
        )


async def deliver_all(url: str, settings: Settings, n: int) -> float:
    engine = make_async_engine(url, pool_size=2)
    provider = InstantProvider()
    vault = TableVault(engine, Fernet.generate_key())
    started = time.perf_counter()
    await drain_channel(
        engine, "email", provider, registry=SAMPLE_REGISTRY, vault=vault, settings=settings
    )
    elapsed = time.perf_counter() - started
    await engine.dispose()
    assert provider.sent == n, provider.sent
    return elapsed


async def send_all(url: str, settings: Settings, m: int) -> float:
    engine = make_async_engine(url, pool_size=2)
    started = time.perf_counter()
    async with webhooks.build_client(settings) as http:
        sent = await webhooks.drain(engine, settings, http)
    elapsed = time.perf_counter() - started
    await engine.dispose()
    assert sent == m, sent
    return elapsed


async def bare_posts(target: str, m: int) -> float:
    secret = webhook_service.new_secret()
    body = '{"data":{"deliveryId":"00000000-0000-0000-0000-000000000000"},"type":"delivery.sent"}'
    gate = asyncio.Semaphore(webhooks.CONCURRENCY)

    async def one(http: httpx.AsyncClient) -> None:
        async with gate:
            headers = webhooks.signed_headers(secret, str(uuid.uuid4()), body, datetime.now(UTC))
            response = await http.post(target, content=body.encode(), headers=headers)
            assert response.status_code == 204

    started = time.perf_counter()
    async with httpx.AsyncClient() as http:
        for start in range(0, m, webhooks.BATCH_LIMIT):
            await asyncio.gather(*(one(http) for _ in range(min(webhooks.BATCH_LIMIT, m - start))))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--deliveries", type=int, default=20_000)
    parser.add_argument("--messages", type=int, default=5_000)
    args = parser.parse_args()
    n, m = args.deliveries, min(args.messages, args.deliveries)

    server = os.environ.get("HERALD_BENCH_DATABASE_URL") or embedded.start(
        ROOT / ".herald" / "bench"
    )
    name = f"herald_bench_{uuid.uuid4().hex[:8]}"
    url = create_database(server, name)
    http_server, target = receiver()
    settings = Settings(
        database_url=url, vault_key=Fernet.generate_key().decode(), webhook_allow_loopback=True
    )
    try:
        migrate.upgrade(url)
        print(f"{n:,} email deliveries; {m:,} webhook messages to a local receiver")
        seed_people(libpq_url(url), n)
        seed_queue(libpq_url(url), n, tied=False)
        plain = asyncio.run(deliver_all(url, settings, n))
        # The same queue again (one event, n queued emails), now with an endpoint subscribed.
        seed_queue(libpq_url(url), n, tied=False)
        add_endpoint(url, settings, target)
        with_outbox = asyncio.run(deliver_all(url, settings, n))
        with psycopg.connect(libpq_url(url)) as conn:
            written = conn.execute("SELECT count(*) FROM webhook_message").fetchone()[0]  # type: ignore[index]
            # Keep M of them for the sender run.
            conn.execute(
                "DELETE FROM webhook_message WHERE id NOT IN "
                "(SELECT id FROM webhook_message ORDER BY id LIMIT %s)",
                (m,),
            )
        print(f"delivery path, no endpoint (baseline): {plain:7.2f} s = {n / plain:8,.0f} /s")
        print(
            f"delivery path, one endpoint:           {with_outbox:7.2f} s = {n / with_outbox:8,.0f} /s"
            f"  ({written:,} webhook messages written; ratio {plain / with_outbox:.2f})"
        )
        sender = asyncio.run(send_all(url, settings, m))
        bare = asyncio.run(bare_posts(target, m))
        print(
            f"webhook sender (claim, sign, post, record): {sender:7.2f} s = {m / sender:8,.0f} /s"
        )
        print(f"bare signed posts, same concurrency:        {bare:7.2f} s = {m / bare:8,.0f} /s")
        print(f"           sender / bare = {bare / sender:.2f}")
    finally:
        http_server.shutdown()
        drop_database(server, name)


if __name__ == "__main__":
    main()
