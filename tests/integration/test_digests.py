"""Digests (issue 16): five assignments in ten minutes reach a guardian as one email listing
five items, while the inbox shows five; the items record the digest that carried them; the
digest is an ordinary delivery (leased, retried, dead-lettered)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.channels.base import ProviderOutcome
from herald.config import Settings
from herald.db import schema as s
from herald.digests import service as digests
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.secrets.vault import Vault
from tests import seed
from tests.integration.test_delivery import ScriptedProvider, deliver, delivery_rows
from tests.integration.test_fanout import run_to_completion, send_event


@pytest.fixture
def delivery_settings(settings: Settings, tmp_path: Any) -> Settings:
    return settings.model_copy(update={"max_attempts": 2, "data_dir": tmp_path})


async def family(engine: AsyncEngine, tenant: str, *, locale: str = "en") -> None:
    async with engine.begin() as conn:
        group_id = await seed.group(conn, tenant, "class-7a")
        pupil = await seed.person(conn, tenant, "s0", full_name="Pupil")
        parent = await seed.person(
            conn, tenant, "g0", full_name="Sita", email="sita@example.com", locale=locale
        )
        await seed.member(conn, tenant, group_id, pupil.id)
        await seed.guardian(conn, tenant, pupil.id, parent.id)


async def assignments(engine: AsyncEngine, tenant: str, count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        await send_event(
            engine,
            tenant,
            kind="assignment.published",
            channels=["in_app", "email"],
            variables={"title": f"Worksheet {n + 1}", "subject": "Maths", "dueDate": "Friday"},
        )
    await run_to_completion(engine, tenant)


async def window_passes(engine: AsyncEngine, tenant: str) -> None:
    d = s.notification_delivery
    async with engine.begin() as conn:
        await conn.execute(
            update(d)
            .where(d.c.tenant_id == tenant, d.c.status == "held")
            .values(queued_at=d.c.queued_at - s.text("interval '61 minutes'"))
        )


async def inbox_rows(engine: AsyncEngine, tenant: str) -> int:
    d = s.notification_delivery
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(d.c.id).where(
                d.c.tenant_id == tenant, d.c.channel == "in_app", d.c.status == "delivered"
            )
        )
        return len(rows.all())


async def test_five_assignments_make_one_digest_email_and_five_inbox_rows(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    await family(engine, tenant)
    await assignments(engine, tenant, 5)
    held = await delivery_rows(engine, tenant)
    assert [r["status"] for r in held] == ["held"] * 5
    assert await inbox_rows(engine, tenant) == 5

    # Inside the window nothing goes out: not the sweeper, not the email worker.
    assert (await digests.sweep(engine, SAMPLE_REGISTRY)).digests == 0
    provider = ScriptedProvider("email")
    assert await deliver(engine, provider, vault, delivery_settings, tenant)() == 0

    await window_passes(engine, tenant)
    report = await digests.sweep(engine, SAMPLE_REGISTRY)
    assert (report.digests, report.items, report.released) == (1, 5, 0)
    assert await deliver(engine, provider, vault, delivery_settings, tenant)() == 1
    [message] = provider.messages
    assert message.to == "sita@example.com"
    assert message.title == "5 new notifications"
    for n in range(1, 6):
        assert f"• New Maths assignment — Worksheet {n} is due on Friday." in message.body
    assert "Dear Sita" in message.body

    rows = await delivery_rows(engine, tenant)
    [digest] = [r for r in rows if r["status"] == "sent"]
    items = [r for r in rows if r["status"] == "digested"]
    assert len(items) == 5 and all(r["digest_delivery_id"] == digest["id"] for r in items)
    assert await inbox_rows(engine, tenant) == 5
    assert (await digests.sweep(engine, SAMPLE_REGISTRY)).digests == 0  # nothing twice


async def test_nepali_wording_and_a_lone_item_goes_as_itself(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    await family(engine, tenant, locale="ne")
    await assignments(engine, tenant, 1)
    await window_passes(engine, tenant)
    report = await digests.sweep(engine, SAMPLE_REGISTRY)
    assert (report.digests, report.released) == (0, 1)
    provider = ScriptedProvider("email")
    await deliver(engine, provider, vault, delivery_settings, tenant)()
    [alone] = provider.messages
    assert alone.title == "Maths को नयाँ गृहकार्य: Worksheet 1"

    await assignments(engine, tenant, 2, start=1)
    await window_passes(engine, tenant)
    assert (await digests.sweep(engine, SAMPLE_REGISTRY)).digests == 1
    await deliver(engine, provider, vault, delivery_settings, tenant)()
    digest = provider.messages[-1]
    assert digest.title == "2 नयाँ सूचनाहरू" and "प्रिय Sita" in digest.body


async def test_a_digest_is_retried_and_dead_lettered_like_any_delivery(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    await family(engine, tenant)
    await assignments(engine, tenant, 3)
    await window_passes(engine, tenant)
    await digests.sweep(engine, SAMPLE_REGISTRY)
    refusing = ScriptedProvider("email", ProviderOutcome.failure("EMAIL_REJECTED", retryable=False))
    await deliver(engine, refusing, vault, delivery_settings, tenant)()
    [dead] = [r for r in await delivery_rows(engine, tenant) if r["status"] == "dead"]
    async with engine.connect() as conn:
        letters = (
            (
                await conn.execute(
                    select(s.dead_letter.c.job_id).where(s.dead_letter.c.tenant_id == tenant)
                )
            )
            .scalars()
            .all()
        )
    assert letters == [str(dead["public_id"])]
    items = [r for r in await delivery_rows(engine, tenant) if r["status"] == "digested"]
    assert len(items) == 3 and {r["digest_delivery_id"] for r in items} == {dead["id"]}
