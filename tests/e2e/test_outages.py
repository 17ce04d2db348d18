"""Chaos against real processes: the database cut off under `herald api` and `herald worker`, and a
worker SIGKILLed in the middle of a fan-out.

The database outage is a TCP proxy that drops every connection and refuses new ones for six
seconds — what clients see when PostgreSQL is stopped — while deliveries are in flight to a real
SMTP server and a client keeps reading an inbox.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.auth.service import sign_token
from herald.config import Settings
from herald.db.engine import libpq_url
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.sending.service import SendInput, asend
from tests import seed
from tests.conftest import JWT_SECRET
from tests.e2e.harness import HeraldProcess, free_port
from tests.faults import proxy_for
from tests.providers.servers import SmtpTestServer, smtp_server

MESSAGE_ID = re.compile(rb"^Message-ID: <([0-9a-f-]{36})@", re.MULTILINE | re.IGNORECASE)
OPEN = ("queued", "processing", "failed")


@pytest.fixture
def smtp() -> Any:
    with smtp_server() as server:
        yield server


async def until(condition: Callable[[], bool], *, within: float) -> None:
    """Poll `condition` until it holds or `within` seconds pass (the asserts after say which)."""
    deadline = time.monotonic() + within
    while not condition() and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)


def count(database_url: str, sql: str, *params: object) -> int:
    with psycopg.connect(libpq_url(database_url)) as conn:
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_six_second_database_outage_answers_503s_loses_nothing_and_logs_little(
    engine: AsyncEngine,
    tenant: str,
    database_url: str,
    e2e_env: dict[str, str],
    smtp: SmtpTestServer,
    tmp_path: Path,
) -> None:
    """Issue 18 (1, 3), R-OPS-5, R-STATE-18: PostgreSQL unreachable for six seconds under a real API
    and worker with 600 emails in flight: every API answer is 200 or a 503 in Herald's envelope
    with Retry-After (never a 500); every delivery ends final and every address got its email;
    no in-app row is doubled; the worker's log for the outage is a handful of lines and the API's
    and worker's logs hold no traceback; both recover without a restart."""
    people = 300
    async with engine.begin() as conn:
        for i in range(people):
            await seed.person(conn, tenant, f"u{i}", email=f"u{i}@example.com")
        for e in range(2):
            await asend(
                conn,
                SendInput(
                    tenant_id=tenant,
                    kind="announcement.posted",
                    audience={"kind": "all_users"},
                    channels=["in_app", "email"],
                    variables={"title": f"Notice {e}", "message": "Please read."},
                ),
                registry=SAMPLE_REGISTRY,
            )
    token = sign_token(Settings(jwt_secret=JWT_SECRET), tenant_id=tenant, subject="u1")
    with proxy_for(database_url) as proxy:
        env = {
            **e2e_env,
            "HERALD_DATABASE_URL": proxy.url_for(database_url),
            "HERALD_EMAIL_PROVIDER": "smtp",
            "HERALD_SMTP_HOST": smtp.host,
            "HERALD_SMTP_PORT": str(smtp.port),
            "HERALD_SMTP_STARTTLS": "false",
            "HERALD_EMAIL_FROM": "School <school@example.com>",
            "HERALD_POLL_INTERVAL_SECONDS": "0.05",  # a busy poller: the worst case for log storms
            "HERALD_LEASE_SECONDS": "30",
        }
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        api = HeraldProcess(
            ["api", "--host", "127.0.0.1", "--port", str(port)], env, tmp_path / "api.log"
        )
        worker = HeraldProcess(["worker", "--tenant", tenant], env, tmp_path / "worker.log")
        statuses: Counter[int] = Counter()
        bad: list[str] = []
        try:
            api.wait_until_healthy(base)
            worker.wait_for_output("worker started")
            # Let the fan-out and the first sends start, then cut the database off mid-flight.
            await until(lambda: count(database_url, _SENT, tenant) > 0, within=60)
            proxy.cut()
            lines_before = len(worker.output().splitlines())
            async with httpx.AsyncClient(base_url=base, timeout=10) as http:
                cut_at = time.monotonic()
                while time.monotonic() - cut_at < 6:
                    for path in ("/v1/me/notifications", "/readyz"):
                        answer = await http.get(path, headers={"Authorization": f"Bearer {token}"})
                        statuses[answer.status_code] += 1
                        if answer.status_code == 503:
                            body = answer.json()
                            if body["error"]["code"] != "DATABASE_UNAVAILABLE" or (
                                "Retry-After" not in answer.headers
                            ):
                                bad.append(answer.text)
                        elif answer.status_code != 200:
                            bad.append(f"{answer.status_code} {answer.text[:200]}")
                    await asyncio.sleep(0.1)
                proxy.restore()
                # One line per finished send (its outcome, issue 14) is the record of a
                # delivery, not outage noise: the storm this guards against is per attempt.
                outage_lines = [
                    line
                    for line in worker.output().splitlines()[lines_before:]
                    if '"outcome": ' not in line
                ]
                await until(lambda: count(database_url, _OPEN, tenant) == 0, within=120)
                recovered = await http.get(
                    "/v1/me/notifications", headers={"Authorization": f"Bearer {token}"}
                )
        finally:
            api_exit, worker_exit = api.stop(), worker.stop()
    assert bad == [], bad[:5]
    assert statuses[503] > 0, statuses
    assert recovered.status_code == 200, recovered.text
    assert count(database_url, _OPEN, tenant) == 0, worker.describe()
    assert count(database_url, _SENT, tenant) == 2 * people
    received = Counter(
        match.decode()
        for message in smtp.handler.received
        for match in MESSAGE_ID.findall(message.content)
    )
    assert len(received) == 2 * people  # every delivery reached the server
    assert count(database_url, _IN_APP, tenant) == 2 * people  # one row each, never doubled
    assert len(outage_lines) <= 8, outage_lines
    assert "Traceback" not in worker.output(), worker.describe()
    assert "Traceback" not in api.output(), api.describe()
    assert (api_exit, worker_exit) == (0, 0)
    duplicated = sum(1 for n in received.values() if n > 1)
    print(f"outage: {dict(statuses)} answers; {duplicated} duplicate email(s); worker said:")
    print("\n".join(outage_lines))


