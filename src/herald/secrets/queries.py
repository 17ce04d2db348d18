"""SQL of the embedded vault: insert, an atomic claim (UPDATE … RETURNING) and its release."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import delete, func, insert, or_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import schema as s


async def put(
    conn: AsyncConnection, ref_id: str, tenant_id: str, ciphertext: bytes, ttl_seconds: int
) -> None:
    await conn.execute(
        insert(s.secret_vault).values(
            ref_id=ref_id,
            tenant_id=tenant_id,
            ciphertext=ciphertext,
            expires_at=func.now() + timedelta(seconds=ttl_seconds),
        )
    )


async def claim(conn: AsyncConnection, ref_id: str, tenant_id: str, holder: str) -> bytes | None:
    """Mark the entry as `holder`'s in one statement and return it (R-SECRET-9): the same holder
    may claim it again (a retried read whose first answer was lost); anyone else finds nothing."""
    v = s.secret_vault
    row = (
        await conn.execute(
            update(v)
            .where(
                v.c.ref_id == ref_id,
                v.c.tenant_id == tenant_id,
                v.c.expires_at > func.now(),
                or_(v.c.holder.is_(None), v.c.holder == holder),
            )
            .values(holder=holder)
            .returning(v.c.ciphertext)
        )
    ).first()
    return bytes(row.ciphertext) if row else None


async def release(conn: AsyncConnection, ref_id: str, tenant_id: str, holder: str) -> None:
    v = s.secret_vault
    await conn.execute(
        delete(v).where(v.c.ref_id == ref_id, v.c.tenant_id == tenant_id, v.c.holder == holder)
    )


async def purge_expired(conn: AsyncConnection) -> int:
    result = await conn.execute(
        delete(s.secret_vault).where(s.secret_vault.c.expires_at <= func.now())
    )
    return int(result.rowcount)
