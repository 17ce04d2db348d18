"""SQL of the scheduler's lease (R-OPS-13).

One row per (scope, lease name). `acquire` is one conditional upsert: it inserts the row, renews
it for its holder, or takes it over once expired — and answers a row only to the holder, so two
schedulers can never both believe they hold it at the same database instant.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import case, delete, func
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import schema as s

lease = s.scheduler_lease


async def acquire(conn: AsyncConnection, scope: str, name: str, holder: str, seconds: int) -> bool:
    """Take, renew or take over the lease for `seconds`; True when `holder` holds it now."""
    expires = func.now() + timedelta(seconds=seconds)
    stmt = insert(lease).values(tenant_id=scope, name=name, holder=holder, expires_at=expires)
    upsert = stmt.on_conflict_do_update(
        index_elements=[lease.c.tenant_id, lease.c.name],
        set_={
            "holder": stmt.excluded.holder,
            "expires_at": stmt.excluded.expires_at,
            # A renewal keeps the time the holder first took it; a takeover starts afresh.
            "acquired_at": case(
                (lease.c.holder == stmt.excluded.holder, lease.c.acquired_at),
                else_=func.now(),
            ),
        },
        where=(lease.c.holder == stmt.excluded.holder) | (lease.c.expires_at <= func.now()),
    ).returning(lease.c.holder)
    return (await conn.execute(upsert)).first() is not None


async def release(conn: AsyncConnection, scope: str, name: str, holder: str) -> bool:
    """Give the lease up (a clean stop), so another scheduler takes it at its next tick."""
    stmt = delete(lease).where(
        lease.c.tenant_id == scope, lease.c.name == name, lease.c.holder == holder
    )
    return (await conn.execute(stmt)).rowcount == 1
