"""Through every fault: PostgreSQL cut off, Redis frozen — quick 503s, nothing lost, quiet logs.

The faults are real: a TCP proxy between Herald and PostgreSQL that drops every connection and
refuses new ones (what a stopped server looks like to a client), and a private redis-server
stopped with SIGSTOP (a frozen Redis that still holds the commands it was sent).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from httpx import ASGITransport, AsyncClient
from sqlalchemy import event, func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.api.app import create_app
from herald.auth.service import create_api_key, sign_token
from herald.channels.base import ProviderOutcome
from herald.channels.mock import MockProvider
from herald.config import Settings
from herald.db import schema as s
from herald.db.engine import libpq_url, make_async_engine
from herald.db.presence import Presence
from herald.delivery import service as delivery_service
from herald.fanout import service as fanout
from herald.kinds import Registry
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.runtime.worker import run_worker
from herald.secrets import service as secrets
from herald.secrets.vault import RedisVault
from herald.sending.service import SendInput, asend
from tests import seed
from tests.faults import TcpProxy, private_redis, proxy_for
from tests.integration.test_secrets import (
    TOKEN,
    body_text,
    deliver_email,
    person,
    send_reset,
    smtp,
    smtp_settings,
)

__all__ = ["smtp", "smtp_settings"]  # fixtures used by name below


@pytest.fixture
def proxy(database_url: str) -> Iterator[TcpProxy]:
    with proxy_for(database_url) as p:
        yield p


@pytest.fixture
async def proxied_engine(proxy: TcpProxy, database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = make_async_engine(proxy.url_for(database_url), pool_size=3)
    yield engine
    await engine.dispose()


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.name.startswith("herald") and r.exc_info is not None
    ]


async def _announce(engine: AsyncEngine, tenant: str, user: str) -> uuid.UUID:
    async with engine.begin() as conn:
        result = await asend(
            conn,
            SendInput(
                tenant_id=tenant,
                kind="announcement.posted",
                audience={"kind": "users", "userIds": [user]},
                channels=["in_app", "email"],
                variables={"title": "Sports day", "message": f"moved {uuid.uuid4().hex[:6]}"},
            ),
            registry=SAMPLE_REGISTRY,
        )
    return result.id


async def test_api_answers_503_in_its_envelope_while_the_database_is_down_and_recovers(
    engine: AsyncEngine,
    proxied_engine: AsyncEngine,
    proxy: TcpProxy,
    settings: Settings,
    registry: Registry,
    tenant: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 18 (1), R-OPS-5: with PostgreSQL unreachable, /readyz and every route answer 503 with
    Herald's error envelope, a code naming the database and Retry-After — quickly, without a
    traceback, logged once — and the same app answers 200 again once it is back."""
    caplog.set_level(logging.INFO, logger="herald")
    async with engine.begin() as conn:
        await seed.person(conn, tenant, "u1")
        key = await create_api_key(conn, tenant_id=tenant, scopes=["*"])
    event_id = await _announce(engine, tenant, "u1")
    token = sign_token(settings, tenant_id=tenant, subject="u1")
    me = {"Authorization": f"Bearer {token}"}
    api = {"Authorization": f"Bearer {key}"}
    app = create_app(settings, proxied_engine, registry)
    async with AsyncClient(transport=ASGITransport(app=app), base_url="http://herald.test") as http:
        assert (await http.get("/readyz")).json()["checks"] == {
            "database": "ok",
            "migrations": "ok",
        }
        assert (await http.get("/v1/me/notifications", headers=me)).status_code == 200

        proxy.cut()
        started = time.monotonic()
        answers = [
            await http.get("/readyz"),
            await http.get("/v1/me/notifications", headers=me),
            await http.get("/v1/me/notifications/unread-count", headers=me),
            await http.get(f"/v1/events/{event_id}", headers=api),
            await http.post(
                "/v1/events",
                headers=api,
                json={
                    "kind": "announcement.posted",
                    "audience": {"kind": "users", "userIds": ["u1"]},
                    "variables": {"title": "t", "message": "m"},
                },
            ),
        ]
        elapsed = time.monotonic() - started
        for answer in answers:
            assert answer.status_code == 503, (answer.request.url, answer.text)
            assert answer.headers["content-type"].startswith("application/json")
            assert answer.json()["error"]["code"] == "DATABASE_UNAVAILABLE"
            assert int(answer.headers["Retry-After"]) >= 1
        assert answers[0].json()["status"] == "unavailable"
        assert answers[0].json()["checks"]["database"].startswith("down")
        # A bound against hanging, not a performance figure: each answer came without a wait.
        assert elapsed < 15, f"five answers took {elapsed:.1f} s"

        proxy.restore()
        assert (await http.get("/readyz")).status_code == 200
        assert (await http.get("/v1/me/notifications", headers=me)).status_code == 200
        assert (await http.get(f"/v1/events/{event_id}", headers=api)).status_code == 200

    assert tracebacks(caplog) == []
    said = [r.getMessage() for r in caplog.records if r.name == "herald.outages"]
    assert len(said) == 2, said  # "database unavailable …", then "database is back after …"
    assert said[0].startswith("database unavailable") and said[1].startswith("database is back")


