"""Several nodes of every Herald process on one machine, under load, with one of each killed.

Two `herald api` behind a round-robin proxy (tests/e2e/rrproxy.py, its own process), two
`herald worker`, two `herald scheduler`, on a database of their own, every one of them through a
real PgBouncer in transaction mode (tests/pgbouncer.py) with HERALD_DATABASE_SESSION_URL direct
for what needs a session (LISTEN for the realtime hub and the worker's wake-up, the presence
locks). Where a streaming standby can be built (tests/replica_cluster.py: initdb, pg_basebackup)
and Redis answers (HERALD_TEST_REDIS_URL: the read-your-writes fences of several API processes
live there), the database is a primary of the test's own with that standby as
HERALD_DATABASE_READ_URL, and the standby is SIGKILLed mid-run too; otherwise the test database
alone, and the report says so. Without Debian's pgbouncer the test skips, saying so; CI's second
run requires both (HERALD_TEST_PGBOUNCER, HERALD_TEST_REPLICA). For LOAD_SECONDS the test
sends events (in-app and email, each retried with the same body after a 503 or a cut connection,
as a client should), reads inboxes, marks items read and keeps Server-Sent-Event streams open;
mid-run it SIGKILLs one API process, one worker and the scheduler that holds the reminder lease,
and a reminder comes due after that kill. Email goes to a real SMTP server in this process; each
email's Message-ID names its delivery.

What must hold at the end:
- nothing lost: every accepted send is one event whose recipients each have one in-app row and
  one email delivery, every email delivery is final and `sent`, and the SMTP server received
  every one of them; the reminder that came due after the scheduler's kill reached each of its
  people once;
- no duplicate in-app row: one in-app delivery per (event, person);
- no 5xx but the documented 503 DATABASE_UNAVAILABLE; a cut connection is counted and bounded by
  the requests that were in flight on the killed API process;
- a person who marked an item read never reads it back as unread (read-your-writes);
- every SSE stream's badge (unread ids at its last connect, plus the notifications it was told
  of, minus its own reads) equals the server's unread count at the end.
The figures (answers by status, inbox p50/p99, cut connections, emails sent twice) are printed
and written to test-artifacts/cluster.json.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from herald.auth import service as auth
from herald.config import Settings
from herald.db import migrate
from herald.db.engine import with_database
from herald.delivery.worker import BATCH_LIMIT, loops_of
from tests.conftest import JWT_SECRET, ROOT
from tests.e2e.harness import (
    START_TIMEOUT,
    HeraldProcess,
    free_port,
    herald_env,
    last_line,
    reminder_leader_pid,
    run_cli,
    sql,
)
from tests.pgbouncer import require_pgbouncer, run_pgbouncer
from tests.providers.servers import SmtpRecordingHandler, smtp_server
from tests.replica_cluster import ReplicaCluster, herald_cluster
from tests.replica_cluster import missing_reason as standby_missing

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(
        os.environ.get("HERALD_TEST_CLUSTER") == "off", reason="HERALD_TEST_CLUSTER=off"
    ),
]

LOAD_SECONDS = float(os.environ.get("HERALD_TEST_CLUSTER_SECONDS", "60"))
PEOPLE = 40
STREAMS = 4  # people with a live stream open, who also mark items read
READERS = 8  # people whose inbox is read in a loop
SENDERS = 2
AUDIENCE = 4  # people per send
SETTLE_TIMEOUT = 240.0
MESSAGE_ID = re.compile(rb"^Message-ID: <([0-9a-f-]{36})@", re.MULTILINE | re.IGNORECASE)
ARTIFACTS = ROOT / "test-artifacts"
LEASE_SECONDS = 2  # the scheduler's reminder lease


@dataclass
class Figures:
    """What the clients saw, by kind of request."""

    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    cut: Counter[str] = field(default_factory=Counter)  # connections reset by a killed process
    inbox_ms: list[float] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)  # answers that break a rule
    stale_reads: list[str] = field(default_factory=list)  # read-your-writes violations

    def answer(self, what: str, response: httpx.Response) -> None:
        self.statuses[(what, response.status_code)] += 1
        if response.status_code >= 500:
            try:
                code = response.json()["error"]["code"]
            except (ValueError, KeyError, TypeError):
                code = None
            ok = (
                response.status_code == 503
                and bool(response.headers.get("retry-after"))
                and code == "DATABASE_UNAVAILABLE"
            )
            if not ok:
                self.wrong.append(f"{what}: {response.status_code} {response.text[:200]}")


@dataclass
class Sent:
    key: str
    people: tuple[str, ...]
    event_id: str


class Load:
    def __init__(self, base_url: str, tokens: dict[str, str], people: list[str]) -> None:
        self.base_url = base_url
        self.tokens = tokens
        self.people = people
        self.figures = Figures()
        self.sent: list[Sent] = []
        self.stop = asyncio.Event()  # senders, readers and markers stop
        self.streams_stop = asyncio.Event()  # the streams close (after everything settled)
        self.badges: dict[str, set[str]] = {}  # stream person -> unread recipient ids it knows
        self.read: dict[str, set[str]] = {}  # stream person -> ids it marked read

    def _headers(self, person: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[person]}"}

    async def sender(self, http: httpx.AsyncClient, key: str, number: int) -> None:
        rng = random.Random(number)
        while not self.stop.is_set():
            people = tuple(sorted(rng.sample(self.people, AUDIENCE)))
            message = f"cluster {uuid.uuid4().hex}"
            body = {
                "kind": "announcement.posted",
                "audience": {"kind": "users", "userIds": list(people)},
                "channels": ["in_app", "email"],
                "variables": {"title": "Cluster drill", "message": message},
            }
            # The same body again after a 503 or a cut connection: the kind collapses on it, so
            # a retry of a send that did land is the same event, not a second one.
            deadline = time.monotonic() + START_TIMEOUT
            while True:
                assert time.monotonic() < deadline, "a send was never accepted"
                try:
                    response = await http.post(
                        "/v1/events", json=body, headers={"Authorization": f"Bearer {key}"}
                    )
                except httpx.TransportError:
                    self.figures.cut["send"] += 1
                    await asyncio.sleep(0.2)
                    continue
                self.figures.answer("send", response)
                if response.status_code in (200, 201, 202):
                    self.sent.append(Sent(message, people, response.json()["id"]))
                    break
                if response.status_code != 503:
                    self.figures.wrong.append(f"send: {response.status_code} {response.text}")
                    break
                await asyncio.sleep(0.2)
            await asyncio.sleep(0.3)

    async def reader(self, http: httpx.AsyncClient, number: int) -> None:
        rng = random.Random(1000 + number)
        readers = self.people[STREAMS : STREAMS + READERS]
        while not self.stop.is_set():
            person = rng.choice(readers)
            started = time.perf_counter()
            try:
                response = await http.get("/v1/me/notifications", headers=self._headers(person))
            except httpx.TransportError:
                self.figures.cut["inbox"] += 1
                await asyncio.sleep(0.2)
                continue
            if response.status_code == 200:
                self.figures.inbox_ms.append((time.perf_counter() - started) * 1000)
            self.figures.answer("inbox", response)
            await asyncio.sleep(0.05)

    async def unread_ids(self, http: httpx.AsyncClient, person: str) -> set[str]:
        """Every unread item of the person's inbox, all pages."""
        ids: set[str] = set()
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"unreadOnly": "true", "limit": 100}
            if cursor:
                params["cursor"] = cursor
            response = await http.get(
                "/v1/me/notifications", params=params, headers=self._headers(person)
            )
            self.figures.answer("inbox", response)
            response.raise_for_status()
            page = response.json()
            ids.update(str(item["id"]) for item in page["items"])
            cursor = page.get("nextCursor")
            if not cursor:
                return ids

    async def stream(self, person: str) -> None:
        """An SSE stream that reconnects (as EventSource does) and marks items read now and then.

        At each (re)connect, once the stream is subscribed, the badge is reset to the inbox's
        unread ids; each `notification` event adds its recipient id; each read removes one."""
        rng = random.Random(person)
        self.read[person] = set()
        while not self.streams_stop.is_set():
            try:
                async with (
                    httpx.AsyncClient(base_url=self.base_url, timeout=None) as http,
                    http.stream(
                        "GET", "/v1/me/notifications/stream", headers=self._headers(person)
                    ) as response,
                ):
                    if response.status_code != 200:
                        self.figures.answer("stream", response)
                        await asyncio.sleep(0.5)
                        continue
                    self.figures.statuses[("stream", 200)] += 1
                    lines = response.aiter_lines()
                    async for line in lines:
                        if line.startswith(":") and "subscribed" in line:
                            break
                    self.badges[person] = await self.unread_ids(http, person)
                    marker = asyncio.create_task(self._mark_reads(http, person, rng))
                    try:
                        async for line in lines:
                            if line.startswith("data:"):
                                notified = str(json.loads(line[5:])["recipientId"])
                                # An event still on its way for an item this client has read
                                # meanwhile (seen first in the unread list) changes nothing.
                                if notified not in self.read[person]:
                                    self.badges[person].add(notified)
                    finally:
                        marker.cancel()
                        await asyncio.gather(marker, return_exceptions=True)
            except (httpx.TransportError, httpx.HTTPStatusError):
                self.figures.cut["stream"] += 1
                await asyncio.sleep(0.5)

    async def _mark_reads(self, http: httpx.AsyncClient, person: str, rng: random.Random) -> None:
        """Mark one unread item read every second, then read the inbox back at once: the item
        must come back read (read-your-writes)."""
        while not self.stop.is_set():
            await asyncio.sleep(1.0)
            unread = sorted(self.badges.get(person, ()))
            if not unread:
                continue
            item = rng.choice(unread)
            try:
                marked = await http.post(
                    f"/v1/me/notifications/{item}/read", headers=self._headers(person)
                )
                self.figures.answer("mark-read", marked)
                if marked.status_code != 200:
                    continue
                self.badges[person].discard(item)
                self.read[person].add(item)
                back = await http.get(
                    "/v1/me/notifications",
                    params={"unreadOnly": "true", "limit": 100},
                    headers=self._headers(person),
                )
                self.figures.answer("inbox", back)
                if back.status_code == 200 and item in {str(i["id"]) for i in back.json()["items"]}:
                    self.figures.stale_reads.append(f"{person}: {item}")
            except httpx.TransportError:
                self.figures.cut["mark-read"] += 1


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2) if ordered else 0.0


