"""GET /metrics: the queue's state, read from PostgreSQL at scrape time."""

from __future__ import annotations

import re

from httpx import AsyncClient
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.db import schema as s
from tests import seed
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
    before = (await client.get("/metrics")).text
    async with engine.begin() as conn:
        group_id = await seed.group(conn, tenant, "class-7a")
        for i in range(3):
            pupil = await seed.person(conn, tenant, f"s{i}")
            parent = await seed.person(conn, tenant, f"g{i}")
            await seed.member(conn, tenant, group_id, pupil.id)
            await seed.guardian(conn, tenant, pupil.id, parent.id)
    await send_event(engine, tenant, channels=["in_app", "email"])
    due = (await client.get("/metrics")).text
    assert gauge(due, "herald_fanout_due") >= gauge(before, "herald_fanout_due") + 1

    await run_to_completion(engine, tenant)
    queued = (await client.get("/metrics")).text
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
    after = (await client.get("/metrics")).text
    assert gauge(after, "herald_deliveries_skipped_unconfigured", channel="email") >= 3
    assert gauge(after, "herald_deliveries_in_flight", channel="email", status="failed") == gauge(
        before, "herald_deliveries_in_flight", channel="email", status="failed"
    )