async def test_readyz_names_a_frozen_redis(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str, tmp_path: Path
) -> None:
    """Issue 18 (1): a frozen Redis makes /readyz a quick 503 naming redis, and POST /v1/secrets a
    503 REDIS_UNAVAILABLE instead of a bare 500 after redis-py's default wait."""
    with private_redis(tmp_path) as server:
        redis_settings = settings.model_copy(update={"redis_url": server.url})
        async with engine.begin() as conn:
            key = await create_api_key(conn, tenant_id=tenant, scopes=["secrets:write"])
        app = create_app(redis_settings, engine, registry)
        async with AsyncClient(
            transport=ASGITransport(app=app), base_url="http://herald.test"
        ) as http:
            assert (await http.get("/readyz")).json()["checks"] == {
                "database": "ok",
                "migrations": "ok",
                "redis": "ok",
            }
            server.freeze()
            try:
                ready = await http.get("/readyz")
                stash = await http.post(
                    "/v1/secrets",
                    json={"type": "otp", "values": {"code": "1234"}},
                    headers={"Authorization": f"Bearer {key}"},
                )
            finally:
                server.thaw()
            assert ready.status_code == 503 and ready.json()["checks"]["database"] == "ok"
            assert ready.json()["checks"]["redis"].startswith("down")
            assert ready.json()["error"]["code"] == "REDIS_UNAVAILABLE"
            assert stash.status_code == 503, stash.text
            assert stash.json()["error"]["code"] == "REDIS_UNAVAILABLE"
            assert "Retry-After" in stash.headers
            assert (await http.get("/readyz")).status_code == 200
        await app.state.herald.vault.aclose()
        await app.state.herald.rate_limits.aclose()