_SENT = (
    "SELECT count(*) FROM notification_delivery WHERE tenant_id = %s AND channel = 'email' "
    "AND status = 'sent'"
)
_OPEN = f"SELECT count(*) FROM notification_delivery WHERE tenant_id = %s AND status IN {OPEN!r}"
_IN_APP = (
    "SELECT count(DISTINCT recipient_id) FROM notification_delivery "
    "WHERE tenant_id = %s AND channel = 'in_app'"
)


async def test_a_fan_out_whose_worker_is_killed_resumes_at_once(
    engine: AsyncEngine,
    tenant: str,
    database_url: str,
    e2e_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """Issue 18 (4), R-REAPER-7, R-FANOUT-15: a worker SIGKILLed in the middle of a fan-out does not
    hold the event for ten leases (ten minutes here): its presence lock ended with its session,
    so a second worker releases the claim at its next poll and resumes from the cursor — every
    person gets exactly one inbox row."""
    people = 2000
    async with engine.begin() as conn:
        for i in range(people):
            await seed.person(conn, tenant, f"u{i}")
        await asend(
            conn,
            SendInput(
                tenant_id=tenant,
                kind="announcement.posted",
                audience={"kind": "all_users"},
                channels=["in_app"],
                variables={"title": "Notice", "message": "Please read."},
            ),
            registry=SAMPLE_REGISTRY,
        )
    env = {
        **e2e_env,
        "HERALD_FANOUT_BATCH_SIZE": "10",  # a slow fan-out, so the kill lands in its middle
        "HERALD_LEASE_SECONDS": "60",  # ten leases: the old rule would wait ten minutes
        "HERALD_POLL_INTERVAL_SECONDS": "0.2",
    }
    first = HeraldProcess(["worker", "--tenant", tenant], env, tmp_path / "first.log")
    try:
        await until(lambda: count(database_url, _CURSOR, tenant) > 0, within=60)
        first.stop(signal.SIGKILL)
    finally:
        first.kill()
    progress_at_kill = count(database_url, _RECIPIENTS, tenant)
    assert 0 < progress_at_kill < people, "the kill must land in the middle of the fan-out"
    killed_at = time.monotonic()
    second = HeraldProcess(["worker", "--tenant", tenant], env, tmp_path / "second.log")
    try:
        await until(lambda: count(database_url, _DONE, tenant) > 0, within=120)
        resumed_after = time.monotonic() - killed_at
    finally:
        assert second.stop() == 0, second.describe()
    assert count(database_url, _DONE, tenant) == 1, second.describe()
    assert count(database_url, _RECIPIENTS, tenant) == people
    assert count(database_url, _IN_APP_ROWS, tenant) == people  # never doubled
    assert "whose worker is gone" in second.output(), second.describe()
    print(f"killed at {progress_at_kill}/{people}; completed {resumed_after:.1f} s after the kill")


_CURSOR = "SELECT count(*) FROM notification_event WHERE tenant_id = %s AND fanout_cursor > 0"
_RECIPIENTS = "SELECT count(*) FROM notification_recipient WHERE tenant_id = %s"
_DONE = (
    "SELECT count(*) FROM notification_event WHERE tenant_id = %s "
    "AND fanout_completed_at IS NOT NULL"
)
_IN_APP_ROWS = (
    "SELECT count(*) FROM notification_delivery WHERE tenant_id = %s AND channel = 'in_app'"
)
