"""The claim cursor (herald.delivery.worker.ClaimCursor): a channel's claims start where the last
one ended, never lose a row that is due behind that point, and never take a row twice.

A claimed row's old version keeps its entry in the due index until vacuum; a claim from the head
walks every such entry (and the rows another loop holds locked) before it reaches a row it can
take. The module builds its own database: its claims are cross-tenant, as the worker's are.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from cryptography.fernet import Fernet
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.config import Settings
from herald.db import migrate
from herald.db.engine import libpq_url, make_async_engine
from herald.delivery import queries
from herald.delivery.worker import ClaimCursor, deliver_batch
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.secrets.vault import TableVault
from tests.conftest import create_database, drop_database
from tests.integration.test_delivery import ScriptedProvider

TENANT = "cursor"


def _seed(conn: psycopg.Connection[Any], rows: int) -> None:
    """`rows` queued email deliveries of one event to `rows` people, due one millisecond apart
    over the last hour (in id order)."""
    conn.execute(
        "INSERT INTO person (tenant_id, external_id, full_name, email) "
        "SELECT %s, 'p' || g, 'Person ' || g, 'p' || g || '@example.com' "
        "FROM generate_series(1, %s) g",
        (TENANT, rows),
    )
    conn.execute(
        "INSERT INTO notification_event (tenant_id, kind, category, priority, audience, channels, "
        "variables, dedupe_key, fanout_claimed_at, fanout_claim_token, fanout_completed_at, "
        "recipient_count) VALUES (%s, 'announcement.posted', 'announcement', 'normal', "
        '\'{"kind": "all_users"}\', ARRAY[\'email\'], \'{"title": "t", "message": "m"}\', '
        "%s, now(), gen_random_uuid(), now(), %s)",
        (TENANT, uuid.uuid4().hex * 2, rows),
    )
    conn.execute(
        "INSERT INTO notification_recipient (tenant_id, event_id, user_id, user_public_id_snapshot, "
        "variables, occurred_at) SELECT p.tenant_id, e.id, p.id, p.public_id, "
        "jsonb_build_object('name', p.full_name), e.occurred_at "
        "FROM person p, notification_event e WHERE p.tenant_id = %s ORDER BY p.id",
        (TENANT,),
    )
    conn.execute(
        "INSERT INTO notification_delivery (tenant_id, event_id, recipient_id, channel, status, "
        "next_attempt_at, occurred_at) SELECT tenant_id, event_id, id, 'email', 'queued', "
        "now() - interval '1 hour' + id * interval '1 ms', occurred_at "
        "FROM notification_recipient ORDER BY id"
    )
    conn.execute("VACUUM ANALYZE")


@pytest.fixture
def database(server_url: str) -> Iterator[str]:
    name = f"herald_cursor_{uuid.uuid4().hex[:10]}"
    url = create_database(server_url, name)
    try:
        migrate.upgrade(url)
        yield url
    finally:
        drop_database(server_url, name)


@pytest.fixture
async def cursor_engine(database: str) -> AsyncIterator[AsyncEngine]:
    engine = make_async_engine(database, pool_size=2)
    yield engine
    await engine.dispose()


def _due_entries_read(conn: psycopg.Connection[Any], statement: str, **values: Any) -> int:
    """Entries of the due index (every month's) that one claim read, live or not: the
    statistics' "tuples returned" of those indexes in the claim's own transaction, rolled back."""
    sql = str(queries.SQL[statement])
    for name in ("channel", "limit", "lease_seconds", "after_at", "after_id"):
        sql = sql.replace(f":{name}", f"%({name})s")
    read = (
        "SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(oid)), 0) FROM pg_class "
        "WHERE relkind = 'i' AND relname LIKE 'notification_delivery_due_idx%%'"
    )
    with conn.transaction(force_rollback=True):
        # The backend's counts not yet sent to the statistics: this claim's is the difference.
        before = conn.execute(read).fetchone()
        claimed = conn.execute(
            sql, {"channel": "email", "limit": 100, "lease_seconds": 60, **values}
        ).fetchall()
        assert len(claimed) == 100
        after = conn.execute(read).fetchone()
    assert before is not None and after is not None
    return int(after[0]) - int(before[0])


async def test_a_claim_past_the_cursor_does_not_walk_the_rows_claimed_before_it(
    database: str, cursor_engine: AsyncEngine
) -> None:
    """With an older snapshot open (a fan-out batch, any long statement), the entries of rows
    already claimed cannot be dropped from the due index: a claim from the head reads past all of
    them, a claim from the cursor starts after them."""
    with psycopg.connect(libpq_url(database), autocommit=True) as conn:
        _seed(conn, 3_000)
    with psycopg.connect(libpq_url(database), autocommit=True) as holder:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM person").fetchone()  # the snapshot is taken
        cursor = ClaimCursor()
        for _ in range(20):
            async with cursor_engine.begin() as conn:
                claimed = await queries.claim(conn, "email", 100, 60)
            assert len(claimed) == 100
            cursor.moved(claimed, from_head=True)
        assert cursor.position is not None
        with psycopg.connect(libpq_url(database), autocommit=True) as conn:
            head = _due_entries_read(conn, "claim_due_deliveries")
            past = _due_entries_read(
                conn,
                "claim_due_deliveries_after",
                after_at=cursor.position[0],
                after_id=cursor.position[1],
            )
        holder.execute("ROLLBACK")
    # The head's walk reads the 2,000 entries of the rows claimed before it, each a visit to a
    # heap tuple it cannot take; the cursor's reads the 100 it claims.
    assert head >= 2_100 and past <= 110, (head, past)


async def test_the_cursor_claims_every_row_once_including_one_due_behind_it(
    database: str, cursor_engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-STATE-1, R-STATE-17: claims from the cursor take the next rows in (next_attempt_at, id)
    order; a row that becomes due behind the cursor (a failed row re-queued with its due time
    long past) is taken by the head claim that runs once nothing is left past the cursor; every
    row is sent exactly once."""
    with psycopg.connect(libpq_url(database), autocommit=True) as conn:
        _seed(conn, 300)
        order = [r[0] for r in conn.execute("SELECT id FROM notification_delivery ORDER BY id")]
    settings = Settings(database_url=database)
    vault = TableVault(cursor_engine, Fernet.generate_key())
    provider = ScriptedProvider("email")
    cursor = ClaimCursor()
    # Every claim after the first starts from the cursor (no time-based return to the head).
    monkeypatch.setattr(ClaimCursor, "HEAD_EVERY_SECONDS", 3600.0)

    async def batch() -> int:
        return await deliver_batch(
            cursor_engine,
            "email",
            provider,
            registry=SAMPLE_REGISTRY,
            vault=vault,
            settings=settings,
            limit=100,
            cursor=cursor,
        )

    assert await batch() == 100  # from the head: rows 1..100
    assert cursor.position is not None and cursor.position[1] == order[99]
    # Row 200 becomes due an hour before everything else: behind the cursor.
    behind = order[199]
    with psycopg.connect(libpq_url(database), autocommit=True) as conn:
        conn.execute(
            "UPDATE notification_delivery SET next_attempt_at = now() - interval '2 hours' "
            "WHERE id = %s",
            (behind,),
        )
    assert await batch() == 100  # past the cursor: rows 101..199 and 201, not row 200
    with psycopg.connect(libpq_url(database), autocommit=True) as conn:
        status = conn.execute(
            "SELECT status FROM notification_delivery WHERE id = %s", (behind,)
        ).fetchone()
        assert status == ("queued",)
    # Past the cursor 99 are left: a short claim, which does not go back to the head.
    assert await batch() == 99
    # Nothing is left past the cursor: the head claim takes row 200.
    assert await batch() == 1
    assert await batch() == 0
    with psycopg.connect(libpq_url(database), autocommit=True) as conn:
        statuses = conn.execute(
            "SELECT status, count(*), count(DISTINCT id) FROM notification_delivery GROUP BY 1"
        ).fetchall()
        attempts = conn.execute(
            "SELECT count(*), count(DISTINCT delivery_id) FROM notification_delivery_attempt"
        ).fetchone()
    assert statuses == [("sent", 300, 300)]
    assert attempts == (300, 300)
    assert len(provider.messages) == 300


def test_the_cursor_goes_back_to_the_head_at_least_every_head_interval() -> None:
    """A due row behind the cursor waits at most HEAD_EVERY_SECONDS for a claim from the head,
    however long the claims past the cursor keep coming back full."""
    from datetime import UTC, datetime

    cursor = ClaimCursor()
    assert cursor.after() is None  # no position yet: from the head
    row = queries.Claimed(7, TENANT, datetime.now(UTC), datetime.now(UTC))
    cursor.moved([row], from_head=True)
    assert cursor.after() == (row.next_attempt_at, 7)
    cursor.last_head -= ClaimCursor.HEAD_EVERY_SECONDS
    assert cursor.after() is None
    # The position never moves back: a head claim's rows behind it leave it where it was.
    earlier = queries.Claimed(3, TENANT, row.occurred_at, row.next_attempt_at.replace(year=2000))
    cursor.moved([earlier], from_head=True)
    assert cursor.position == (row.next_attempt_at, 7)
