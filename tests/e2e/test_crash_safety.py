"""SIGKILL a real `herald worker` at random points while thousands of deliveries are in flight.

The worker sends email to a real SMTP server (aiosmtpd) in this process. Each delivery's email
carries a Message-ID derived from the delivery's public id, so the server's log tells exactly how
often each delivery reached the provider.
"""

from __future__ import annotations

import asyncio
import random
import re
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.db.engine import libpq_url
from herald.fanout.worker import fan_out_next_event
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.sending.service import SendInput, asend
from tests import seed
from tests.e2e.harness import HeraldProcess
from tests.providers.servers import SmtpTestServer, smtp_server

PEOPLE = 400
EVENTS = 6  # 2,400 email deliveries + 2,400 in-app rows
KILLS = 6
MESSAGE_ID = re.compile(rb"^Message-ID: <([0-9a-f-]{36})@", re.MULTILINE | re.IGNORECASE)
TERMINAL = {
    "sent",
    "dead",
    "skipped_preference",
    "skipped_no_destination",
    "skipped_unconfigured",
    "skipped_recipient_gone",
    "skipped_no_template",
}


@pytest.fixture
def smtp() -> Any:
    with smtp_server() as server:
        yield server


def delivery_states(database_url: str, tenant: str) -> list[tuple[str, str, int, int]]:
    with psycopg.connect(libpq_url(database_url)) as conn:
        rows = conn.execute(
            "SELECT public_id::text, status, attempts, lease_expiry_count FROM notification_delivery "
            "WHERE tenant_id = %s AND channel = 'email'",
            (tenant,),
        ).fetchall()
    return [(r[0], r[1], r[2], r[3]) for r in rows]


def open_count(database_url: str, tenant: str) -> int:
    with psycopg.connect(libpq_url(database_url)) as conn:
        row = conn.execute(
            "SELECT count(*) FROM notification_delivery WHERE tenant_id = %s "
            "AND status IN ('queued', 'processing', 'failed')",
            (tenant,),
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_sigkill_loses_nothing_and_duplicates_only_the_interrupted(
    engine: AsyncEngine,
    tenant: str,
    database_url: str,
    e2e_env: dict[str, str],
    smtp: SmtpTestServer,
    tmp_path: Path,
) -> None:
    """R-STATE-18, R-REAPER-1, R-REAPER-2, R-PLAT-14, decision 3 (no outbox): a worker killed with
    SIGKILL at random points, again and again, while thousands of deliveries are in flight:
    - every delivery ends in a terminal state; none is lost or left processing;
    - every `sent` delivery reached the SMTP server at least once;
    - a delivery reached the server more than once only if a worker died holding its lease
      (its lease_expiry_count says so) — the at-least-once window between call and record;
    - in-app rows are written once per recipient, by the fan-out, never by a worker."""
    async with engine.begin() as conn:
        for i in range(PEOPLE):
            await seed.person(conn, tenant, f"u{i}", email=f"u{i}@example.com")
        for e in range(EVENTS):
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
    while await fan_out_next_event(engine, SAMPLE_REGISTRY, batch_size=500, tenant_id=tenant):
        pass
    assert open_count(database_url, tenant) == PEOPLE * EVENTS

    env = {
        **e2e_env,
        "HERALD_EMAIL_PROVIDER": "smtp",
        "HERALD_SMTP_HOST": smtp.host,
        "HERALD_SMTP_PORT": str(smtp.port),
        "HERALD_SMTP_STARTTLS": "false",
        "HERALD_EMAIL_FROM": "School <school@example.com>",
        "HERALD_LEASE_SECONDS": "5",  # the smallest lease allowed: reclaims come quickly
        "HERALD_MAX_ATTEMPTS": "10",  # kills may interrupt a delivery several times
        "HERALD_POLL_INTERVAL_SECONDS": "0.1",
    }
    rng = random.Random(20261130)
    kills = 0
    for round_ in range(KILLS):
        worker = HeraldProcess(
            ["worker", "--tenant", tenant], env, tmp_path / f"worker-{round_}.log"
        )
        worker.wait_for_output("worker started")
        await asyncio.sleep(rng.uniform(0.3, 1.5))
        worker.stop(signal.SIGKILL)  # no drain, no release: leases are left to expire
        kills += 1
        if open_count(database_url, tenant) == 0:
            break
    final = HeraldProcess(["worker", "--tenant", tenant], env, tmp_path / "worker-final.log")
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if not open_count(database_url, tenant):
                break
            await asyncio.sleep(0.5)
        assert open_count(database_url, tenant) == 0, final.describe()
    finally:
        assert final.stop() == 0, final.describe()

    states = delivery_states(database_url, tenant)
    assert len(states) == PEOPLE * EVENTS
    assert {status for _, status, _, _ in states} <= TERMINAL
    received = Counter(
        match.decode()
        for message in smtp.handler.received
        for match in MESSAGE_ID.findall(message.content)
    )
    by_id = {
        public_id: (status, attempts, expiries) for public_id, status, attempts, expiries in states
    }
    for public_id, (status, _, expiries) in by_id.items():
        if status == "sent":
            assert received[public_id] >= 1, public_id
        if received[public_id] > 1:
            assert expiries >= 1, (public_id, received[public_id])
    assert set(received) <= set(by_id)  # nothing sent that is not one of these deliveries
    duplicated = sum(1 for n in received.values() if n > 1)
    assert kills >= 1
    print(f"{kills} SIGKILLs; {len(received)} deliveries reached SMTP; {duplicated} more than once")

    with psycopg.connect(libpq_url(database_url)) as conn:
        in_app = conn.execute(
            "SELECT count(*), count(DISTINCT recipient_id) FROM notification_delivery "
            "WHERE tenant_id = %s AND channel = 'in_app'",
            (tenant,),
        ).fetchone()
    assert in_app == (PEOPLE * EVENTS, PEOPLE * EVENTS)
