"""SQL of the embedded vault: insert, and an atomic take (DELETE … RETURNING)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import delete, func, insert
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


async def take(conn: AsyncConnection, ref_id: str, tenant_id: str) -> bytes | None:
    """Get-and-delete in one statement (R-SECRET-9): a second take of the same ref finds nothing."""
    v = s.secret_vault
    row = (
        await conn.execute(
            delete(v)
            .where(v.c.ref_id == ref_id, v.c.tenant_id == tenant_id, v.c.expires_at > func.now())
            .returning(v.c.ciphertext)
        )
    ).first()
    return bytes(row.ciphertext) if row else None


async def purge_expired(conn: AsyncConnection) -> int:
    result = await conn.execute(
        delete(s.secret_vault).where(s.secret_vault.c.expires_at <= func.now())
    )
    return int(result.rowcount)
