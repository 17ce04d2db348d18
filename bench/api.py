"""The API's own cost on the inbox: a real `herald api` process, real HTTP, `/healthz` beside it.

    .venv/bin/python bench/api.py [--requests 400] [--concurrency 16] [--seconds 5]
    .venv/bin/python bench/api.py --large [--people 200000] [--rows 5100000] [--heavy 20]
        [--heavy-rows 5000] [--months 6] [--keep | --reuse NAME]
    .venv/bin/python bench/api.py --profile [--requests 300]
    .venv/bin/python bench/api.py [--large …] --spy 15   (py-spy of the API under list load)
    … [--person-limit 1000/second] [--redis-url redis://127.0.0.1:6379/0] [--log-level INFO]
    … [--processes 2]   (API processes; how many the machine needs for a rate)

Uses --database-url or HERALD_BENCH_DATABASE_URL (the bench creates and drops its own database on
that server), else the embedded PostgreSQL under .herald/bench.

Default (small) mode: the demo school's directory (herald.demo.school) with `--demo-rows` in-app
notifications for each of its people, generated server-side. Measured through HTTP against one
`herald api` subprocess, in one run:
  - single client, p50/p99: GET /healthz (the baseline: the server, the HTTP stack and the
    client with no database and no authentication), the inbox list and the unread count;
  - requests/s for the list (and /healthz) at `--concurrency` clients.

--large: `--people` people of one tenant, `--heavy` of them staff-like with `--heavy-rows` each,
the rest sharing what is left of `--rows` delivered in-app rows, 30 % read; everything generated
with INSERT … SELECT generate_series (no row leaves Python). Measures at `--concurrency` clients
(p50/p99 and requests/s): the first page, a deep cursor page (`--deep` pages in), the unread count
and mark-read, each for the heavy people, and prints EXPLAIN (ANALYZE, BUFFERS) of the SQL each
of them runs, as herald_app under the tenant. `--keep` leaves the seeded database in place (its
name is printed) and `--reuse NAME` measures it again without seeding (a 10,000,000-row inbox
takes ~14 minutes to build); mark-read's rows are made unread again after each run, so every run
starts from the same inbox.

Each measured line says where a request's CPU went over the run: the API process(es), every
PostgreSQL process on the machine, and this load client (user + system time, per request).

--profile: no subprocess; the app in this process under pyinstrument (if installed), driving
list and unread-count requests through the ASGI interface, and the number of SQL statements
and transactions each request makes (a SQLAlchemy event listener on the engine).

The load client is a minimal asyncio HTTP/1.1 keep-alive client (one connection per client), so
the client side costs little next to the server on a small machine. Never part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import history  # noqa: E402
from tests.e2e.harness import free_port  # noqa: E402

from bench import _harness  # noqa: E402
from herald.auth.service import sign_token  # noqa: E402
from herald.config import Settings  # noqa: E402
from herald.db import migrate, partitions  # noqa: E402
from herald.db.engine import libpq_url  # noqa: E402

BENCH_TENANT = "bench"
INBOX = "/v1/me/notifications"


# --- seeding, all server-side -----------------------------------------------------------------


def seed_inbox(
    conn: psycopg.Connection[Any],
    tenant: str,
    *,
    per_person: int,
    heavy: Sequence[str],
    heavy_rows: int,
    read_share: float = 0.3,
    spacing_minutes: float = 1.0,
) -> int:
    """Events 1..max(per_person, heavy_rows), `spacing_minutes` apart; every live person of `tenant`
    gets the newest `per_person` of them, the `heavy` people (external ids) `heavy_rows`; one
    delivered in-app delivery per recipient, `read_share` of them read. Returns the row count."""
    events = max(per_person, heavy_rows)
    conn.execute(
        "CREATE TEMP TABLE bench_event (n int PRIMARY KEY, id bigint, occurred_at timestamptz) "
        "ON COMMIT DROP"
    )
    conn.execute(
        "WITH e AS (INSERT INTO notification_event (tenant_id, kind, category, priority, audience,"
        " channels, dedupe_key, occurred_at, fanout_claimed_at, fanout_claim_token,"
        " fanout_completed_at, recipient_count, variables)"
        " SELECT %(tenant)s, 'announcement.posted', 'announcement', 'normal',"
        " '{\"kind\": \"all_users\"}', ARRAY['in_app'], md5(g::text) || md5('x' || g),"
        " now() - g * %(spacing)s * interval '1 minute', now(), gen_random_uuid(), now(), 0,"
        " jsonb_build_object('n', g)"
        " FROM generate_series(1, %(events)s) g RETURNING id, occurred_at, (variables->>'n')::int"
        " AS n) INSERT INTO bench_event SELECT n, id, occurred_at FROM e",
        {"tenant": tenant, "events": events, "spacing": spacing_minutes},
    )
    conn.execute(
        "INSERT INTO notification_recipient (tenant_id, event_id, user_id,"
        " user_public_id_snapshot, occurred_at, read_at)"
        " SELECT %(tenant)s, e.id, p.id, p.public_id, e.occurred_at,"
        " CASE WHEN random() < %(read)s THEN e.occurred_at + interval '1 hour' END"
        " FROM person p"
        " CROSS JOIN LATERAL generate_series(1, CASE WHEN p.external_id = ANY(%(heavy)s)"
        "  THEN %(heavy_rows)s ELSE %(per_person)s END) g"
        " JOIN bench_event e ON e.n = g"
        " WHERE p.tenant_id = %(tenant)s AND p.deleted_at IS NULL",
        {
            "tenant": tenant,
            "read": read_share,
            "heavy": list(heavy),
            "heavy_rows": heavy_rows,
            "per_person": per_person,
        },
    )
    inserted = conn.execute(
        "INSERT INTO notification_delivery (tenant_id, recipient_id, event_id, channel, status,"
        " delivered_at, rendered_title, rendered_body, occurred_at)"
        " SELECT r.tenant_id, r.id, r.event_id, 'in_app', 'delivered', r.occurred_at,"
        " 'Sports day moved', 'Sports day is now on Friday; bring a water bottle.', r.occurred_at"
        " FROM notification_recipient r WHERE r.tenant_id = %(tenant)s",
        {"tenant": tenant},
    ).rowcount
    return inserted


def seed_large(conn: psycopg.Connection[Any], args: argparse.Namespace) -> tuple[int, list[str]]:
    """--large's inbox: `--people` people of BENCH_TENANT, the `--heavy` first of them with
    `--heavy-rows` rows each, the rest sharing what is left of `--rows`. Returns the row count
    and the heavy people's external ids (the ones the measurements use)."""
    _harness.seed_people(conn, BENCH_TENANT, args.people)
    heavy = [f"p{n}" for n in range(1, args.heavy + 1)]
    rest = max(args.rows - args.heavy * args.heavy_rows, 0)
    # Rounded up, so the inbox holds at least --rows rows.
    per_person = max(-(-rest // max(args.people - args.heavy, 1)), 1)
    spacing = 1.0
    if args.months:
        # The events spread over the last --months months, each month a partition of its own (as
        # the maintenance tick would have made them): the inbox as a year of use leaves it.
        events = max(per_person, args.heavy_rows)
        spacing = args.months * 30 * 24 * 60 / events
        first = partitions.Month.of(datetime.now(UTC) - timedelta(days=args.months * 30 + 1))
        months = partitions.months_from(first, args.months + 2)
        history.create_months(conn, months)
    rows = seed_inbox(
        conn,
        BENCH_TENANT,
        per_person=per_person,
        heavy=heavy,
        heavy_rows=args.heavy_rows,
        spacing_minutes=spacing,
    )
    return rows, heavy


def vacuum(url: str) -> None:
    """VACUUM ANALYZE what the bench loaded, then CHECKPOINT: the load (5,000,000 rows and more
    in --large) and the vacuum leave gigabytes of dirty buffers and WAL, and without the
    checkpoint PostgreSQL writes them out during the measured runs (its checkpointer, every
    checkpoint_timeout), which is the bench's own load and not the service's."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")


# --- the API process ------------------------------------------------------------------------


# The per-person limit stays on, as it is deployed, so its cost is in every figure; but a bench is
# many requests from few people, so it is set high enough never to refuse one (the default,
# 20/second, would make 429s the figure).
PERSON_LIMIT = "1000/second"


def start_api(
    url: str,
    jwt_secret: str,
    port: int,
    log_path: Path,
    pool_size: int | None = None,
    *,
    person_limit: str = PERSON_LIMIT,
    redis_url: str | None = None,
    log_level: str = "INFO",
) -> subprocess.Popen[bytes]:
    """`herald api` on `port`; with `redis_url`, its rate limits count in Redis (one round trip
    a limited request), else in the process's memory. At the default log level (INFO) the API
    writes its line a request (JSON, redacted) to the log file, as deployed; about 50 µs of CPU a
    request on this machine."""
    environment = {"HERALD_RATE_LIMIT_PER_PERSON": person_limit, "HERALD_LOG_LEVEL": log_level}
    if pool_size is not None:
        environment["HERALD_DB_POOL_SIZE"] = str(pool_size)
    if redis_url:
        environment["HERALD_REDIS_URL"] = redis_url
    return _harness.start_api(url, jwt_secret, port, log_path, environment)


# --- the load client ------------------------------------------------------------------------


class Connection:
    """One keep-alive HTTP/1.1 connection: just enough protocol for Herald's JSON answers."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def request(self, method: str, path: str, token: str | None) -> tuple[int, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Length: 0\r\n"
        if token is not None:
            head += f"Authorization: Bearer {token}\r\n"
        self.writer.write((head + "\r\n").encode())
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        body = await self.reader.readexactly(length)
        return status, body

    def close(self) -> None:
        self.writer.close()


# A request: (method, path, token), chosen afresh for each call (n is the call's number).
Pick = Callable[[int], tuple[str, str, str | None]]


@dataclass
class Figures:
    latencies_ms: list[float]
    seconds: float
    # CPU seconds the API process spent over the run (user + system): per request, the figure
    # that least depends on what else the machine is doing.
    server_cpu: float = 0.0
    # CPU seconds of every PostgreSQL process on this machine (backends and background) and of
    # this load client over the same run: with the API's, where a request's core-time goes.
    database_cpu: float = 0.0
    client_cpu: float = 0.0

    @property
    def rate(self) -> float:
        return len(self.latencies_ms) / self.seconds

    def pct(self, p: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]

    def line(self, name: str) -> str:
        n = len(self.latencies_ms)
        cpu, database, client = (
            seconds * 1000 / n for seconds in (self.server_cpu, self.database_cpu, self.client_cpu)
        )
        return (
            f"{name:30} p50 {self.pct(50):7.2f} ms  p99 {self.pct(99):7.2f} ms  "
            f"{self.rate:6.0f} req/s  CPU ms/req: API {cpu:4.2f}, PostgreSQL {database:4.2f}, "
            f"client {client:4.2f}  ({n} req)"
        )


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def postgres_cpu_by_pid() -> dict[int, float]:
    """User + system CPU of every process named postgres that is running now, by pid (a backend
    that exits mid-run takes its share with it: the benches' connections stay open across a run;
    one that starts mid-run counts from zero once its pid is missing from the earlier reading)."""
    seconds: dict[int, float] = {}
    for proc in psutil.process_iter(["name", "cpu_times"]):
        if proc.info["name"] == "postgres" and proc.info["cpu_times"] is not None:
            seconds[proc.pid] = proc.info["cpu_times"].user + proc.info["cpu_times"].system
    return seconds


def postgres_cpu_seconds() -> float:
    return sum(postgres_cpu_by_pid().values())


async def drive(
    port: int | Sequence[int], pick: Pick, *, clients: int, requests: int, warmup: int = 0
) -> Figures:
    """`requests` requests spread over `clients` connections, each waiting for its answer, after
    `warmup` requests the same way that are not measured.

    The warm-up is what a long-running service is past: the API's pool opening a connection per
    client (a fork and a login on PostgreSQL's side), psycopg preparing each statement on each
    connection after its fifth execution (before that, PostgreSQL plans it every time), and the
    process's own caches. Without it the first second of a run held every request above p99
    (docs/performance.md, measuring it), so p99 measured the start-up and not the service.

    Given several ports (one API process each, `--processes`), the clients take them in turn,
    and the API CPU is the sum over every process in SERVER_PID."""
    ports = [port] if isinstance(port, int) else list(port)
    conns = [await Connection.open(ports[n % len(ports)]) for n in range(clients)]
    # Warm every connection (and the server's caches for these paths) first.
    for n, conn in enumerate(conns):
        await conn.request(*pick(n))
    latencies: list[float] = []

    async def client(conn: Connection, numbers: Iterator[int], record: bool) -> None:
        for n in numbers:
            method, path, token = pick(n)
            started = time.perf_counter()
            status, body = await conn.request(method, path, token)
            if record:
                latencies.append((time.perf_counter() - started) * 1000)
            if status >= 300:
                raise RuntimeError(f"{method} {path}: {status} {body[:300]!r}")

    if warmup:
        first = iter(range(warmup))
        await asyncio.gather(*(client(conn, first, False) for conn in conns))
    measured = iter(range(warmup, warmup + requests))
    cpu_before = sum(cpu_seconds(pid) for pid in SERVER_PID)
    database_before, client_before = postgres_cpu_seconds(), time.process_time()
    started = time.perf_counter()
    await asyncio.gather(*(client(conn, measured, True) for conn in conns))
    seconds = time.perf_counter() - started
    client_cpu = time.process_time() - client_before
    cpu = sum(cpu_seconds(pid) for pid in SERVER_PID) - cpu_before
    database_cpu = postgres_cpu_seconds() - database_before
    for conn in conns:
        conn.close()
    return Figures(latencies, seconds, cpu, database_cpu, client_cpu)


# The API process being measured (set once it is started).
SERVER_PID: list[int] = []


# --- the runs ---------------------------------------------------------------------------------


def tokens_for(settings: Settings, tenant: str, subjects: Sequence[str]) -> list[str]:
    return [sign_token(settings, tenant_id=tenant, subject=s) for s in subjects]


async def deep_cursors(port: int, tokens: Sequence[str], pages: int) -> list[str]:
    """The cursor `pages` pages into each token's inbox."""
    conn = await Connection.open(port)
    cursors = []
    for token in tokens:
        cursor: str | None = None
        for _ in range(pages):
            path = INBOX if cursor is None else f"{INBOX}?cursor={cursor}"
            _, body = await conn.request("GET", path, token)
            cursor = json.loads(body)["nextCursor"]
            if cursor is None:
                break
        cursors.append(cursor or "")
    conn.close()
    return cursors


# Frames whose inclusive share of the API process's on-CPU samples --spy reports.
SPY_FRAMES = {
    "HTTP server (uvicorn, h11/httptools)": ("uvicorn/protocols",),
    "middleware: observability": ("ObservabilityMiddleware.__call__",),
    "  of which metrics (prometheus_client)": ("prometheus_client/",),
    "  of which the request log line": ("Logger.log (logging",),
    "FastAPI's route handler and dependencies": ("get_request_handler",),
    "JWT decode": ("PyJWT.decode", "decode_complete"),
    # The fast route (herald.centre.fast) answers plain requests; FastAPI's endpoint the rest.
    "endpoint": ("_list (herald/centre/fast.py", "list_notifications (herald/centre/routes.py"),
    "transaction (db.engine.driver_transaction)": ("driver_transaction",),
    "  pool checkout (and its ping)": ("AsyncEngine.raw_connection",),
    "  pool return": ("_ConnectionFairy.close", "_ConnectionFairy._checkin"),
    "  COMMIT": ("AsyncConnection.commit (psycopg",),
    "liveness + tenant entry statement": ("live_actor",),
    "list statement (execute + fetch)": ("list_page (herald/centre/queries.py",),
    "service: list + cursor + page JSON": ("list_notifications (herald/centre/service.py",),
    "page JSON (joined by page_json)": ("page_json",),
    "psycopg, all of its Python": ("psycopg/",),
    "  of which waiting for PostgreSQL": ("wait_async",),
}


async def spy(port: int, tokens: list[str], args: argparse.Namespace) -> None:
    """py-spy's on-CPU samples of the API process while the list runs at concurrency: the share
    of each SPY_FRAMES entry (inclusive), and the heaviest functions by their own samples."""
    raw = Path(tempfile.gettempdir()) / f"herald-bench-spy-{uuid.uuid4().hex[:6]}.txt"
    # py-spy of this environment (`make bench` installs it), else one on PATH.
    beside = Path(sys.executable).with_name("py-spy")
    spy_proc = await asyncio.create_subprocess_exec(
        str(beside) if beside.exists() else "py-spy",
        "record",
        "--format",
        "raw",
        "--rate",
        "500",
        "--duration",
        str(int(args.spy)),
        "--pid",
        str(SERVER_PID[0]),
        "--output",
        str(raw),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )

    def listing(n: int) -> tuple[str, str, str | None]:
        return ("GET", INBOX, tokens[n % len(tokens)])

    deadline = time.monotonic() + args.spy
    while time.monotonic() < deadline:
        await drive(port, listing, clients=args.concurrency, requests=400)
    _, error = await spy_proc.communicate()
    if not raw.exists():
        raise RuntimeError(f"py-spy recorded nothing: {error.decode()[-500:]}")
    stacks = [line.rsplit(" ", 1) for line in raw.read_text().splitlines() if line.strip()]
    total = sum(int(count) for _, count in stacks) or 1
    print(f"py-spy, GET list at {args.concurrency} clients: {total} on-CPU samples of the API")
    for name, needles in SPY_FRAMES.items():
        hits = sum(int(c) for stack, c in stacks if any(n in stack for n in needles))
        print(f"  {name:42} {100 * hits / total:5.1f} %")
    own: dict[str, int] = {}
    for stack, count in stacks:
        leaf = stack.split(";")[-1]
        own[leaf] = own.get(leaf, 0) + int(count)
    print("  heaviest functions by own samples:")
    for leaf, samples in sorted(own.items(), key=lambda kv: -kv[1])[:15]:
        print(f"    {100 * samples / total:5.1f} %  {leaf[:110]}")


async def small_run(ports: list[int], tokens: list[str], args: argparse.Namespace) -> None:
    def healthz(n: int) -> tuple[str, str, str | None]:
        return ("GET", "/healthz", None)

    def listing(n: int) -> tuple[str, str, str | None]:
        return ("GET", INBOX, tokens[n % len(tokens)])

    def unread(n: int) -> tuple[str, str, str | None]:
        return ("GET", f"{INBOX}/unread-count", tokens[n % len(tokens)])

    print(f"single client, {args.requests} requests each (after {args.warmup} not measured):")
    for name, pick in (("GET /healthz", healthz), ("GET list", listing), ("GET unread", unread)):
        figures = await drive(ports[0], pick, clients=1, requests=args.requests, warmup=args.warmup)
        print("  " + figures.line(name))
    print(
        f"{args.concurrency} concurrent clients, {args.requests * 4} requests each "
        f"(after {args.warmup} not measured):"
    )
    for name, pick in (("GET /healthz", healthz), ("GET list", listing), ("GET unread", unread)):
        figures = await drive(
            ports, pick, clients=args.concurrency, requests=args.requests * 4, warmup=args.warmup
        )
        print("  " + figures.line(name))


def unread_again(url: str, public_ids: list[str]) -> None:
    """The notifications mark-read was given made unread again, so that a database kept for
    `--reuse` starts every run from the same inbox (each run marks up to 5,000 read: without
    this, runs on a kept database find fewer and fewer unread rows to mark, and cheaper unread
    counts)."""
    with psycopg.connect(libpq_url(url)) as conn:
        conn.execute(
            "UPDATE notification_recipient SET read_at = NULL WHERE public_id = ANY(%s::uuid[])",
            (public_ids,),
        )
        conn.commit()


async def large_run(ports: list[int], tokens: list[str], args: argparse.Namespace, url: str) -> str:
    """The heavy people's inbox at concurrency; returns the first person's deep cursor."""
    port = ports[0]
    cursors = await deep_cursors(port, tokens, args.deep)

    def healthz(n: int) -> tuple[str, str, str | None]:
        return ("GET", "/healthz", None)

    def listing(n: int) -> tuple[str, str, str | None]:
        return ("GET", INBOX, tokens[n % len(tokens)])

    def deep(n: int) -> tuple[str, str, str | None]:
        i = n % len(tokens)
        return ("GET", f"{INBOX}?cursor={cursors[i]}", tokens[i])

    def unread(n: int) -> tuple[str, str, str | None]:
        return ("GET", f"{INBOX}/unread-count", tokens[n % len(tokens)])

    # Unread items to mark: enough for the warm-up and the measured requests, taken from every
    # heavy person in turn, a page of 100 at a time.
    owners: dict[str, str] = {}
    wanted = args.warmup + args.requests + args.concurrency
    conn = await Connection.open(port)
    pages: dict[str, str] = {token: "" for token in tokens}
    while len(owners) < wanted and pages:
        for token, cursor in list(pages.items()):
            query = f"?unreadOnly=true&limit=100{'&cursor=' + cursor if cursor else ''}"
            _, body = await conn.request("GET", INBOX + query, token)
            page = json.loads(body)
            for item in page["items"]:
                owners[item["id"]] = token
            if page["nextCursor"] is None:
                del pages[token]
            else:
                pages[token] = page["nextCursor"]
    conn.close()
    mark_order = iter(list(owners))

    def mark(n: int) -> tuple[str, str, str | None]:
        notification = next(mark_order)
        return ("POST", f"{INBOX}/{notification}/read", owners[notification])

    runs: list[tuple[str, Pick, int]] = [
        ("GET /healthz", healthz, args.requests),
        ("GET list (first page)", listing, args.requests),
        (f"GET list ({args.deep} pages deep)", deep, args.requests),
        ("GET unread count", unread, args.requests),
        (
            "POST mark-read",
            mark,
            min(args.requests, len(owners) - args.concurrency - args.warmup),
        ),
    ]
    print(
        f"{args.concurrency} concurrent clients, heavy people ({len(tokens)}), "
        f"each run after {args.warmup} requests not measured:"
    )
    try:
        for name, pick, count in runs:
            figures = await drive(
                ports, pick, clients=args.concurrency, requests=count, warmup=args.warmup
            )
            print("  " + figures.line(name))
    finally:
        await asyncio.to_thread(unread_again, url, list(owners))
    return cursors[0]


def explain_large(url: str, tenant: str, subject: str, cursor: str) -> None:
    """EXPLAIN (ANALYZE, BUFFERS) of the centre's statements for one heavy person, as the API runs
    them: herald_app under the tenant, the SQL herald.centre.queries builds, compiled by the
    psycopg dialect (so constants and parameters are exactly what the API sends)."""
    from herald.auth.service import Actor
    from herald.centre import queries, service
    from herald.db import tenancy

    with psycopg.connect(libpq_url(url)) as conn:
        person_id, public_id = conn.execute(
            "SELECT p.id, (SELECT r.public_id FROM notification_recipient r WHERE r.user_id = p.id"
            " AND r.read_at IS NULL ORDER BY r.occurred_at LIMIT 1)"
            " FROM person p WHERE tenant_id = %s AND external_id = %s",
            (tenant, subject),
        ).fetchone() or (0, None)
        actor = Actor(
            tenant_id=tenant,
            external_id=subject,
            person_id=person_id,
            role_code=None,
            role_id=None,
            role_scope_kind=None,
            holds_role=False,
        )
        params = queries.actor_params(actor)
        page = params | {"limit": 21}
        after_at, after_id = service.decode_cursor(cursor)
        statements = {
            "list (first page)": (queries._list_page(False, False), page),
            "list (deep page)": (
                queries._list_page(True, False),
                page | {"after_at": after_at, "after_id": after_id},
            ),
            "unread count": (queries._unread_count(), params),
            "mark-read": (queries._mark_read(), params | {"public_id": public_id}),
        }
        for name, (compiled, values) in statements.items():
            conn.execute(
                "SELECT set_config('role', 'herald_app', true), "
                "set_config('herald.tenant_id', %s, true)",
                (tenant,),
            )
            for setting, value in tenancy.INBOX_PLANNER_SETTINGS:
                conn.execute("SELECT set_config(%s, %s, true)", (setting, value))
            rows = conn.execute(
                f"EXPLAIN (ANALYZE, BUFFERS) {compiled.sql}", compiled.defaults | values
            ).fetchall()
            print(f"--- {name}")
            for (line,) in rows:
                print("    " + line)
            conn.rollback()


# --- the profile ------------------------------------------------------------------------------


async def profile_run(url: str, settings: Settings, tokens: list[str], requests: int) -> None:
    from httpx import ASGITransport, AsyncClient
    from sqlalchemy import event

    from herald.api.app import create_app
    from herald.db.engine import make_async_engine
    from herald.kinds.sample import SAMPLE_REGISTRY

    engine = make_async_engine(url, pool_size=4)
    app = create_app(settings, engine, SAMPLE_REGISTRY)
    counts = {"statements": 0, "begins": 0, "commits": 0, "rollbacks": 0}

    def on_statement(*_: object) -> None:
        counts["statements"] += 1

    def counter(name: str) -> Callable[..., None]:
        def on_event(*_: object) -> None:
            counts[name] += 1

        return on_event

    # libpq's protocol trace of every pooled connection: each Sync (extended protocol) or Query
    # (simple protocol) the client sends is one round trip to the server.
    trace = tempfile.NamedTemporaryFile("w+", prefix="herald-bench-trace-", suffix=".log")  # noqa: SIM115

    def on_connect(dbapi_connection: Any, _: object) -> None:
        from psycopg.pq import Trace

        pgconn = dbapi_connection.driver_connection.pgconn
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)

    def round_trips_since(offset: int) -> tuple[int, list[str]]:
        trace.flush()
        with open(trace.name) as text:
            text.seek(offset)
            sent = [line.split("\t")[2].split()[0] for line in text if line.split("\t")[0] == "F"]
        return sum(1 for m in sent if m in ("Sync", "Query")), sent

    event.listen(engine.sync_engine, "connect", on_connect)
    event.listen(engine.sync_engine, "before_cursor_execute", on_statement)
    event.listen(engine.sync_engine, "begin", counter("begins"))
    event.listen(engine.sync_engine, "commit", counter("commits"))
    event.listen(engine.sync_engine, "rollback", counter("rollbacks"))
    try:
        from pyinstrument import Profiler
    except ImportError:  # pragma: no cover - the profile is optional
        Profiler = None
    async with (
        app.router.lifespan_context(app),
        AsyncClient(transport=ASGITransport(app=app), base_url="http://bench") as http,
    ):
        for path in (INBOX, f"{INBOX}/unread-count"):
            headers = {"Authorization": f"Bearer {tokens[0]}"}
            await http.get(path, headers=headers)  # warm
            for key in counts:
                counts[key] = 0
            trace.flush()
            offset = trace.seek(0, os.SEEK_END)
            await http.get(path, headers=headers)
            trips, sent = round_trips_since(offset)
            print(
                f"GET {path}: {counts['statements']} SQL statements through SQLAlchemy, "
                f"{counts['begins']} transactions; {trips} round trips to PostgreSQL "
                f"(client messages: {' '.join(sent)})"
            )
            if Profiler is None:
                continue
            profiler = Profiler(interval=0.0002, async_mode="enabled")
            profiler.start()
            for n in range(requests):
                headers = {"Authorization": f"Bearer {tokens[n % len(tokens)]}"}
                await http.get(path, headers=headers)
            profiler.stop()
            print(profiler.output_text(unicode=False, color=False, show_all=False))
            flat = profiler.output_text(flat=True, show_all=True).splitlines()
            print("\n".join(["heaviest functions by their own time:", *flat[:45]]))
    await engine.dispose()


# --- main ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", default=os.environ.get("HERALD_BENCH_DATABASE_URL"))
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument(
        "--warmup",
        type=int,
        default=2000,
        help="requests before each measured run, not measured (see drive)",
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--demo-rows", type=int, default=30, help="in-app rows per demo person")
    parser.add_argument("--large", action="store_true")
    parser.add_argument("--people", type=int, default=200_000)
    parser.add_argument("--rows", type=int, default=5_100_000)
    parser.add_argument("--heavy", type=int, default=20)
    parser.add_argument("--heavy-rows", type=int, default=5_000)
    parser.add_argument("--deep", type=int, default=50, help="pages in, for the deep page")
    parser.add_argument(
        "--months",
        type=int,
        default=0,
        help="--large: spread the events over this many months, one partition each",
    )
    parser.add_argument(
        "--pool-size", type=int, help="HERALD_DB_POOL_SIZE of the API (default: its default)"
    )
    add_limit_arguments(parser)
    parser.add_argument(
        "--processes", type=int, default=1, help="API processes (the clients take them in turn)"
    )
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the bench's database in place afterwards (its name is printed), to study it",
    )
    parser.add_argument(
        "--spy", type=float, default=0, help="seconds of py-spy on the API under list load"
    )
    parser.add_argument(
        "--reuse",
        metavar="NAME",
        help="--large: measure the database a run with --keep left (same --people, --heavy and "
        "--heavy-rows), without seeding it again; it is kept afterwards",
    )
    args = parser.parse_args()
    if args.reuse:
        if not args.large:
            parser.error("--reuse needs --large")
        args.keep = True

    bench = _harness.BenchDatabase.create(args.database_url, "herald_bench", reuse=args.reuse)
    name, url, secret, settings = bench.name, bench.url, bench.secret, bench.settings
    procs: list[subprocess.Popen[bytes]] = []
    try:
        migrate.upgrade(url)
        started = time.perf_counter()
        demo = demo_directory(url) if not args.large else ("", [])
        with psycopg.connect(libpq_url(url)) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
            if args.reuse:
                tenant = BENCH_TENANT
                subjects = [f"p{n}" for n in range(1, args.heavy + 1)]
                rows = conn.execute(
                    "SELECT count(*) FROM notification_delivery WHERE channel = 'in_app'"
                ).fetchone()[0]  # type: ignore[index]
            elif args.large:
                tenant = BENCH_TENANT
                rows, subjects = seed_large(conn, args)
            else:
                tenant, subjects = demo
                rows = seed_inbox(
                    conn, tenant, per_person=args.demo_rows, heavy=(), heavy_rows=args.demo_rows
                )
            conn.commit()
        if not args.reuse:
            vacuum(url)
        print(
            f"PostgreSQL {version}; tenant {tenant!r}: {rows:,} in-app delivery rows for "
            f"{len(subjects) if not args.large else args.people:,} people "
            f"(seeded in {time.perf_counter() - started:.1f} s)"
        )
        tokens = tokens_for(settings, tenant, subjects)
        if args.profile:
            asyncio.run(profile_run(url, settings, tokens, args.requests))
            return
        ports = [free_port() for _ in range(args.processes)]
        for n, port in enumerate(ports):
            procs.append(
                start_api(
                    url,
                    secret,
                    port,
                    Path(tempfile.gettempdir()) / f"{name}-api-{n}.log",
                    args.pool_size,
                    person_limit=args.person_limit,
                    redis_url=args.redis_url,
                    log_level=args.log_level,
                )
            )
            SERVER_PID.append(procs[-1].pid)
        if args.processes > 1:
            print(f"{args.processes} API processes; the clients take them in turn")
        if args.spy:
            asyncio.run(spy(ports[0], tokens, args))
        elif args.large:
            cursor = asyncio.run(large_run(ports, tokens, args, url))
            explain_large(url, tenant, subjects[0], cursor)
        else:
            asyncio.run(small_run(ports, tokens, args))
        print(f"(machine load average {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores)")
    finally:
        for proc in procs:
            _harness.stop_process(proc)
        if args.keep:
            print(f"kept database {name!r}")
        else:
            bench.drop()


def add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--person-limit",
        default=PERSON_LIMIT,
        help="the API's HERALD_RATE_LIMIT_PER_PERSON ('off' leaves the limiter out)",
    )
    parser.add_argument(
        "--redis-url", default=None, help="the API's HERALD_REDIS_URL (limits counted in Redis)"
    )
    parser.add_argument(
        "--log-level", default="INFO", help="the API's HERALD_LOG_LEVEL (INFO: a line a request)"
    )


def demo_directory(url: str) -> tuple[str, list[str]]:
    """Load the demo school's directory (as `herald demo load` does); its tenant and people."""
    from herald.db.engine import make_async_engine
    from herald.demo import loader
    from herald.demo.school import SCHOOL

    async def load() -> None:
        engine = make_async_engine(url, pool_size=1)
        async with engine.begin() as conn:
            await loader.load_school(conn, SCHOOL)
        await engine.dispose()

    asyncio.run(load())
    return SCHOOL.tenant_id, [person.external_id for person in SCHOOL.people]


if __name__ == "__main__":
    main()