async def test_a_frozen_redis_delays_a_reset_email_and_never_drops_it(
    engine: AsyncEngine,
    tenant: str,
    smtp: object,
    smtp_settings: Settings,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 18 (2), R-SECRET-9, R-SECRET-11: the worker's read of the secret times out while Redis
    is frozen; Redis runs the buffered read when it resumes. With GETDEL that consumed the token and
    the retry skipped the email; with a claim the retry finds its own claim and sends it."""
    from tests.providers.servers import SmtpTestServer

    assert isinstance(smtp, SmtpTestServer)
    with private_redis(tmp_path) as server:
        vault = RedisVault(server.url, timeout_seconds=0.5)
        try:
            await person(engine, tenant)
            ref = await secrets.stash(
                vault,
                tenant_id=tenant,
                type="password_reset",
                values={"token": TOKEN},
                ttl_seconds=600,
            )
            await send_reset(engine, tenant, ref)
            server.freeze()
            try:
                await deliver_email(engine, smtp_settings, vault, tenant)
            finally:
                server.thaw()
            async with engine.connect() as conn:
                row = (
                    await conn.execute(
                        select(s.notification_delivery).where(
                            s.notification_delivery.c.tenant_id == tenant
                        )
                    )
                ).one()
            assert row.status == "failed" and row.last_error == "SECRET_VAULT_UNAVAILABLE"
            assert smtp.handler.received == []
            # Redis ran the buffered claim once it resumed: the stash is gone, moved to the claim.
            import redis.asyncio as redis

            raw = redis.from_url(server.url)
            stash_key = f"herald:secret:{tenant}:{ref.split(':', 1)[1]}"
            for _ in range(100):
                if not await raw.exists(stash_key):
                    break
                await asyncio.sleep(0.05)
            assert not await raw.exists(stash_key), "the frozen claim never ran"
            await raw.aclose()

            async with engine.begin() as conn:  # the backoff elapses; sweep 2 re-queues it
                await conn.execute(
                    update(s.notification_delivery)
                    .where(s.notification_delivery.c.tenant_id == tenant)
                    .values(next_attempt_at=func.now())
                )
                await delivery_service.requeue_due_failures(conn, limit=100)
            await deliver_email(engine, smtp_settings, vault, tenant)
            [received] = smtp.handler.received
            assert TOKEN in body_text(received.content)
            assert await secrets.resolve(vault, tenant, ref, holder=str(row.public_id)) is None
        finally:
            await vault.aclose()
    assert TOKEN not in "\n".join(r.getMessage() for r in caplog.records)


async def test_worker_rides_out_a_database_outage_with_a_handful_of_log_lines(
    engine: AsyncEngine,
    proxied_engine: AsyncEngine,
    proxy: TcpProxy,
    settings: Settings,
    registry: Registry,
    tenant: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 18 (3), R-OPS-5: a worker polling every 50 ms through a 3-second database outage logs
    one line when the database goes and one when it is back — no traceback, no claim about
    reclaimed leases — and then delivers what was sent during the outage."""
    caplog.set_level(logging.INFO, logger="herald")
    async with engine.begin() as conn:
        await seed.person(conn, tenant, "u1")
    stop = asyncio.Event()
    worker = asyncio.create_task(
        run_worker(
            settings,
            proxied_engine,
            registry,
            stop,
            tenant_id=tenant,
            providers={"email": MockProvider("email", settings)},
        )
    )
    try:
        first = await _announce(engine, tenant, "u1")
        await _wait_for_final(engine, first)
        caplog.clear()
        proxy.cut()
        during = await _announce(engine, tenant, "u1")  # written directly, not through the proxy
        await asyncio.sleep(3)
        proxy.restore()
        await _wait_for_final(engine, during)
    finally:
        stop.set()
        await worker
    assert tracebacks(caplog) == []
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("herald") and r.levelno >= logging.WARNING
    ]
    assert len(lines) <= 4, lines  # one "unavailable", one "back" (and nothing per attempt)
    assert any(line.startswith("database unavailable") for line in lines), lines
    assert any(line.startswith("database is back after") for line in lines), lines
    assert not any("lease was reclaimed" in line for line in lines), lines


async def _wait_for_final(engine: AsyncEngine, event_id: uuid.UUID, within: float = 30) -> None:
    e, d = s.notification_event, s.notification_delivery
    deadline = time.monotonic() + within
    statuses: list[str] = []
    while time.monotonic() < deadline:
        async with engine.connect() as conn:
            statuses = (
                (
                    await conn.execute(
                        select(d.c.status)
                        .join(e, e.c.id == d.c.event_id)
                        .where(e.c.public_id == event_id)
                    )
                )
                .scalars()
                .all()
            )
        if len(statuses) == 2 and not {"queued", "sending"} & set(statuses):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"event {event_id} never reached final deliveries: {statuses}")


COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"  # the simple-query message psycopg sends to commit


