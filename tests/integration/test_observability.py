"""Issue 14: process metrics, the request id, one trace across the rows, and readiness that knows
the schema. (Log format and redaction: tests/unit/test_log_redaction.py; real processes:
tests/e2e/test_observability.py.)"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from httpx import ASGITransport, AsyncClient
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.api.app import create_app
from herald.auth.service import create_api_key
from herald.channels.base import ProviderOutcome
from herald.config import Settings
from herald.db import migrate
from herald.db import schema as s
from herald.db.engine import make_async_engine
from herald.fanout.worker import fan_out_next_event
from herald.kinds import Registry
from herald.maintenance.service import run_tick
from herald.observability import tracing
from herald.secrets.vault import Vault
from tests import seed
from tests.conftest import create_database, drop_database
from tests.integration.test_delivery import ScriptedProvider, deliver, email_delivery
from tests.integration.test_directory import api_key
from tests.integration.test_fanout import run_to_completion, send_event
from tests.integration.test_metrics import gauge


@pytest.fixture
def delivery_settings(settings: Settings, tmp_path: Any) -> Settings:
    return settings.model_copy(
        update={"max_attempts": 3, "retry_base_seconds": 30, "data_dir": tmp_path}
    )


async def scrape(client: AsyncClient, engine: AsyncEngine, tenant: str) -> str:
    answer = await client.get("/metrics", headers=await api_key(engine, tenant, ["metrics:read"]))
    assert answer.status_code == 200, answer.text
    return answer.text


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample whose labels include `labels` (0 when absent)."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


async def test_failing_provider_shows_in_the_outcome_counter_and_the_oldest_age(
    client: AsyncClient,
    engine: AsyncEngine,
    tenant: str,
    vault: Vault,
    delivery_settings: Settings,
) -> None:
    """A provider that keeps refusing: the outcome counter and latency histogram count each call,
    and the email queue's oldest-age gauge reports how long the row has been waiting."""
    before = await scrape(client, engine, tenant)
    row = await email_delivery(engine, tenant)
    async with engine.begin() as conn:  # queued two minutes ago
        await conn.execute(
            update(s.notification_delivery)
            .where(s.notification_delivery.c.id == row["id"])
            .values(queued_at=func.now() - timedelta(minutes=2))
        )
    refusing = ScriptedProvider(
        "email", ProviderOutcome.failure("EMAIL_SMTP_451", retryable=True, status="451")
    )
    assert await deliver(engine, refusing, vault, delivery_settings, tenant)() == 1
    after = await scrape(client, engine, tenant)

    labels = {"channel": "email", "provider": "scripted"}
    calls = "herald_provider_calls_total"
    assert sample(after, calls, outcome="failed_retryable", **labels) == (
        sample(before, calls, outcome="failed_retryable", **labels) + 1
    )
    latency = "herald_provider_call_duration_seconds_count"
    assert sample(after, latency, **labels) == sample(before, latency, **labels) + 1
    assert (
        gauge(after, "herald_deliveries_oldest_age_seconds", channel="email", status="failed")
        >= 120
    )
    assert 'herald_scheduler_lag_seconds{source="reminder"}' in after
    for line in after.splitlines():  # no label value carries an address or an id
        assert "@" not in line and tenant not in line


