"""SIGKILL a real `herald worker` in the middle of one large fan-out; a new worker finishes it.

Sized by HERALD_TEST_FANOUT_PEOPLE (default 20,000, what CI affords); the issue's run is
HERALD_TEST_FANOUT_PEOPLE=1000000. People are seeded with COPY, the event is recorded through
send(), and everything after that is the real processes' doing.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.db.engine import libpq_url
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.sending.service import SendInput, asend
from tests.e2e.harness import HeraldProcess

PEOPLE = int(os.environ.get("HERALD_TEST_FANOUT_PEOPLE", "20000"))
# At least fifty pages, so the kill lands mid-event; at most 5,000 people a page.
BATCH = min(max(PEOPLE // 50, 100), 5000)


def seed_people(database_url: str, tenant: str, people: int) -> None:
    with psycopg.connect(libpq_url(database_url)) as conn:
        with conn.cursor().copy(
            "COPY person (tenant_id, external_id, full_name, email, locale) FROM STDIN"
        ) as copy:
            for i in range(people):
                locale = "ne" if i % 5 == 0 else "en"
                copy.write_row((tenant, f"p{i}", f"Person {i}", f"p{i}@example.com", locale))
        conn.execute("ANALYZE person")


def event_row(database_url: str, tenant: str) -> dict[str, Any]:
    with psycopg.connect(libpq_url(database_url)) as conn:
        cur = conn.execute(
            "SELECT id, fanout_cursor, fanout_completed_at, fanout_attempts, recipient_count "
            "FROM notification_event WHERE tenant_id = %s",
            (tenant,),
        )
        row = cur.fetchone()
        assert row is not None
        return dict(zip([c.name for c in cur.description or ()], row, strict=True))


def one(conn: psycopg.Connection[Any], sql: str, *args: Any) -> Any:
    row = conn.execute(sql, args).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return row[0] if len(row) == 1 else tuple(row)


async def test_fanout_killed_mid_event_resumes_and_writes_everyone_once(
    engine: AsyncEngine,
    tenant: str,
    database_url: str,
    e2e_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """R-FANOUT-5, R-FANOUT-7, R-FANOUT-10, R-FANOUT-15: a worker SIGKILLed between pages of a
    large fan-out leaves the event claimed at its cursor; the next worker releases the dead
    holder's claim, resumes from the cursor, and the event ends with exactly one recipient row
    per person and exactly one in_app (delivered, rendered) and one email delivery each."""
    seed_people(database_url, tenant, PEOPLE)
    async with engine.begin() as conn:
        await asend(
            conn,
            SendInput(
                tenant_id=tenant,
                kind="announcement.posted",
                audience={"kind": "all_users"},
                channels=["in_app", "email"],
                variables={"title": "Sports day moved", "message": "It is now on Friday."},
            ),
            registry=SAMPLE_REGISTRY,
        )
    env = {
        **e2e_env,
        "HERALD_EMAIL_PROVIDER": "mock",
        "HERALD_FANOUT_BATCH_SIZE": str(BATCH),
        "HERALD_POLL_INTERVAL_SECONDS": "0.1",
    }
    first = HeraldProcess(["worker", "--tenant", tenant], env, tmp_path / "worker-1.log")
    try:
        deadline = time.monotonic() + 120
        while event_row(database_url, tenant)["fanout_cursor"] == 0:
            assert time.monotonic() < deadline, first.describe()
            await asyncio.sleep(0.02)
    finally:
        first.stop(signal.SIGKILL)  # mid-event: no drain, no release of the claim
    killed = event_row(database_url, tenant)
    assert killed["fanout_completed_at"] is None, "the fan-out finished before the kill"
    assert killed["fanout_cursor"] > 0

    second = HeraldProcess(["worker", "--tenant", tenant], env, tmp_path / "worker-2.log")
    try:
        deadline = time.monotonic() + 180 + PEOPLE / 1000
        while event_row(database_url, tenant)["fanout_completed_at"] is None:
            assert time.monotonic() < deadline, second.describe()
            await asyncio.sleep(0.2)
        resumed = second.output()
    finally:
        assert second.stop() == 0, second.describe()
    assert "resuming them from their cursor" in resumed, resumed[-2000:]

    done = event_row(database_url, tenant)
    assert done["recipient_count"] == PEOPLE and done["fanout_attempts"] == 2
    with psycopg.connect(libpq_url(database_url)) as conn:
        event_id = done["id"]
        assert one(
            conn,
            "SELECT count(*), count(DISTINCT user_id) FROM notification_recipient "
            "WHERE event_id = %s",
            event_id,
        ) == (PEOPLE, PEOPLE)
        assert (
            one(
                conn,
                "SELECT count(*) FROM person p WHERE p.tenant_id = %s AND NOT EXISTS "
                "(SELECT 1 FROM notification_recipient r WHERE r.event_id = %s AND r.user_id = p.id)",
                tenant,
                event_id,
            )
            == 0
        )
        # Every recipient: exactly one in_app and one email delivery.
        assert (
            one(
                conn,
                "SELECT count(*) FROM (SELECT r.id FROM notification_recipient r "
                "LEFT JOIN notification_delivery d ON d.recipient_id = r.id WHERE r.event_id = %s "
                "GROUP BY r.id HAVING count(*) FILTER (WHERE d.channel = 'in_app') <> 1 "
                "OR count(*) FILTER (WHERE d.channel = 'email') <> 1 OR count(d.id) <> 2) bad",
                event_id,
            )
            == 0
        )
        assert (
            one(
                conn,
                "SELECT count(*) FROM notification_delivery WHERE event_id = %s "
                "AND channel = 'in_app' AND status = 'delivered' AND rendered_title IS NOT NULL "
                "AND rendered_hash IS NOT NULL",
                event_id,
            )
            == PEOPLE
        )
