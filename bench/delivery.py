"""Channel delivery beside the anchor claim loop, claim cost by queue depth, and 1 vs 2 workers.

    .venv/bin/python bench/delivery.py [--deliveries 50000] [--repeat 3] [--history MONTHS]
        [--depths 10000,1000000] [--claims 50] [--workers 1,2] [--process-deliveries N]
        [--peer-jobs N] [--webpush-deliveries N]

Everything runs in one database of its own on one server, in one run:

1. Herald against the anchor, with spread and with tied next_attempt_at (one fan-out batch
   queues thousands of rows in the same millisecond): N queued email deliveries through the
   real delivery path in-process (claim, send context, liveness, render, address, provider
   call, batched record with attempt evidence) against a provider that answers instantly;
   then ../shared/anchors/claim_loop.py (a claim → complete loop over a minimal queue table,
   batch 100) over the same number of rows, right after each Herald drain. --repeat such pairs
   of each; prints each Herald / anchor and their median (target >= 0.5).
2. Claim cost by queue depth: for each depth, that many queued email deliveries, then
   --claims of Herald's own claim statement (batch 100, as psycopg prepares it), each followed
   by completing its rows. Prints p50 and mean per claim and the deepest / shallowest ratio
   (target <= 2), and the buffers of one EXPLAIN (ANALYZE, BUFFERS) of the claim at each depth.
3. Worker processes: N queued email deliveries drained by 1 and by 2 `herald worker`
   processes (mock email provider) started before the rows are committed; prints rows/s and the
   scaling factor, with the database's and the workers' CPU time over the drain.
4. Peer: Procrastinate processing as many no-op jobs with one worker (skipped with a note when
   it is not installed, or with --peer-jobs 0).
5. Web Push beside email: --webpush-deliveries queued push deliveries to browser subscriptions,
   drained in-process through the real push channel (Web Push provider: aes128gcm encryption
   for each subscription, a VAPID signature, an HTTP POST) against an instant local push
   service, then as many email deliveries through the instant email provider; deliveries/s of
   each and what the encryption alone costs one message (0: skip).

Uses HERALD_BENCH_DATABASE_URL (a server; the bench creates and drops its own databases), else
the embedded PostgreSQL under .herald/bench. Never part of the test run's pass/fail. Figures on
a machine shared with other work are noisy: compare ratios taken in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cryptography.fernet import Fernet  # noqa: E402
from tests import history  # noqa: E402
from tests.conftest import create_database, drop_database  # noqa: E402

from herald.channels.base import Message, ProviderOutcome  # noqa: E402
from herald.cli.common import fast_loop_factory  # noqa: E402
from herald.config import Settings  # noqa: E402
from herald.db import embedded, migrate  # noqa: E402
from herald.db.engine import libpq_url, make_async_engine  # noqa: E402
from herald.delivery import queries  # noqa: E402
from herald.delivery.worker import drain_channel  # noqa: E402
from herald.kinds.sample import SAMPLE_REGISTRY  # noqa: E402
from herald.runtime.server import freeze_startup_objects  # noqa: E402
from herald.secrets.vault import TableVault  # noqa: E402

TENANT = "bench"
BATCH = 100
ANCHOR = Path(
    os.environ.get("HERALD_ANCHOR_CLAIM_LOOP", ROOT.parent / "shared" / "anchors" / "claim_loop.py")
)
HERALD = Path(sys.executable).with_name("herald")


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


def seed_people(dsn: str, n: int) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO person (tenant_id, external_id, full_name, email) "
            "SELECT %s, 'p' || g, 'Person ' || g, 'p' || g || '@example.com' "
            "FROM generate_series(1, %s) g",
            (TENANT, n),
        )


# --history: months of finished deliveries behind the queue, one partition each, as a year of
# use leaves the tables (retention keeps about seven months at its default of 180 days).
HISTORY: dict[str, int] = {"months": 0, "rows": 0}


def seed_history(conn: psycopg.Connection[Any], months: int, rows: int) -> None:
    """`rows` sent email deliveries (and their recipients and attempts) in each of the `months`
    months before this one, each month a partition of its own as the maintenance tick makes them:
    what a statement that reaches a delivery by id alone probes in every month."""
    history.sent_email(conn, TENANT, history.months_before_this(months), rows, attempts=True)


def seed_queue(dsn: str, n: int, *, tied: bool, people: bool = True, vacuum: bool = True) -> None:
    """Empty the queue, then one event with n recipients and n queued email deliveries,
    server-side (behind --history's months of sent ones). `people`: recipients are the first n
    people (a real send); otherwise recipients with no person (enough for the claim alone, and
    quick at a million)."""
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "TRUNCATE notification_delivery_attempt, notification_delivery, "
            "notification_delivery_queue, notification_recipient, notification_event, "
            "dead_letter CASCADE"
        )
        if HISTORY["months"]:
            seed_history(conn, HISTORY["months"], HISTORY["rows"])
        event_id = conn.execute(
            "INSERT INTO notification_event (tenant_id, kind, category, priority, audience, channels, "
            "variables, dedupe_key, fanout_claimed_at, fanout_claim_token, fanout_completed_at, "
            "recipient_count) VALUES (%s, 'announcement.posted', 'announcement', 'normal', "
            "'{\"kind\": \"all_users\"}', ARRAY['email'], "
            '\'{"title": "Sports day moved", "message": "It is now on Friday."}\', %s, now(), '
            "gen_random_uuid(), now(), %s) RETURNING id",
            (TENANT, uuid.uuid4().hex * 2, n),
        ).fetchone()[0]  # type: ignore[index]
        if people:
            conn.execute(
                "INSERT INTO notification_recipient (tenant_id, event_id, user_id, "
                "user_public_id_snapshot, variables, occurred_at) "
                "SELECT tenant_id, %s, id, public_id, jsonb_build_object('name', full_name), now() "
                "FROM person WHERE tenant_id = %s ORDER BY id LIMIT %s",
                (event_id, TENANT, n),
            )
        else:
            conn.execute(
                "INSERT INTO notification_recipient (tenant_id, event_id, user_public_id_snapshot, "
                "occurred_at) SELECT %s, %s, gen_random_uuid(), now() FROM generate_series(1, %s)",
                (TENANT, event_id, n),
            )
        # Spread: one row per millisecond over the last hour and beyond, as retries and
        # several events interleave; tied: every row due at the same instant (one batch).
        # Either way the rows are written in their recipients' order, as the fan-out writes them
        # (one INSERT … SELECT a page, in person order). Without the ORDER BY, the tied seed's plan
        # read the recipients through their (event, public id) key — random order — so its claims
        # walked the recipients at random and every claim and outcome wrote its entries of
        # recipient_idx and single_target_key at a random leaf page: ~10 µs of PostgreSQL a
        # delivery that a fan-out's queue never pays (docs/scaling.md, the worker).
        # Each with its queue row, as the fan-out writes them (herald.db.queue).
        conn.execute(
            "WITH d AS (INSERT INTO notification_delivery (tenant_id, event_id, recipient_id, "
            "channel, status, queued_at, next_attempt_at, occurred_at) SELECT tenant_id, event_id, "
            "id, 'email', 'queued', now() - interval '2 hours', CASE WHEN %s THEN now() - "
            "interval '1 hour' ELSE now() - interval '2 hours' + (row_number() OVER (ORDER BY id)) "
            "* interval '1 ms' END, occurred_at "
            "FROM notification_recipient WHERE event_id = %s ORDER BY id "
            "RETURNING id, tenant_id, channel, occurred_at, next_attempt_at) "
            "INSERT INTO notification_delivery_queue (delivery_id, tenant_id, channel, "
            "occurred_at, next_attempt_at) SELECT * FROM d ORDER BY next_attempt_at, id",
            (tied, event_id),
        )
    if vacuum:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
            # The seed's WAL (with --history, 600,000 rows and more) otherwise starts checkpoints
            # that go on through the measured drain (logged every 12-14 s, "occurring too
            # frequently"), charging the seed's writes to whichever run they overlap
            # (docs/scaling.md, the worker). pgbench checkpoints before its runs for the same reason.
            conn.execute("CHECKPOINT")


async def herald_path(url: str, n: int) -> float:
    engine = make_async_engine(url, pool_size=2)
    settings = Settings(database_url=url)
    vault = TableVault(engine, Fernet.generate_key())
    provider = InstantProvider()
    started = time.perf_counter()
    # What `herald worker` runs for a channel: its batch loops, draining.
    await drain_channel(
        engine, "email", provider, registry=SAMPLE_REGISTRY, vault=vault, settings=settings
    )
    elapsed = time.perf_counter() - started
    await engine.dispose()
    assert provider.sent == n, provider.sent
    return elapsed


def anchor(dsn: str, n: int, *, tied: bool) -> float:
    """rows/s of the anchor claim loop, run as its own process against the same database."""
    args = [sys.executable, str(ANCHOR), "--dsn", dsn, "--rows", str(n), "--batch", str(BATCH)]
    out = subprocess.run(
        [*args, *(["--ties"] if tied else [])], capture_output=True, text=True, check=True
    ).stdout
    match = re.search(r"= ([\d,]+) rows/s", out)
    assert match, out
    return float(match.group(1).replace(",", ""))


COMPLETE = (
    "WITH done AS (DELETE FROM notification_delivery_queue "
    "WHERE delivery_id = ANY(CAST(:ids AS bigint[])) RETURNING delivery_id) "
    "UPDATE notification_delivery SET status = 'sent', sent_at = now(), attempts = attempts + 1 "
    "WHERE id = ANY(ARRAY(SELECT delivery_id FROM done))"
)


async def claim_costs(url: str, claims: int) -> list[float]:
    """Seconds per claim of Herald's claim statement (batch 100), each batch then completed."""
    from sqlalchemy import text

    engine = make_async_engine(url, pool_size=1)
    seconds: list[float] = []
    try:
        async with engine.connect() as conn:
            for _ in range(claims):
                started = time.perf_counter()
                claimed = await queries.claim_due_deliveries(conn, "email", BATCH, 300)
                await conn.commit()
                seconds.append(time.perf_counter() - started)
                assert len(claimed) == BATCH, len(claimed)
                await conn.execute(text(COMPLETE), {"ids": [c[0] for c in claimed]})
                await conn.commit()
    finally:
        await engine.dispose()
    return seconds


def explain_claim(dsn: str) -> str:
    """Execution time and buffers of one claim under EXPLAIN (ANALYZE, BUFFERS), rolled back."""
    sql = str(queries.SQL["claim_due_deliveries"])
    sql = sql.replace(":lease_seconds", "300").replace(":channel", "'email'")
    sql = sql.replace(":limit", str(BATCH))
    with psycopg.connect(dsn) as conn:
        lines = [r[0] for r in conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}")]
        conn.rollback()
    buffers = next((ln.strip() for ln in lines if "Buffers:" in ln), "")
    total = next((ln.strip() for ln in lines if ln.startswith("Execution Time")), "")
    # A Sort node, not a Merge Append's "Sort Key" (the claim merges each month's due index).
    sorts = "a Sort node" if any(re.search(r"(->  |^)Sort ", ln) for ln in lines) else "no sort"
    return f"{total}; {buffers}; {sorts}"


def _cpu_by_pid(pids: list[int]) -> dict[int, float]:
    import psutil

    seconds: dict[int, float] = {}
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
            seconds[pid] = times.user + times.system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return seconds


def _backends(conn: psycopg.Connection[tuple[int]]) -> list[int]:
    """This database's server processes other than ours (on this machine, the workers')."""
    return [
        r[0]
        for r in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
    ]


def _spent(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


def worker_processes(url: str, dsn: str, n: int, workers: int, log_dir: Path) -> tuple[float, str]:
    """Drain n queued email deliveries with `workers` herald worker processes (mock email)."""
    import psutil  # noqa: F401  (a dev dependency; fails early if absent)

    env = {
        **os.environ,
        "HERALD_DATABASE_URL": url,
        "HERALD_JWT_SECRET": "bench-secret-that-is-long-enough-for-hs256",
        "HERALD_DATA_DIR": str(log_dir),
        "HERALD_EMAIL_PROVIDER": "mock",
        "HERALD_POLL_INTERVAL_SECONDS": "0.2",
        "HERALD_LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "TRUNCATE notification_delivery_attempt, notification_delivery, "
            "notification_delivery_queue, notification_recipient, notification_event, "
            "dead_letter CASCADE"
        )
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for i in range(workers):
            log = (log_dir / f"worker-{workers}-{i}.log").open("wb")
            logs.append(log)
            procs.append(
                subprocess.Popen(
                    [str(HERALD), "worker"],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        time.sleep(8)  # start-up: imports, pools, listeners
        for p in procs:
            assert p.poll() is None, f"a worker exited at start; see {log_dir}"
        pids = [p.pid for p in procs]
        with psycopg.connect(dsn, autocommit=True) as conn:
            cpu_before, pg_before = _cpu_by_pid(pids), _cpu_by_pid(_backends(conn))
            # The workers poll: they start on the rows the moment the seed commits, so the clock
            # starts there (no VACUUM in between, which they would overlap).
            seed_queue(dsn, n, tied=False, vacuum=False)
            started = time.perf_counter()
            conn.execute("SELECT pg_notify(%s, '')", (queries.DELIVERY_CHANNEL,))
            # Whether any row is still queued or being sent: a queue row exists (one probe; a
            # count(*) of the queue every 50 ms read all 50,000 rows, ~5 ms of one of the two
            # cores' time the workers were being measured on).
            while conn.execute(
                "SELECT EXISTS (SELECT 1 FROM notification_delivery_queue WHERE channel = 'email')"
            ).fetchone()[0]:  # type: ignore[index]
                time.sleep(0.05)
            elapsed = time.perf_counter() - started
            worker_cpu = _spent(cpu_before, _cpu_by_pid(pids))
            pg_cpu = _spent(pg_before, _cpu_by_pid(_backends(conn)))
            done = conn.execute(
                "SELECT count(*) FROM notification_delivery WHERE status = 'skipped_unconfigured'"
            ).fetchone()[0]  # type: ignore[index]
        assert done == n, (done, n)
        note = (
            f"workers' CPU {worker_cpu:5.1f} s, their PostgreSQL backends' CPU {pg_cpu:5.1f} s "
            f"over {elapsed:.1f} s wall on {os.cpu_count()} cores"
        )
        return elapsed, note
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in logs:
            log.close()


async def procrastinate_peer(server: str, jobs: int) -> float | None:
    try:
        import procrastinate
    except ImportError:
        return None
    name = f"herald_bench_peer_{uuid.uuid4().hex[:8]}"
    url = create_database(server, name)
    try:
        app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=libpq_url(url)))

        # Typed where procrastinate is installed (make bench), Any where it is not (make lint).
        @app.task(name="noop")  # type: ignore[untyped-decorator,unused-ignore]
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


def _serve_pushes(port: Any, received: Any) -> None:
    """The instant push service's process: aiohttp answering every POST 201."""
    from aiohttp import web

    async def accept(request: web.Request) -> web.Response:
        await request.read()
        with received.get_lock():
            received.value += 1
        return web.Response(status=201)

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/push/{id}", accept)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port.value = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        await asyncio.Event().wait()

    asyncio.run(main())


class InstantPushService:
    """A push service that answers every POST 201 at once, in a process of its own (a thread
    would share the worker's GIL and charge its waits to Herald): what is measured is Herald's
    side of a push, not a push service."""

    def __init__(self) -> None:
        import multiprocessing

        context = multiprocessing.get_context("fork")
        self._port = context.Value("i", 0)
        self._received = context.Value("q", 0)
        self._process = context.Process(
            target=_serve_pushes, args=(self._port, self._received), daemon=True
        )

    @property
    def received(self) -> int:
        return int(self._received.value)

    def start(self) -> str:
        self._process.start()
        deadline = time.monotonic() + 10
        while not self._port.value and time.monotonic() < deadline:
            time.sleep(0.01)
        return f"http://127.0.0.1:{self._port.value}"

    def stop(self) -> None:
        self._process.terminate()
        self._process.join(5)


def seed_webpush_queue(dsn: str, n: int, base_url: str, keys: tuple[str, str]) -> None:
    """Empty the queue, then one event to n people with one browser subscription each and n
    queued push deliveries (one a subscription), each with its queue row."""
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "TRUNCATE notification_delivery_attempt, notification_delivery, "
            "notification_delivery_queue, notification_recipient, notification_event, "
            "notification_push_token, dead_letter CASCADE"
        )
        conn.execute(
            "INSERT INTO notification_push_token (tenant_id, person_id, token, platform, "
            "webpush_p256dh, webpush_auth) SELECT tenant_id, id, %s || '/push/' || id, "
            "'webpush', %s, %s FROM person WHERE tenant_id = %s ORDER BY id LIMIT %s",
            (base_url, keys[0], keys[1], TENANT, n),
        )
        event_id = conn.execute(
            "INSERT INTO notification_event (tenant_id, kind, category, priority, audience, "
            "channels, variables, dedupe_key, fanout_claimed_at, fanout_claim_token, "
            "fanout_completed_at, recipient_count) VALUES (%s, 'announcement.posted', "
            "'announcement', 'normal', '{\"kind\": \"all_users\"}', ARRAY['push'], "
            '\'{"title": "Sports day moved", "message": "It is now on Friday."}\', %s, now(), '
            "gen_random_uuid(), now(), %s) RETURNING id",
            (TENANT, uuid.uuid4().hex * 2, n),
        ).fetchone()[0]  # type: ignore[index]
        conn.execute(
            "INSERT INTO notification_recipient (tenant_id, event_id, user_id, "
            "user_public_id_snapshot, variables, occurred_at) "
            "SELECT tenant_id, %s, id, public_id, jsonb_build_object('name', full_name), now() "
            "FROM person WHERE tenant_id = %s ORDER BY id LIMIT %s",
            (event_id, TENANT, n),
        )
        conn.execute(
            "WITH d AS (INSERT INTO notification_delivery (tenant_id, event_id, recipient_id, "
            "user_id, channel, provider_target_id, status, queued_at, next_attempt_at, "
            "occurred_at) SELECT r.tenant_id, r.event_id, r.id, r.user_id, 'push', t.id, "
            "'queued', now(), now() - interval '1 second', r.occurred_at "
            "FROM notification_recipient r JOIN notification_push_token t "
            "ON t.person_id = r.user_id WHERE r.event_id = %s ORDER BY r.id "
            "RETURNING id, tenant_id, channel, occurred_at, next_attempt_at) "
            "INSERT INTO notification_delivery_queue (delivery_id, tenant_id, channel, "
            "occurred_at, next_attempt_at) SELECT * FROM d ORDER BY next_attempt_at, id",
            (event_id,),
        )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")


async def webpush_path(url: str, n: int, settings: Settings) -> float:
    from herald.channels.fcm import FcmPushProvider
    from herald.channels.push import PushProvider
    from herald.channels.webpush import WebPushProvider

    engine = make_async_engine(url, pool_size=2)
    vault = TableVault(engine, Fernet.generate_key())
    provider = PushProvider(FcmPushProvider(settings), WebPushProvider(settings))
    started = time.perf_counter()
    await drain_channel(
        engine, "push", provider, registry=SAMPLE_REGISTRY, vault=vault, settings=settings
    )
    elapsed = time.perf_counter() - started
    await provider.aclose()
    await engine.dispose()
    return elapsed


async def push_service_ceiling(base: str, posts: int = 2000, width: int = 8) -> float:
    """Posts/s one httpx client gets from the instant push service, `width` at a time (the push
    channel's concurrency): the bound the service and the loopback put on section 5."""
    import httpx

    body = b"x" * 200
    async with httpx.AsyncClient() as client:

        async def one(i: int) -> None:
            await client.post(f"{base}/push/ceiling-{i}", content=body)

        started = time.perf_counter()
        for first in range(0, posts, width):
            await asyncio.gather(*(one(first + k) for k in range(width)))
        return posts / (time.perf_counter() - started)


def encryption_cost(keys: tuple[str, str], messages: int = 2000) -> float:
    """Microseconds of one message's aes128gcm encryption for one subscription (pywebpush)."""
    from pywebpush import WebPusher

    body = json.dumps({"title": "Sports day moved", "body": "It is now on Friday."}).encode()
    pusher = WebPusher(
        {
            "endpoint": "https://push.example/x",
            "keys": dict(zip(("p256dh", "auth"), keys, strict=True)),
        }
    )
    started = time.perf_counter()
    for _ in range(messages):
        pusher.encode(body, "aes128gcm")
    return (time.perf_counter() - started) / messages * 1e6


def webpush_section(url: str, dsn: str, n: int, data_dir: Path) -> None:
    """Section 5: Web Push beside email, in one run."""
    from tests.providers.servers import webpush_subscription

    print(
        f"\n5. {n:,} Web Push deliveries beside {n:,} email deliveries (in-process, instant peers)"
    )
    browser = webpush_subscription("https://push.example/x")
    keys = (browser.p256dh, browser.auth_b64)
    service = InstantPushService()
    base = service.start()
    settings = Settings(
        database_url=url,
        webpush_vapid_subject="mailto:bench@school.example",
        webhook_allow_loopback=True,
        data_dir=data_dir,
        vault_key=Fernet.generate_key().decode(),
    )
    seed_webpush_queue(dsn, n, base, keys)
    with asyncio.Runner(loop_factory=fast_loop_factory()) as runner:
        push_seconds = runner.run(webpush_path(url, n, settings))
    assert service.received == n, (service.received, n)
    seed_queue(dsn, n, tied=False)
    with asyncio.Runner(loop_factory=fast_loop_factory()) as runner:
        email_seconds = runner.run(herald_path(url, n))
    ceiling = asyncio.run(push_service_ceiling(base))
    service.stop()
    push_rate, email_rate = n / push_seconds, n / email_seconds
    print(
        f"   web push {push_rate:8,.0f} deliveries/s   email {email_rate:8,.0f} deliveries/s   "
        f"web push / email = {push_rate / email_rate:.2f}"
    )
    print(
        f"   per delivery: web push {push_seconds / n * 1e6:6.0f} us, email "
        f"{email_seconds / n * 1e6:6.0f} us; the encryption alone {encryption_cost(keys):5.0f} us "
        "a message (one ECDH and an AES-GCM seal per subscription)"
    )
    print(
        f"   the instant push service alone, bare httpx posts 8 at a time: {ceiling:8,.0f} posts/s "
        f"(web push / that = {push_rate / ceiling:.2f}); email's instant provider makes no request"
    )


def _ints(value: str) -> list[int]:
    return [int(v) for v in value.split(",") if v.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--deliveries", type=int, default=50_000)
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="section 1's pairs of Herald and anchor runs, spread and tied (the median is printed)",
    )
    parser.add_argument(
        "--depths", type=_ints, default=[10_000, 1_000_000], help="queue depths, comma-separated"
    )
    parser.add_argument("--claims", type=int, default=50, help="claims timed at each depth")
    parser.add_argument("--workers", type=_ints, default=[1, 2], help="worker process counts")
    parser.add_argument(
        "--process-deliveries", type=int, default=None, help="default: the same as --deliveries"
    )
    parser.add_argument(
        "--peer-jobs",
        type=int,
        default=None,
        help="Procrastinate no-op jobs (default: the same as --deliveries; 0: skip)",
    )
    parser.add_argument(
        "--webpush-deliveries",
        type=int,
        default=10_000,
        help="section 5's Web Push (and email) deliveries (0: skip)",
    )
    parser.add_argument(
        "--history",
        type=int,
        default=0,
        help="months of sent deliveries behind the queue, one partition each (default 0)",
    )
    parser.add_argument(
        "--history-rows", type=int, default=100_000, help="sent deliveries in each --history month"
    )
    args = parser.parse_args()
    HISTORY.update(months=args.history, rows=args.history_rows)
    n = args.deliveries
    process_n = args.process_deliveries or n

    server = os.environ.get("HERALD_BENCH_DATABASE_URL") or embedded.start(
        ROOT / ".herald" / "bench"
    )
    name = f"herald_bench_{uuid.uuid4().hex[:8]}"
    url = create_database(server, name)
    dsn = libpq_url(url)
    log_dir = ROOT / ".herald" / "bench-logs" / name
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        migrate.upgrade(url)
        with psycopg.connect(dsn) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        print(f"PostgreSQL {version}; batch {BATCH}; anchor {ANCHOR}")
        if args.history:
            print(
                f"behind the queue: {args.history} months of {args.history_rows:,} sent "
                "deliveries each, one partition a month"
            )
        seed_people(dsn, max(n, process_n))
        # As `herald worker` does once it has started (its collector settings).
        freeze_startup_objects()

        print(f"\n1. {n:,} queued email deliveries: Herald in-process vs the anchor claim loop")
        ratios: dict[bool, list[float]] = {False: [], True: []}
        for repeat in range(args.repeat):
            # The order alternates, so neither queue is always the one drained first.
            for tied in (False, True) if repeat % 2 == 0 else (True, False):
                seed_queue(dsn, n, tied=tied)
                cpu = time.process_time()
                # On the event loop `herald worker` runs on (uvloop where it is installed).
                with asyncio.Runner(loop_factory=fast_loop_factory()) as runner:
                    herald_rate = n / runner.run(herald_path(url, n))
                herald_cpu = (time.process_time() - cpu) / n * 1e6
                # Each Herald drain beside an anchor run of its own, right after it: on a machine
                # whose speed drifts by a third within minutes, a ratio of neighbours holds where
                # either figure alone does not.
                anchor_rate = anchor(dsn, n, tied=tied)
                ratios[tied].append(herald_rate / anchor_rate)
                label = "tied  " if tied else "spread"
                print(
                    f"   {label} herald {herald_rate:8,.0f} deliveries/s   anchor "
                    f"{anchor_rate:8,.0f} rows/s   herald / anchor = "
                    f"{herald_rate / anchor_rate:.2f} (target >= 0.5)"
                )
                print(
                    f"          Herald's own CPU per delivery (this process): {herald_cpu:5.0f} us"
                )
        if args.repeat > 1:
            for tied in (False, True):
                each = ", ".join(f"{r:.2f}" for r in ratios[tied])
                print(
                    f"   {'tied' if tied else 'spread'}: herald / anchor, median of "
                    f"{args.repeat} = {statistics.median(ratios[tied]):.2f} ({each})"
                )

        print(f"\n2. claim cost by queue depth ({args.claims} claims of {BATCH} at each depth)")
        p50s: dict[tuple[int, bool], float] = {}
        for depth in args.depths:
            for tied in (False, True):
                seed_queue(dsn, depth, tied=tied, people=False)
                plan = explain_claim(dsn)
                costs = asyncio.run(claim_costs(url, args.claims))
                p50 = statistics.median(costs) * 1000
                p50s[(depth, tied)] = p50
                label = "tied  " if tied else "spread"
                print(
                    f"   {depth:>9,} queued {label}: claim p50 {p50:6.2f} ms, mean "
                    f"{statistics.fmean(costs) * 1000:6.2f} ms | one EXPLAIN: {plan}"
                )
        if len(args.depths) > 1:
            lo, hi = min(args.depths), max(args.depths)
            for tied in (False, True):
                print(
                    f"   {'tied' if tied else 'spread'}: claim at {hi:,} / at {lo:,} = "
                    f"{p50s[(hi, tied)] / p50s[(lo, tied)]:.2f} (target <= 2)"
                )

        print(f"\n3. {process_n:,} queued email deliveries drained by `herald worker` processes")
        rates: dict[int, float] = {}
        for workers in args.workers:
            elapsed, note = worker_processes(url, dsn, process_n, workers, log_dir)
            rates[workers] = process_n / elapsed
            print(f"   {workers} worker(s): {rates[workers]:8,.0f} deliveries/s ({note})")
        if 1 in rates and len(rates) > 1:
            most = max(rates)
            print(f"   scaling {most} workers / 1 = {rates[most] / rates[1]:.2f}x")

        peer_jobs = n if args.peer_jobs is None else args.peer_jobs
        if peer_jobs:
            peer_seconds = asyncio.run(procrastinate_peer(server, peer_jobs))
            if peer_seconds is None:
                print("\n4. peer: procrastinate not installed (pip install procrastinate)")
            else:
                print(
                    f"\n4. peer: procrastinate, {peer_jobs:,} no-op jobs: "
                    f"{peer_jobs / peer_seconds:8,.0f} jobs/s"
                )
        if args.webpush_deliveries:
            webpush_section(url, dsn, min(args.webpush_deliveries, n), log_dir)
    finally:
        drop_database(server, name)


if __name__ == "__main__":
    main()