async def test_several_nodes_under_load_lose_nothing_when_one_of_each_is_killed(
    database_url: str, settings: Settings, tmp_path: Path
) -> None:
    require_pgbouncer()
    redis_url = os.environ.get("HERALD_TEST_REDIS_URL")
    why_not = standby_missing() or (None if redis_url else "HERALD_TEST_REDIS_URL is not set")
    if why_not and os.environ.get("HERALD_TEST_REPLICA") == "required":
        pytest.fail(f"HERALD_TEST_REPLICA=required, but {why_not}")
    if why_not is None:
        with herald_cluster() as standby:
            url = standby.primary_url("herald")
            with run_pgbouncer(url, pool_mode="transaction", pool_size=8) as bouncer:
                await _run_cluster(
                    url, bouncer.url_for(url), settings, tmp_path, standby, redis_url
                )
        return
    print(f"cluster test without a read standby: {why_not}")
    name = f"herald_cluster_{uuid.uuid4().hex[:8]}"
    sql(database_url, f'CREATE DATABASE "{name}"')
    url = with_database(database_url, name)
    try:
        await asyncio.to_thread(migrate.upgrade, url)
        with run_pgbouncer(url, pool_mode="transaction", pool_size=8) as bouncer:
            await _run_cluster(url, bouncer.url_for(url), settings, tmp_path)
    finally:
        sql(database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _kill_postgres(standby: ReplicaCluster) -> None:
    """SIGKILL the standby's postmaster (its backends exit when they notice)."""
    pid = int((standby.root / "standby" / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)


async def _run_cluster(
    url: str,
    pooled_url: str,
    settings: Settings,
    tmp_path: Path,
    standby: ReplicaCluster | None = None,
    redis_url: str | None = None,
) -> None:
    """`url` reaches PostgreSQL itself, `pooled_url` the same database through PgBouncer;
    `standby`, when given, serves the inbox's reads (with `redis_url` for the fences)."""
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    handler = SmtpRecordingHandler(data_delay_seconds=0.01)
    with smtp_server(handler=handler) as smtp:
        env = herald_env(
            HERALD_DATABASE_URL=pooled_url,
            HERALD_DATABASE_SESSION_URL=url,
            HERALD_JWT_SECRET=JWT_SECRET,
            HERALD_DATA_DIR=str(tmp_path / "herald-data"),
            HERALD_POLL_INTERVAL_SECONDS="0.2",
            HERALD_EMAIL_PROVIDER="smtp",
            HERALD_SMTP_HOST=smtp.host,
            HERALD_SMTP_PORT=str(smtp.port),
            HERALD_SMTP_STARTTLS="false",
            HERALD_EMAIL_FROM="School <school@example.com>",
            HERALD_LEASE_SECONDS="5",
            HERALD_MAX_ATTEMPTS="10",
            HERALD_FEATURE_REMINDERS="true",
            HERALD_SCHEDULER_LEASE_SECONDS=str(LEASE_SECONDS),
            HERALD_SCHEDULER_TICK_SECONDS="0.2",
            HERALD_DB_POOL_SIZE="4",
            HERALD_DATABASE_READ_URL=standby.standby_url("herald") if standby else None,
            HERALD_REDIS_URL=redis_url if standby else None,
        )
        created = run_cli(["keys", "create", "--tenant", tenant, "--scopes", "*"], env)
        assert created.returncode == 0, created.stderr
        key = last_line(created.stdout)
        api_ports = [free_port(), free_port()]
        proxy_port = free_port()
        base_url = f"http://127.0.0.1:{proxy_port}"
        processes: dict[str, HeraldProcess] = {}
        for i, port in enumerate(api_ports):
            processes[f"api-{i}"] = HeraldProcess(
                ["api", "--host", "127.0.0.1", "--port", str(port)], env, tmp_path / f"api-{i}.log"
            )
        for i in range(2):
            processes[f"worker-{i}"] = HeraldProcess(["worker"], env, tmp_path / f"worker-{i}.log")
            processes[f"scheduler-{i}"] = HeraldProcess(
                ["scheduler"], env, tmp_path / f"scheduler-{i}.log"
            )
        proxy = HeraldProcess(
            [
                "-m",
                "tests.e2e.rrproxy",
                "--listen",
                str(proxy_port),
                *(arg for port in api_ports for arg in ("--backend", f"127.0.0.1:{port}")),
            ],
            {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            tmp_path / "proxy.log",
            executable=sys.executable,
        )
        try:
            for i, port in enumerate(api_ports):
                await asyncio.to_thread(
                    processes[f"api-{i}"].wait_until_healthy, f"http://127.0.0.1:{port}"
                )
            await asyncio.to_thread(proxy.wait_for_output, "listening on")
            for i in range(2):
                await asyncio.to_thread(processes[f"worker-{i}"].wait_for_output, "worker started")
                await asyncio.to_thread(
                    processes[f"scheduler-{i}"].wait_for_output, "scheduler started"
                )
            people = [f"p{i:03d}" for i in range(PEOPLE)]
            headers = {"Authorization": f"Bearer {key}"}
            async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as http:
                for person in people:
                    put = await http.put(
                        f"/v1/people/{person}",
                        json={"fullName": person, "email": f"{person}@example.com"},
                    )
                    assert put.status_code in (200, 201), put.text
                reminder = await http.post(
                    "/v1/admin/reminders",
                    json={
                        "name": "Cluster reminder",
                        "kind": "reminder.notice",
                        "variables": {"title": "Drill", "message": "After the kill."},
                        "channels": ["in_app"],
                        "audience": {"kind": "users", "userIds": people[:STREAMS]},
                        "timezone": "UTC",
                        "localTime": "03:00",
                        "weekdays": [1, 2, 3, 4, 5, 6, 7],
                    },
                )
                assert reminder.status_code == 201, reminder.text
                reminder_id = reminder.json()["id"]
            tokens = {p: auth.sign_token(settings, tenant_id=tenant, subject=p) for p in people}

            load = Load(base_url, tokens, people)
            async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
                tasks = [
                    *(asyncio.create_task(load.sender(http, key, n)) for n in range(SENDERS)),
                    *(asyncio.create_task(load.reader(http, n)) for n in range(4)),
                    *(asyncio.create_task(load.stream(p)) for p in people[:STREAMS]),
                ]
                started = time.monotonic()

                async def at(fraction: float) -> None:
                    await asyncio.sleep(
                        max(0.0, started + fraction * LOAD_SECONDS - time.monotonic())
                    )

                await at(0.3)
                processes["api-0"].proc.send_signal(signal.SIGKILL)
                await at(0.4)
                processes["worker-0"].proc.send_signal(signal.SIGKILL)
                await at(0.5)
                leader_pid = await asyncio.to_thread(reminder_leader_pid, url)
                leader = next(
                    n
                    for n, p in processes.items()
                    if n.startswith("scheduler") and p.proc.pid == leader_pid
                )
                processes[leader].proc.send_signal(signal.SIGKILL)
                # A reminder occurrence comes due after the leader's death: the survivor fires it.
                sql(
                    url,
                    "UPDATE reminder_schedule SET next_run_at = %s WHERE public_id = %s",
                    datetime.now(UTC).replace(microsecond=0),
                    reminder_id,
                )
                if standby is not None:
                    await at(0.6)
                    # Reads go on from the primary: no 5xx, no stale read.
                    _kill_postgres(standby)
                await at(1.0)
                load.stop.set()
                streams = tasks[SENDERS + 4 :]
                await asyncio.gather(*tasks[: SENDERS + 4])

                # Everything settles: every event fanned out, every delivery final.
                await _settle(url, tenant, processes["worker-1"])
                # The last notifications' stream events are a NOTIFY away: a moment for them,
                # then the streams close.
                await asyncio.sleep(2.0)
                load.streams_stop.set()
                for task in streams:
                    task.cancel()
                await asyncio.gather(*streams, return_exceptions=True)

            async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
                server_unread = {}
                for person in people[:STREAMS]:
                    server_unread[person] = await load.unread_ids(http, person)
            survivors = {n: p for n, p in processes.items() if p.proc.poll() is None}
            for n in ("api-1", "worker-1"):
                assert n in survivors, processes[n].describe()
        finally:
            proxy.stop()
            exits = {n: p.stop() for n, p in processes.items()}
        _judge(url, tenant, load, handler, server_unread, exits, people, standby is not None)


async def _settle(url: str, tenant: str, worker: HeraldProcess) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while True:
        [(open_,)] = sql(
            url,
            "SELECT count(*) FROM notification_delivery WHERE tenant_id = %s "
            "AND status IN ('queued', 'processing', 'failed')",
            tenant,
        )
        [(unfanned,)] = sql(
            url,
            "SELECT count(*) FROM notification_event WHERE tenant_id = %s "
            "AND fanout_completed_at IS NULL",
            tenant,
        )
        if open_ == 0 and unfanned == 0:
            return
        assert time.monotonic() < deadline, (
            f"{open_} deliveries open, {unfanned} events not fanned out\n" + worker.describe()
        )
        await asyncio.sleep(0.5)


def _judge(
    url: str,
    tenant: str,
    load: Load,
    handler: SmtpRecordingHandler,
    server_unread: dict[str, set[str]],
    exits: dict[str, int],
    people: list[str],
    with_standby: bool,
) -> None:
    # -- what the database says --------------------------------------------------------
    figures = load.figures
    assert load.sent, "no send was accepted"
    events = {
        str(public_id): (kind, count)
        for public_id, kind, count in sql(
            url,
            "SELECT e.public_id, e.kind, count(r.id) FROM notification_event e "
            "LEFT JOIN notification_recipient r ON r.event_id = e.id "
            "WHERE e.tenant_id = %s GROUP BY e.public_id, e.kind",
            tenant,
        )
    }
    sent_ids = {s.event_id for s in load.sent}
    assert len(sent_ids) == len(load.sent), "two accepted sends became one event"
    for s in load.sent:
        assert events[s.event_id] == ("announcement.posted", AUDIENCE), s
    reminders = [e for e, (kind, _) in events.items() if kind == "reminder.notice"]
    assert len(reminders) == 1, reminders
    assert events[reminders[0]][1] == STREAMS
    deliveries = sql(
        url,
        "SELECT d.channel, d.status, d.public_id::text, p.external_id, e.public_id::text "
        "FROM notification_delivery d JOIN notification_event e ON e.id = d.event_id "
        "JOIN person p ON p.id = d.user_id WHERE d.tenant_id = %s",
        tenant,
    )
    in_app = Counter((event, person) for ch, _, _, person, event in deliveries if ch == "in_app")
    doubled = {k: n for k, n in in_app.items() if n > 1}
    assert not doubled, doubled
    expected = {(s.event_id, p) for s in load.sent for p in s.people}
    assert expected <= set(in_app), expected - set(in_app)
    email = {pid: status for ch, status, pid, _, _ in deliveries if ch == "email"}
    assert len(email) == len(expected)
    assert set(email.values()) == {"sent"}, Counter(email.values())
    received = Counter(
        m.decode() for message in handler.received for m in MESSAGE_ID.findall(message.content)
    )
    assert set(received) == set(email), "an email delivery never reached SMTP"
    # An email reached SMTP twice only when the killed worker held it: its lease was reclaimed,
    # and never more of them than one worker holds at once (the provider window).
    reclaimed = {
        pid
        for pid, expiries in sql(
            url,
            "SELECT public_id::text, lease_expiry_count FROM notification_delivery "
            "WHERE tenant_id = %s AND channel = 'email'",
            tenant,
        )
        if expiries
    }
    twice = {pid for pid, n in received.items() if n > 1}
    assert twice <= reclaimed, twice - reclaimed
    assert len(twice) <= loops_of("email") * BATCH_LIMIT["email"], len(twice)

    report = {
        "load_seconds": LOAD_SECONDS,
        "read_standby": "killed mid-run" if with_standby else "none",
        "sends_accepted": len(load.sent),
        "answers": {
            f"{what} {status}": n for (what, status), n in sorted(figures.statuses.items())
        },
        "connections_cut": dict(figures.cut),
        "inbox_reads": len(figures.inbox_ms),
        "inbox_p50_ms": _percentile(figures.inbox_ms, 0.50),
        "inbox_p99_ms": _percentile(figures.inbox_ms, 0.99),
        "read_your_writes_violations": len(figures.stale_reads),
        "emails_sent_twice_or_more": sum(1 for n in received.values() if n > 1),
        "exits": exits,
    }
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "cluster.json").write_text(json.dumps(report, indent=2) + "\n")
    print("cluster under load:", json.dumps(report))

    assert not figures.wrong, figures.wrong[:5]
    assert not figures.stale_reads, figures.stale_reads[:5]
    # A cut connection is a request in flight on the API process that was killed: at most
    # one per client task (and one per stream), never a stream of them.
    assert sum(figures.cut.values()) <= SENDERS + 4 + 2 * STREAMS, figures.cut
    for person in people[:STREAMS]:
        assert load.badges[person] == server_unread[person], person
    for n in ("api-1", "worker-1"):
        assert exits[n] == 0, n
