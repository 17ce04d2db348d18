"""Readiness: does each dependency answer, quickly, and is the schema the one the code expects?"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import lru_cache

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald import outages

# A probe that waits longer than this is as good as down: the orchestrator asking wants an answer.
PROBE_TIMEOUT_SECONDS = 2.0


async def ping(conn: AsyncConnection) -> None:
    await conn.execute(text("SELECT 1"))


MIGRATIONS = "migrations"


@lru_cache(maxsize=1)
def code_heads() -> frozenset[str]:
    """The head revision(s) of the migrations shipped with this code."""
    from alembic.script import ScriptDirectory

    from herald.db.migrate import MIGRATIONS as SCRIPTS

    return frozenset(ScriptDirectory(str(SCRIPTS)).get_heads())


@lru_cache(maxsize=1)
def _known_revisions() -> frozenset[str]:
    from alembic.script import ScriptDirectory

    from herald.db.migrate import MIGRATIONS as SCRIPTS

    return frozenset(s.revision for s in ScriptDirectory(str(SCRIPTS)).walk_revisions())


async def schema_state(conn: AsyncConnection) -> str:
    """ "ok", or why the schema is behind the code: a database the code's migrations have not all
    been applied to. A database at a revision this code does not know is newer (a rolling
    upgrade ran the migrations first) and is fine."""
    exists = (
        await conn.execute(text("SELECT to_regclass('alembic_version') IS NOT NULL"))
    ).scalar()
    if not exists:
        return "behind: no migration applied (run `herald migrate`)"
    found = set(
        (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalars().all()
    )
    heads = code_heads()
    if found & heads or (found and not found <= _known_revisions()):
        return "ok"
    at = ", ".join(sorted(found)) or "none"
    return f"behind: database at {at}, code at {', '.join(sorted(heads))} (run `herald migrate`)"


async def check(
    engine: AsyncEngine, redis_ping: Callable[[], Awaitable[None]] | None = None
) -> dict[str, str]:
    """{"database": "ok" | "down: …", "migrations": "ok" | "behind: …", "redis": …} — redis only
    when `redis_ping` is given (the caller's vault lives there); migrations only when the
    database answers."""

    async def database() -> None:
        async with engine.connect() as conn:
            await ping(conn)

    checks = {outages.DATABASE: await _probe(outages.DATABASE, database())}
    if checks[outages.DATABASE] == "ok":
        try:
            async with engine.connect() as conn:
                checks[MIGRATIONS] = await asyncio.wait_for(
                    schema_state(conn), timeout=PROBE_TIMEOUT_SECONDS
                )
        except Exception as exc:
            checks[MIGRATIONS] = f"unknown: {outages.describe(exc)}"
    if redis_ping is not None:
        checks[outages.REDIS] = await _probe(outages.REDIS, redis_ping())
    return checks


async def _probe(name: str, probe: Awaitable[None]) -> str:
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
