"""The throttle (issue 16): past the per-person, per-category cap, SMS deliveries are
skipped_throttled — counted across one claimed batch too — and in-app is unaffected; off by
default."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.config import Settings
from herald.db import schema as s
from herald.secrets.vault import Vault
from tests.integration.receipt_helpers import guardian_with_sms
from tests.integration.test_delivery import ScriptedProvider, deliver, delivery_rows
from tests.integration.test_fanout import ANNOUNCE, run_to_completion, send_event


async def texting_parent(engine: AsyncEngine, tenant: str) -> None:
    """The receipt tests' SMS guardian, on a number of this file's own."""
    await guardian_with_sms(engine, tenant, "+9779841000002")


async def announcements(engine: AsyncEngine, tenant: str, count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        await send_event(
            engine, tenant, channels=["in_app", "sms"], variables={**ANNOUNCE, "title": f"N{n}"}
        )
    await run_to_completion(engine, tenant)


async def in_app_delivered(engine: AsyncEngine, tenant: str) -> int:
    d = s.notification_delivery
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(d.c.id).where(
                d.c.tenant_id == tenant, d.c.channel == "in_app", d.c.status == "delivered"
            )
        )
        return len(rows.all())


async def test_past_the_cap_sms_is_skipped_throttled(
    engine: AsyncEngine, tenant: str, vault: Vault, settings: Settings, tmp_path: Any
) -> None:
    capped = settings.model_copy(
        update={"throttle_sms_per_category": 2, "throttle_window_seconds": 3600}
    )
    await texting_parent(engine, tenant)
    await announcements(engine, tenant, 3)
    provider = ScriptedProvider("sms")
    await deliver(engine, provider, vault, capped, tenant)()  # all three in one batch
    statuses = [r["status"] for r in await delivery_rows(engine, tenant)]
    assert statuses == ["sent", "sent", "skipped_throttled"]
    assert len(provider.messages) == 2
    [throttled] = [r for r in await delivery_rows(engine, tenant) if r["attempts"] == 0]
    assert throttled["skipped_at"] is not None
    assert await in_app_delivered(engine, tenant) == 3

    await announcements(engine, tenant, 1, start=3)  # a later batch counts what was sent
    await deliver(engine, provider, vault, capped, tenant)()
    assert (await delivery_rows(engine, tenant))[-1]["status"] == "skipped_throttled"


async def test_off_by_default(
    engine: AsyncEngine, tenant: str, vault: Vault, settings: Settings
) -> None:
    assert settings.throttle_sms_per_category == 0
    await texting_parent(engine, tenant)
    await announcements(engine, tenant, 3)
    await deliver(engine, ScriptedProvider("sms"), vault, settings, tenant)()
    assert [r["status"] for r in await delivery_rows(engine, tenant)] == ["sent"] * 3
