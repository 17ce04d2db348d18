"""Channel-delivery throughput beside two baselines measured in the same run.

    .venv/bin/python bench/delivery.py [--deliveries 50000] [--peer-jobs 50000]

1. Herald: N queued email deliveries through the real delivery path (claim, send context,
   liveness, render, address, provider call, batched record with attempt evidence) against a
   provider that answers instantly — deliveries/second end to end.
2. Bare loop: the same rows claimed and completed in batches of 100 with the same SQL shape and
   nothing else — the ceiling for a Python worker on this database.
3. Peer: Procrastinate (a PostgreSQL-backed Python job queue) processing the same number of no-op
   jobs with one worker (needs `pip install procrastinate`; skipped with a note otherwise).

Uses HERALD_BENCH_DATABASE_URL (a server; the bench creates and drops its own databases), else
the embedded PostgreSQL under .herald/bench. Never part of the test run's pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cryptography.fernet import Fernet  # noqa: E402
from tests.conftest import create_database, drop_database  # noqa: E402

from herald.channels.base import Message, ProviderOutcome  # noqa: E402
from herald.config import Settings  # noqa: E402
from herald.db import embedded, migrate  # noqa: E402
from herald.db.engine import libpq_url, make_async_engine  # noqa: E402
from herald.delivery.worker import drain_channel  # noqa: E402
from herald.kinds.sample import SAMPLE_REGISTRY  # noqa: E402
from herald.secrets.vault import TableVault  # noqa: E402

TENANT = "bench"
BATCH = 100


class InstantProvider:
    channel = "email"
    name = "instant"
    is_mock = False

    def __init__(self) -> None:
        self.sent = 0

    def is_configured(self) -> bool:
        return True

    async def send(self, message: Message) -> ProviderOutcome:
        self.sent += 1
        return ProviderOutcome.sent(f"m{self.sent}", "250")

    async def aclose(self) -> None:
        return None


def seed(url: str, n: int) -> None:
    """N people, one event, N recipients and N queued email deliveries, by COPY."""
    with psycopg.connect(libpq_url(url)) as conn:
        with conn.cursor().copy(
            "COPY person (tenant_id, external_id, full_name, email) FROM STDIN"
        ) as copy:
            for i in range(n):
                copy.write_row((TENANT, f"p{i}", f"Person {i}", f"p{i}@example.com"))
        event_id = conn.execute(
            "INSERT INTO notification_event (tenant_id, kind, category, priority, audience, channels, variables, "
            "dedupe_key, fanout_claimed_at, fanout_claim_token, fanout_completed_at, recipient_count) "
            "VALUES (%s, 'announcement.posted', 'announcement', 'normal', '{\"kind\":\"all_users\"}', "
            'ARRAY[\'email\'], \'{"title":"Sports day moved","message":"It is now on Friday."}\', %s, '
            "now(), gen_random_uuid(), now(), %s) RETURNING id",
            (TENANT, uuid.uuid4().hex * 2, n),
        ).fetchone()[0]  # type: ignore[index]
        conn.execute(
            "INSERT INTO notification_recipient (tenant_id, event_id, user_id, user_public_id_snapshot, variables, "
            "occurred_at) SELECT tenant_id, %s, id, public_id, jsonb_build_object('name', full_name), now() "
            "FROM person WHERE tenant_id = %s",
            (event_id, TENANT),
        )
        conn.execute(
            "INSERT INTO notification_delivery (tenant_id, event_id, recipient_id, channel, status) "
            "SELECT tenant_id, event_id, id, 'email', 'queued' FROM notification_recipient WHERE event_id = %s",
            (event_id,),
        )
        conn.execute("ANALYZE")


def requeue(url: str) -> None:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("DELETE FROM notification_delivery_attempt")
        conn.execute(
            "UPDATE notification_delivery SET status = 'queued', sent_at = NULL, attempts = 0, "
            "provider_message_id = NULL, destination_hint = NULL, rendered_title = NULL, rendered_body = NULL, "
            "rendered_hash = NULL, next_attempt_at = now()"
        )
        conn.execute("VACUUM ANALYZE notification_delivery")


async def herald_path(url: str, n: int) -> float:
    engine = make_async_engine(url, pool_size=2)
    settings = Settings(database_url=url)
    vault = TableVault(engine, Fernet.generate_key())
    provider = InstantProvider()
    started = time.perf_counter()
    # What `herald worker` runs for a channel: its batch loops (100 rows each), draining.
    await drain_channel(
        engine, "email", provider, registry=SAMPLE_REGISTRY, vault=vault, settings=settings
    )
    elapsed = time.perf_counter() - started
    await engine.dispose()
    assert provider.sent == n, provider.sent
    return elapsed


async def bare_loop(url: str, n: int) -> float:
    """Claim 100 with the same claim statement, complete them with one UPDATE, repeat."""
    from sqlalchemy import text

    engine = make_async_engine(url, pool_size=2)
    # Herald's claim without the send-context join: the same UPDATE … WHERE id IN (SELECT … FOR
    # UPDATE SKIP LOCKED) shape, returning only ids.
    bare_claim = text(
        "UPDATE notification_delivery d SET status = 'processing', claimed_at = clock_timestamp(), "
        "lease_expires_at = clock_timestamp() + make_interval(secs => :lease_seconds) "
        "WHERE d.id IN (SELECT c.id FROM notification_delivery c WHERE c.status = 'queued' "
        "AND c.channel = :channel AND c.next_attempt_at <= now() ORDER BY c.next_attempt_at, c.id "
        "LIMIT :limit FOR UPDATE SKIP LOCKED) RETURNING d.id"
    )

    complete = text(
        "UPDATE notification_delivery SET status = 'sent', sent_at = now(), attempts = attempts + 1, "
        "claimed_at = NULL, lease_expires_at = NULL WHERE id = ANY(CAST(:ids AS bigint[])) AND status = 'processing'"
    )
    done = 0
    started = time.perf_counter()
    while True:
        async with engine.begin() as conn:
            ids = [
                r.id
                for r in await conn.execute(
                    bare_claim, {"channel": "email", "limit": BATCH, "lease_seconds": 60}
                )
            ]
        if not ids:
            break
        async with engine.begin() as conn:
            await conn.execute(complete, {"ids": ids})
        done += len(ids)
    elapsed = time.perf_counter() - started
    await engine.dispose()
    assert done == n, done
    return elapsed


async def procrastinate_peer(server: str, jobs: int) -> float | None:
    try:
        import procrastinate
    except ImportError:
        return None
    name = f"herald_bench_peer_{uuid.uuid4().hex[:8]}"
    url = create_database(server, name)
    try:
        app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=libpq_url(url)))

        @app.task(name="noop")
        async def noop() -> None:
            return None

        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            for start in range(0, jobs, 1000):
                await noop.batch_defer_async(*({} for _ in range(min(1000, jobs - start))))
            started = time.perf_counter()
            await app.run_worker_async(
                wait=False, install_signal_handlers=False, listen_notify=False
            )
            elapsed = time.perf_counter() - started
        return elapsed
    finally:
        drop_database(server, name)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--deliveries", type=int, default=50_000)
    parser.add_argument(
        "--peer-jobs", type=int, default=None, help="default: the same as --deliveries"
    )
    args = parser.parse_args()
    n = args.deliveries
    peer_jobs = args.peer_jobs or n

    server = os.environ.get("HERALD_BENCH_DATABASE_URL") or embedded.start(
        ROOT / ".herald" / "bench"
    )
    name = f"herald_bench_{uuid.uuid4().hex[:8]}"
    url = create_database(server, name)
    try:
        migrate.upgrade(url)
        with psycopg.connect(libpq_url(url)) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        print(
            f"PostgreSQL {version}; {n:,} queued email deliveries; bare loop in batches of {BATCH}, Herald as its worker runs"
        )
        seed(url, n)
        herald_seconds = asyncio.run(herald_path(url, n))
        requeue(url)
        bare_seconds = asyncio.run(bare_loop(url, n))
        peer_seconds = asyncio.run(procrastinate_peer(server, peer_jobs))
        herald_rate, bare_rate = n / herald_seconds, n / bare_seconds
        print(
            f"herald     end to end:              {herald_seconds:7.2f} s = {herald_rate:8,.0f} deliveries/s"
        )
        print(
            f"bare loop  claim + complete only:   {bare_seconds:7.2f} s = {bare_rate:8,.0f} rows/s"
        )
        print(f"           herald / bare = {herald_rate / bare_rate:.2f} (target >= 0.5)")
        if peer_seconds is None:
            print(
                "peer       procrastinate not installed (pip install procrastinate); no peer figure"
            )
        else:
            peer_rate = peer_jobs / peer_seconds
            print(
                f"peer       procrastinate, {peer_jobs:,} no-op jobs: {peer_seconds:7.2f} s = {peer_rate:8,.0f} jobs/s"
            )
            print(f"           herald / peer = {herald_rate / peer_rate:.1f}x (target >= 10x)")
    finally:
        drop_database(server, name)


if __name__ == "__main__":
    main()
