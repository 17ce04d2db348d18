"""GET /metrics: the queue's state, read from PostgreSQL at scrape time."""

from __future__ import annotations

import re

from httpx import ASGITransport, AsyncClient
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.api.app import create_app
from herald.config import Settings
from herald.db import schema as s
from herald.kinds import Registry
from tests import seed
from tests.integration.test_directory import api_key
from tests.integration.test_fanout import run_to_completion, send_event


def gauge(text: str, name: str, **labels: str) -> float:
    label_text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    pattern = rf"^{name}{{{re.escape(label_text)}}} (\S+)$" if labels else rf"^{name} (\S+)$"
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def test_metrics_report_backlog_and_keep_unconfigured_apart(
    client: AsyncClient, engine: AsyncEngine, tenant: str
) -> None:
    """R-OBS-1, R-OBS-6: in-flight deliveries and due events are reported; skipped_unconfigured is a
    gauge of its own and never counted among failures."""
    scrape = await api_key(engine, tenant, ["metrics:read"])
    before = (await client.get("/metrics", headers=scrape)).text
    async with engine.begin() as conn:
        group_id = await seed.group(conn, tenant, "class-7a")
        for i in range(3):
            pupil = await seed.person(conn, tenant, f"s{i}")
            parent = await seed.person(conn, tenant, f"g{i}")
            await seed.member(conn, tenant, group_id, pupil.id)
            await seed.guardian(conn, tenant, pupil.id, parent.id)
    await send_event(engine, tenant, channels=["in_app", "email"])
    due = (await client.get("/metrics", headers=scrape)).text
    assert gauge(due, "herald_fanout_due") >= gauge(before, "herald_fanout_due") + 1

    await run_to_completion(engine, tenant)
    queued = (await client.get("/metrics", headers=scrape)).text
    assert (
        gauge(queued, "herald_deliveries_in_flight", channel="email", status="queued")
        >= gauge(before, "herald_deliveries_in_flight", channel="email", status="queued") + 3
    )

    async with engine.begin() as conn:
        await conn.execute(
            update(s.notification_delivery)
            .where(
                s.notification_delivery.c.tenant_id == tenant,
                s.notification_delivery.c.channel == "email",
            )
            .values(status="skipped_unconfigured", skipped_at=s.NOW)
        )
    after = (await client.get("/metrics", headers=scrape)).text
    assert gauge(after, "herald_deliveries_skipped_unconfigured", channel="email") >= 3
    assert gauge(after, "herald_deliveries_in_flight", channel="email", status="failed") == gauge(
        before, "herald_deliveries_in_flight", channel="email", status="failed"
    )


async def test_metrics_need_a_credential(client: AsyncClient) -> None:
    """R-SEC-2: /metrics is not public — no credential, or a made-up one, is 401 in Herald's
    envelope."""
    for headers in ({}, {"Authorization": "Bearer not-the-token"}, {"Authorization": "Basic x"}):
        answer = await client.get("/metrics", headers=headers)
        assert answer.status_code == 401, headers
        assert answer.json()["error"]["code"] == "UNAUTHENTICATED"


async def test_metrics_need_the_metrics_scope_on_an_api_key(
    client: AsyncClient, engine: AsyncEngine, tenant: str
) -> None:
    """R-SEC-2: an API key without metrics:read is refused (403); with it, or with every scope,
    the scrape answers. A revoked metrics key is 401."""
    sender = await api_key(engine, tenant, ["events:write"])
    refused = await client.get("/metrics", headers=sender)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "FORBIDDEN"
    for scopes in (["metrics:read"], ["*"]):
        answer = await client.get("/metrics", headers=await api_key(engine, tenant, scopes))
        assert answer.status_code == 200, scopes
        assert "herald_fanout_due" in answer.text
    # Credentials travel only as `Authorization: Bearer …` (the X-API-Key header is gone).
    x_api_key = await api_key(engine, tenant, ["metrics:read"])
    key = x_api_key["Authorization"].removeprefix("Bearer ")
    assert (await client.get("/metrics", headers={"X-Api-Key": key})).status_code == 401


async def test_metrics_token_opens_the_scrape(
    settings: Settings, engine: AsyncEngine, registry: Registry
) -> None:
    """R-SEC-2: HERALD_METRICS_TOKEN as a bearer token opens /metrics (what a Prometheus job
    holds); any other bearer value does not."""
    configured = settings.model_copy(update={"metrics_token": "scrape-token-0123456789"})
    app = create_app(configured, engine, registry)
    async with AsyncClient(transport=ASGITransport(app=app), base_url="http://herald.test") as http:
        good = await http.get(
            "/metrics", headers={"Authorization": "Bearer scrape-token-0123456789"}
        )
        bad = await http.get("/metrics", headers={"Authorization": "Bearer scrape-token-01234"})
    assert good.status_code == 200
    assert "herald_fanout_due" in good.text
    assert bad.status_code == 401