async def test_a_batch_logs_one_info_line_and_each_failed_call_its_own_warning(
    client: AsyncClient,
    engine: AsyncEngine,
    tenant: str,
    vault: Vault,
    delivery_settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """docs/scaling.md, the worker: at INFO a batch writes one summary line, not one per call; a failed
    call keeps its own WARNING line (the runbook's), and the counters still count every call."""
    async with engine.begin() as conn:
        group_id = await seed.group(conn, tenant, "class-7a")
        for n in range(3):
            pupil = await seed.person(conn, tenant, f"s{n}", full_name=f"Pupil {n}")
            parent = await seed.person(
                conn, tenant, f"g{n}", full_name=f"Parent {n}", email=f"parent{n}@example.com"
            )
            await seed.member(conn, tenant, group_id, pupil.id)
            await seed.guardian(conn, tenant, pupil.id, parent.id)
    await send_event(engine, tenant, channels=["email"])
    await run_to_completion(engine, tenant)
    before = await scrape(client, engine, tenant)
    provider = ScriptedProvider(
        "email",
        ProviderOutcome.sent("m-1", "250"),
        ProviderOutcome.sent("m-2", "250"),
        ProviderOutcome.failure("EMAIL_SMTP_451", retryable=True, status="451"),
    )
    caplog.set_level(logging.INFO, logger="herald")
    assert await deliver(engine, provider, vault, delivery_settings, tenant)() == 3
    after = await scrape(client, engine, tenant)

    lines = [r for r in caplog.records if r.name == "herald.delivery.worker"]
    info = [r.getMessage() for r in lines if r.levelno == logging.INFO]
    assert len(info) == 1, info
    assert re.fullmatch(
        r"email batch of 3 via scripted: 1 failed_retryable, 2 sent in \d+ ms", info[0]
    ), info
    warnings = [r.getMessage() for r in lines if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert re.fullmatch(
        r"delivery [0-9a-f-]{36} via scripted: failed_retryable \(EMAIL_SMTP_451\) in \d+ ms",
        warnings[0],
    ), warnings
    labels = {"channel": "email", "provider": "scripted"}
    calls = "herald_provider_calls_total"
    for outcome, added in (("sent", 2), ("failed_retryable", 1)):
        assert sample(after, calls, outcome=outcome, **labels) == (
            sample(before, calls, outcome=outcome, **labels) + added
        )
    latency = "herald_provider_call_duration_seconds_count"
    assert sample(after, latency, **labels) == sample(before, latency, **labels) + 3


async def test_reaper_counts_the_lease_expiries_it_reclaims(
    client: AsyncClient, engine: AsyncEngine, tenant: str, delivery_settings: Settings
) -> None:
    row = await email_delivery(engine, tenant)
    async with engine.begin() as conn:
        await conn.execute(  # claimed five minutes ago by a worker that died
            update(s.notification_delivery_queue)
            .where(s.notification_delivery_queue.c.delivery_id == row["id"])
            .values(
                claimed_at=func.now() - timedelta(minutes=5),
                lease_expires_at=func.now() - timedelta(minutes=1),
            )
        )
    name = "herald_lease_expiries_reclaimed_total"
    before = sample(await scrape(client, engine, tenant), name, channel="email")
    report = await run_tick(engine, delivery_settings, backfill_channels=[])
    assert report.reclaimed >= 1
    after = sample(await scrape(client, engine, tenant), name, channel="email")
    assert after >= before + 1


async def test_scheduler_lag_reports_the_oldest_due_reminder(
    client: AsyncClient, engine: AsyncEngine, tenant: str
) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            s.reminder_schedule.insert().values(
                tenant_id=tenant,
                name="late",
                kind="announcement.posted",
                audience={"kind": "all_users"},
                timezone="UTC",
                local_time="08:00",
                weekdays=[1, 2, 3, 4, 5, 6, 7],
                next_run_at=func.now() - timedelta(minutes=10),
            )
        )
    try:
        text = await scrape(client, engine, tenant)
        assert gauge(text, "herald_scheduler_lag_seconds", source="reminder") >= 600
    finally:
        async with engine.begin() as conn:
            await conn.execute(
                s.reminder_schedule.delete().where(s.reminder_schedule.c.tenant_id == tenant)
            )


async def test_scheduler_lag_reports_the_oldest_due_escalation_step(
    client: AsyncClient, engine: AsyncEngine, tenant: str
) -> None:
    """docs/escalation.md: a due step nobody decided shows as source="escalation"."""
    st = s.notification_escalation_step
    async with engine.begin() as conn:
        await conn.execute(
            st.insert().values(
                tenant_id=tenant,
                event_id=1,
                recipient_id=-1,
                occurred_at=func.now(),
                category="announcement",
                suppressible=True,
                step_index=1,
                channel="email",
                due_at=func.now() - timedelta(minutes=10),
            )
        )
    try:
        text = await scrape(client, engine, tenant)
        assert gauge(text, "herald_scheduler_lag_seconds", source="escalation") >= 600
    finally:
        async with engine.begin() as conn:
            await conn.execute(st.delete().where(st.c.tenant_id == tenant))


async def test_request_id_is_echoed_generated_and_stored_on_the_event(
    client: AsyncClient, engine: AsyncEngine, tenant: str
) -> None:
    async with engine.begin() as conn:
        await seed.person(conn, tenant, "u1")
        key = await create_api_key(conn, tenant_id=tenant, scopes=["*"])
    body = {
        "kind": "announcement.posted",
        "audience": {"kind": "users", "userIds": ["u1"]},
        "channels": ["in_app"],
        "variables": {"title": "t", "message": "m"},
    }
    given = f"req-{uuid.uuid4().hex[:12]}"
    sent = await client.post(
        "/v1/events",
        json=body,
        headers={"Authorization": f"Bearer {key}", "X-Request-ID": given},
    )
    assert sent.status_code == 201 and sent.headers["X-Request-ID"] == given
    async with engine.connect() as conn:
        stored = (
            await conn.execute(
                select(s.notification_event.c.origin_request_id).where(
                    s.notification_event.c.public_id == uuid.UUID(sent.json()["id"])
                )
            )
        ).scalar_one()
    assert stored == given

    generated = await client.get("/healthz", headers={"X-Request-ID": "bad id with spaces"})
    assert generated.headers["X-Request-ID"] not in ("", "bad id with spaces")

    text = await scrape(client, engine, tenant)
    assert 'route="/v1/events"' in text and 'route="/v1/events/{event_id}"' not in given
    assert given not in text


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.use_processor(SimpleSpanProcessor(exporter))
    try:
        yield exporter
    finally:
        tracing.shutdown()


async def test_one_trace_from_the_request_through_the_fan_out_to_the_provider_call(
    spans: InMemorySpanExporter,
    client: AsyncClient,
    engine: AsyncEngine,
    registry: Registry,
    tenant: str,
    vault: Vault,
    delivery_settings: Settings,
) -> None:
    """The API's span is stored on the event row; the fan-out (another process in production)
    and each provider call continue that trace from the row."""
    async with engine.begin() as conn:
        await seed.person(conn, tenant, "u1", email="u1@example.com")
        key = await create_api_key(conn, tenant_id=tenant, scopes=["*"])
    sent = await client.post(
        "/v1/events",
        json={
            "kind": "announcement.posted",
            "audience": {"kind": "users", "userIds": ["u1"]},
            "channels": ["email"],
            "variables": {"title": "t", "message": "m"},
        },
        headers={"Authorization": f"Bearer {key}"},
    )
    assert sent.status_code == 201, sent.text
    assert await fan_out_next_event(engine, registry, batch_size=100, tenant_id=tenant)
    provider = ScriptedProvider("email")
    assert await deliver(engine, provider, vault, delivery_settings, tenant)() == 1

    by_name: dict[str, Any] = {}
    for finished in spans.get_finished_spans():
        by_name.setdefault(finished.name, finished)
    request = by_name["POST /v1/events"]
    fanout, batch, call = by_name["fanout"], by_name["fanout.batch"], by_name["provider.send"]
    trace_id = request.context.trace_id
    assert {fanout.context.trace_id, batch.context.trace_id, call.context.trace_id} == {trace_id}
    assert fanout.parent.span_id == request.context.span_id
    assert batch.parent.span_id == fanout.context.span_id
    assert call.parent.span_id == request.context.span_id
    assert call.attributes["herald.outcome"] == "sent"


async def test_tracing_off_stores_no_trace_context(
    client: AsyncClient, engine: AsyncEngine, tenant: str
) -> None:
    assert not tracing.enabled()
    assert tracing.current_traceparent() is None
    with tracing.span("anything") as current:
        assert current is None


@pytest.fixture
def one_migration_behind(server_url: str) -> Iterator[str]:
    name = f"herald_behind_{uuid.uuid4().hex[:10]}"
    url = create_database(server_url, name)
    scripts = ScriptDirectory(str(migrate.MIGRATIONS))
    head = scripts.get_revision(scripts.get_current_head())
    assert head is not None and isinstance(head.down_revision, str)
    migrate.upgrade(url, head.down_revision)
    yield url
    drop_database(server_url, name)


async def test_readyz_fails_while_the_schema_is_behind_the_code(
    one_migration_behind: str, settings: Settings, registry: Registry
) -> None:
    engine = make_async_engine(one_migration_behind, pool_size=1)
    try:
        app = create_app(settings, engine, registry)
        async with AsyncClient(
            transport=ASGITransport(app=app), base_url="http://herald.test"
        ) as http:
            ready = await http.get("/readyz")
            assert ready.status_code == 503, ready.text
            checks = ready.json()["checks"]
            assert checks["database"] == "ok"
            assert checks["migrations"].startswith("behind: database at ")
            assert (await http.get("/healthz")).status_code == 200  # liveness is not readiness
            migrate.upgrade(one_migration_behind)
            again = await http.get("/readyz")
            assert again.status_code == 200, again.text
            assert again.json()["checks"]["migrations"] == "ok"
    finally:
        await engine.dispose()
