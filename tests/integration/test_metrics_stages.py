"""Issue 44: metrics for the newer parts — webhook messages by outcome and endpoint health, digest
groups pending, due and sent, throttle skips by category. Each figure is moved by the real stage
(the webhook sender against a local host, the digest sweeper, the SMS worker's throttle) and read
through GET /metrics, as Prometheus would.

/metrics reads across tenants and the test database is shared, so every assertion compares a
scrape before with a scrape after (or a lower bound), never an absolute count.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from cryptography.fernet import Fernet
from httpx import AsyncClient
from sqlalchemy import func, update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.config import Settings
from herald.db import schema as s
from herald.digests import service as digests
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.secrets.vault import Vault
from herald.webhooks import worker as webhooks
from tests.integration import test_webhooks
from tests.integration.test_admin_history import admin_key_headers
from tests.integration.test_delivery import ScriptedProvider, deliver, email_delivery
from tests.integration.test_digests import assignments, family, window_passes
from tests.integration.test_metrics import gauge
from tests.integration.test_observability import sample, scrape
from tests.integration.test_throttle import announcements, texting_parent
from tests.integration.test_webhooks import Receiver, create_endpoint, make_due, messages

host = test_webhooks.receiver  # the host's verifying endpoint, as a fixture of this module


@pytest.fixture
def settings(settings: Settings, tmp_path: Any) -> Settings:
    return settings.model_copy(
        update={
            "webhook_allow_loopback": True,
            "vault_key": Fernet.generate_key().decode(),
            "data_dir": tmp_path,
            "webhook_max_attempts": 4,
        }
    )


def moved(before: str, after: str, name: str, **labels: str) -> float:
    """How far one counter's samples with `labels` moved between two scrapes."""
    return sample(after, name, **labels) - sample(before, name, **labels)


def gauge_moved(before: str, after: str, name: str, **labels: str) -> float:
    return gauge(after, name, **labels) - gauge(before, name, **labels)


async def send_once(engine: AsyncEngine, settings: Settings, tenant: str) -> int:
    async with webhooks.build_client(settings) as http:
        return await webhooks.send_batch(engine, settings, http, tenant_id=tenant)


async def test_webhook_outcomes_and_endpoint_health(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    host: Receiver,
) -> None:
    """A host answering 500: the post counts as a retry, its message as retrying, its endpoint as
    failing with the message's age; once the host answers 200 it counts as sent and the endpoint
    healthy again; a sender that died holding a message, and a message out of attempts, count
    as retry and dead."""
    messages_total = "herald_webhook_messages_total"
    endpoints = "herald_webhook_endpoints"
    start = await scrape(client, engine, tenant)
    headers = await admin_key_headers(engine, tenant)
    created = await create_endpoint(client, headers, host.url, ["event.completed"])
    host.secret = created["secret"]
    host.always_fail = True
    await email_delivery(engine, tenant)  # the fan-out completes: one event.completed message

    assert await send_once(engine, settings, tenant) == 1
    m = s.webhook_message
    async with engine.begin() as conn:  # written ten minutes ago
        await conn.execute(
            update(m)
            .where(m.c.tenant_id == tenant)
            .values(created_at=func.now() - timedelta(minutes=10))
        )
    failing = await scrape(client, engine, tenant)
    assert moved(start, failing, messages_total, outcome="retry") == 1
    assert moved(start, failing, messages_total, outcome="sent") == 0
    assert gauge_moved(start, failing, "herald_webhook_messages_waiting", state="retrying") == 1
    assert gauge_moved(start, failing, endpoints, state="failing") == 1
    assert gauge_moved(start, failing, endpoints, state="healthy") == 0
    assert gauge(failing, "herald_webhook_failing_seconds") >= 600

    host.always_fail = False
    await make_due(engine, tenant)
    assert await send_once(engine, settings, tenant) == 1
    healthy = await scrape(client, engine, tenant)
    assert moved(failing, healthy, messages_total, outcome="sent") == 1
    assert gauge_moved(start, healthy, "herald_webhook_messages_waiting", state="retrying") == 0
    assert gauge_moved(start, healthy, endpoints, state="failing") == 0
    assert gauge_moved(start, healthy, endpoints, state="healthy") == 1

    # A sender died holding the message: reclaimed, a retry. Then out of attempts: dead.
    [message] = await messages(engine, tenant)
    async with engine.begin() as conn:
        await conn.execute(
            update(m)
            .where(m.c.id == message["id"])
            .values(
                status="processing",
                sent_at=None,
                attempts=1,
                claimed_at=func.now() - timedelta(minutes=5),
                lease_expires_at=func.now() - timedelta(minutes=1),
            )
        )
    host.always_fail = True
    await send_once(engine, settings, tenant)  # reclaims it (a retry), then posts: refused
    async with engine.begin() as conn:
        await conn.execute(update(m).where(m.c.id == message["id"]).values(attempts=3))
    await make_due(engine, tenant)
    assert await send_once(engine, settings, tenant) == 1  # the fourth attempt: dead
    end = await scrape(client, engine, tenant)
    assert moved(healthy, end, messages_total, outcome="retry") == 2
    assert moved(healthy, end, messages_total, outcome="dead") == 1
    assert [m["status"] for m in await messages(engine, tenant)] == ["dead"]
    assert gauge_moved(start, end, endpoints, state="failing") == 0  # dead is not waiting


async def test_digest_groups_pending_due_and_sent(
    client: AsyncClient, engine: AsyncEngine, tenant: str
) -> None:
    """Five held assignments are one pending group; past its window, one due group overdue by
    the time it waited; the sweep sends one digest carrying five items and the group is gone."""
    start = await scrape(client, engine, tenant)
    await family(engine, tenant)
    await assignments(engine, tenant, 5)
    held = await scrape(client, engine, tenant)
    groups = "herald_digest_groups"
    assert gauge_moved(start, held, groups, channel="email", state="pending") == 1
    assert gauge_moved(start, held, groups, channel="email", state="due") == 0

    await window_passes(engine, tenant)  # held 61 minutes against a 60-minute window
    due = await scrape(client, engine, tenant)
    assert gauge_moved(start, due, groups, channel="email", state="due") == 1
    assert gauge(due, "herald_digest_overdue_seconds", channel="email") >= 60

    report = await digests.sweep(engine, SAMPLE_REGISTRY)
    assert report.digests >= 1
    swept = await scrape(client, engine, tenant)
    assert moved(due, swept, "herald_digests_sent_total", channel="email") == report.digests
    assert (
        moved(due, swept, "herald_digest_items_total", channel="email", outcome="digested")
        == report.items
    )
    assert gauge_moved(start, swept, groups, channel="email", state="pending") <= 0


async def test_throttle_skips_by_channel_and_category(
    client: AsyncClient, engine: AsyncEngine, tenant: str, vault: Vault, settings: Settings
) -> None:
    capped = settings.model_copy(
        update={"throttle_sms_per_category": 2, "throttle_window_seconds": 3600}
    )
    before = await scrape(client, engine, tenant)
    await texting_parent(engine, tenant)
    await announcements(engine, tenant, 3)
    await deliver(engine, ScriptedProvider("sms"), vault, capped, tenant)()
    after = await scrape(client, engine, tenant)
    skips = "herald_throttle_skips_total"
    assert moved(before, after, skips, channel="sms", category="announcement") == 1
    assert moved(before, after, skips, channel="sms", category="security") == 0
