"""Readiness: does each dependency answer, quickly?"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald.runtime import outages
from herald.secrets.vault import Vault

# A probe that waits longer than this is as good as down: the orchestrator asking wants an answer.
PROBE_TIMEOUT_SECONDS = 2.0


async def ping(conn: AsyncConnection) -> None:
    await conn.execute(text("SELECT 1"))


async def check(engine: AsyncEngine, vault: Vault) -> dict[str, str]:
    """{"database": "ok" | "down: …", "redis": …} — redis only when the vault lives there."""

    async def database() -> None:
        async with engine.connect() as conn:
            await ping(conn)

    checks = {outages.DATABASE: await _probe(outages.DATABASE, database())}
    if vault.remote:
        checks[outages.REDIS] = await _probe(outages.REDIS, vault.ping())
    return checks


async def _probe(name: str, probe: Coroutine[Any, Any, None]) -> str:
    try:
        await asyncio.wait_for(probe, timeout=PROBE_TIMEOUT_SECONDS)
    except TimeoutError:
        outages.state(name).failed(TimeoutError(f"no answer within {PROBE_TIMEOUT_SECONDS:g} s"))
        return f"down: no answer within {PROBE_TIMEOUT_SECONDS:g} s"
    except Exception as exc:
        outages.state(name).failed(exc)
        return f"down: {outages.describe(exc)}"
    outages.state(name).succeeded()
    return "ok"
