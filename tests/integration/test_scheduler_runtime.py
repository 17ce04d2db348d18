"""The scheduler process's loop (herald.runtime.scheduler) in-process: failures, stopping."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.config import Settings
from herald.db import schema as s
from herald.kinds import Registry
from herald.runtime.scheduler import run_scheduler
from herald.scheduling import worker as cycle

# Bounds for waits, not expectations: if the loop did not react to `stop`, the long tick below
# would run into them.
BOUND = 20.0


async def test_a_failing_tick_is_logged_and_the_next_one_runs(
    engine: AsyncEngine,
    registry: Registry,
    reminder_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R-OPS-5: a tick that raises is logged at error level and the scheduler goes on ticking."""
    calls = 0
    stop = asyncio.Event()

    async def flaky(*args: Any, **kwargs: Any) -> cycle.TickReport:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("database went away")
        stop.set()
        return cycle.TickReport()

    monkeypatch.setattr(cycle, "run_tick", flaky)
    fast = reminder_settings.model_copy(update={"scheduler_tick_seconds": 0.1})
    with caplog.at_level(logging.ERROR, logger="herald.runtime.scheduler"):
        await asyncio.wait_for(run_scheduler(fast, engine, registry, stop), BOUND)
    assert calls == 2
    assert [r.levelno for r in caplog.records if "tick failed" in r.message] == [logging.ERROR]


async def test_stop_interrupts_the_wait_and_hands_the_lease_back(
    engine: AsyncEngine, registry: Registry, reminder_settings: Settings
) -> None:
    """R-OPS-9, R-OPS-10, R-OPS-11: a stop request interrupts the scheduler's wait at once (the
    tick here is a minute long, far beyond the bound) and it starts no new tick; the leader gives
    its lease back on the way out so another scheduler need not wait for it to expire."""
    async with engine.begin() as conn:
        await conn.execute(s.scheduler_lease.delete())
    slow = reminder_settings.model_copy(
        update={"scheduler_tick_seconds": 60.0, "scheduler_lease_seconds": 600}
    )
    stop = asyncio.Event()
    task = asyncio.create_task(run_scheduler(slow, engine, registry, stop, holder="stopping"))
    while True:  # until the first tick has taken the lease
        async with engine.connect() as conn:
            holders = (await conn.execute(select(s.scheduler_lease.c.holder))).scalars().all()
        if holders:
            break
        await asyncio.sleep(0.05)
    # The reminder lease, and the escalation lease once its step has run (docs/escalation.md).
    assert set(holders) == {"stopping"}
    stop.set()
    await asyncio.wait_for(task, BOUND)
    async with engine.connect() as conn:
        assert (await conn.execute(select(s.scheduler_lease))).all() == []