@pytest.mark.parametrize(
    ("lost", "landed"),
    [
        (COMMIT, True),  # the write committed; only its answer was lost
        (b"pg_current_xact_id", False),  # the statement's answer was lost: it rolled back
    ],
)
async def test_an_outcome_whose_answer_was_lost_is_written_once_and_counted_written(
    engine: AsyncEngine,
    proxied_engine: AsyncEngine,
    proxy: TcpProxy,
    settings: Settings,
    tenant: str,
    caplog: pytest.LogCaptureFixture,
    lost: bytes,
    landed: bool,
) -> None:
    """R-STATE-5, R-STATE-21: the connection drops while the outcome's COMMIT is in flight. The
    recorder asks PostgreSQL (pg_xact_status) what became of its transaction instead of writing
    again: a write that landed counts as written — so the caller releases its secret — with one
    attempt and no claim that the lease was reclaimed; one that did not land is written again."""
    from herald.delivery import queries as dq
    from herald.delivery import recorder
    from herald.delivery.send import Prepared
    from tests.integration.test_delivery import attempts, delivery_rows, email_delivery

    caplog.set_level(logging.INFO, logger="herald")
    row = await email_delivery(engine, tenant)
    async with engine.begin() as conn:
        [(claimed_id, _, occurred_at)] = await dq.claim_due_deliveries(
            conn, "email", 10, 60, tenant
        )
        [context] = await dq.load_send_contexts(conn, [claimed_id], (occurred_at, occurred_at))
    async with proxied_engine.connect() as conn:  # the pool holds a connection through the proxy
        await conn.execute(select(1))
    writes: list[str] = []

    @event.listens_for(proxied_engine.sync_engine, "before_cursor_execute")
    def count(_c: object, _cur: object, statement: str, *_args: object) -> None:
        if "pg_current_xact_id" in statement:
            writes.append(statement)

    proxy.lose_answer_to(lost)
    written = await recorder.record(
        proxied_engine,
        [recorder.Result(Prepared(context), ProviderOutcome.sent("m-1"))],
        settings,
    )
    assert proxy._lose_answer_to is None  # the fault fired
    assert written == {row["id"]}
    [after] = await delivery_rows(engine, tenant)
    assert (after["status"], after["attempts"], after["provider_message_id"]) == ("sent", 1, "m-1")
    assert [a["outcome"] for a in await attempts(engine, row["id"])] == ["sent"]
    said = [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("herald") and r.levelno >= logging.WARNING
    ]
    assert not any("lease was reclaimed" in line for line in said), said
    assert any(line.startswith("database unavailable") for line in said), said
    assert tracebacks(caplog) == []
    assert len(writes) == (1 if landed else 2)  # a write that landed is asked about, not redone


async def test_a_dead_workers_fan_out_claim_is_released_at_once(
    engine: AsyncEngine, database_url: str, tenant: str
) -> None:
    """Issue 18 (4), R-REAPER-7, R-REAPER-8: a claim whose holder's presence lock is gone (its
    session ended: the worker was killed) is released at once and resumes from its cursor; the
    claim of a live holder is not, however old — that one keeps the ten-lease rule."""
    async with engine.begin() as conn:
        await seed.person(conn, tenant, "u1")
    event_id = await _announce(engine, tenant, "u1")
    stop = asyncio.Event()
    here = Presence(libpq_url(database_url))
    holding = asyncio.create_task(here.run(stop))
    await asyncio.wait_for(here.held.wait(), timeout=10)
    async with engine.begin() as conn:
        claimed = await fanout.claim_next_event(
            conn, uuid.uuid4(), tenant_id=tenant, holder=here.holder
        )
    assert claimed is not None and claimed.public_id == event_id
    async with engine.begin() as conn:
        assert claimed.id not in await fanout.release_orphaned_claims(conn)  # alive: kept

    stop.set()  # the worker "dies": its session ends, and its advisory lock with it
    await holding
    async with engine.begin() as conn:
        released = await fanout.release_orphaned_claims(conn)
    assert claimed.id in released
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(s.notification_event).where(s.notification_event.c.id == claimed.id)
            )
        ).one()
    assert row.fanout_claimed_at is None and row.fanout_claimed_by is None
    assert row.fanout_completed_at is None
    async with engine.begin() as conn:  # another worker takes it straight away
        again = await fanout.claim_next_event(conn, uuid.uuid4(), tenant_id=tenant)
    assert again is not None and again.id == claimed.id and again.fanout_attempts == 2


async def test_scheduler_rides_out_a_database_outage_quietly(
    proxied_engine: AsyncEngine,
    proxy: TcpProxy,
    settings: Settings,
    registry: Registry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 18 (3), R-OPS-5: `herald scheduler` ticking every 100 ms through a 2-second database
    outage says so once, backs off, says when the database is back, and logs no traceback."""
    from herald.runtime.scheduler import run_scheduler

    caplog.set_level(logging.INFO, logger="herald")
    fast = settings.model_copy(update={"feature_reminders": True, "scheduler_tick_seconds": 0.1})
    stop = asyncio.Event()
    scheduler = asyncio.create_task(run_scheduler(fast, proxied_engine, registry, stop))
    try:
        await asyncio.sleep(0.5)
        caplog.clear()
        proxy.cut()
        await asyncio.sleep(2)
        proxy.restore()
        for _ in range(300):
            if any(r.getMessage().startswith("database is back") for r in caplog.records):
                break
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await scheduler
    assert tracebacks(caplog) == []
    said = [r.getMessage() for r in caplog.records if r.name == "herald.outages"]
    assert len(said) == 2, said
    assert said[0].startswith("database unavailable") and said[1].startswith("database is back")
