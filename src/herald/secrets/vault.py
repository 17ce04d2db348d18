"""Where a secret waits between the host's stash and the channel's send: Redis or an embedded table.

Both are single-read: the take is an atomic get-and-delete (Redis GETDEL, or DELETE … RETURNING),
so a repeated delivery cannot reuse a token (R-SECRET-9), and both expire on their own
(R-SECRET-8). Redis keeps nothing in PostgreSQL (R-SECRET-10); the embedded table is UNLOGGED,
encrypted with a Fernet key that lives outside the database, and purged when expired.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Protocol

from cryptography.fernet import Fernet, InvalidToken
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.config import Settings
from herald.secrets import queries


class Vault(Protocol):
    async def put(
        self, tenant_id: str, ref_id: str, values: dict[str, str], ttl_seconds: int
    ) -> None: ...

    async def take(self, tenant_id: str, ref_id: str) -> dict[str, str] | None: ...

    async def aclose(self) -> None: ...


class RedisVault:
    """HERALD_REDIS_URL set: SET … EX ttl, then GETDEL."""

    def __init__(self, url: str) -> None:
        import redis.asyncio as redis

        self._redis = redis.from_url(url)

    @staticmethod
    def _key(tenant_id: str, ref_id: str) -> str:
        return f"herald:secret:{tenant_id}:{ref_id}"

    async def put(
        self, tenant_id: str, ref_id: str, values: dict[str, str], ttl_seconds: int
    ) -> None:
        await self._redis.set(self._key(tenant_id, ref_id), json.dumps(values), ex=ttl_seconds)

    async def take(self, tenant_id: str, ref_id: str) -> dict[str, str] | None:
        raw = await self._redis.getdel(self._key(tenant_id, ref_id))
        return _decode(raw) if raw is not None else None

    async def aclose(self) -> None:
        await self._redis.aclose()


class TableVault:
    """No Redis: the UNLOGGED secret_vault table, Fernet-encrypted, delete-on-read."""

    def __init__(self, engine: AsyncEngine, key: bytes) -> None:
        self._engine = engine
        self._fernet = Fernet(key)

    async def put(
        self, tenant_id: str, ref_id: str, values: dict[str, str], ttl_seconds: int
    ) -> None:
        ciphertext = self._fernet.encrypt(json.dumps(values).encode())
        # Its own transaction: the secret must be readable by a worker as soon as the host's
        # event commits, whatever the host does with its own transaction.
        async with self._engine.begin() as conn:
            await queries.put(conn, ref_id, tenant_id, ciphertext, ttl_seconds)

    async def take(self, tenant_id: str, ref_id: str) -> dict[str, str] | None:
        async with self._engine.begin() as conn:
            ciphertext = await queries.take(conn, ref_id, tenant_id)
        if ciphertext is None:
            return None
        try:
            return _decode(self._fernet.decrypt(ciphertext))
        except InvalidToken:
            return None  # encrypted under another key: as good as gone

    async def aclose(self) -> None:
        return None


def _decode(raw: bytes | str) -> dict[str, str] | None:
    loaded = json.loads(raw)
    if not isinstance(loaded, dict):
        return None
    return {str(k): str(v) for k, v in loaded.items()}


def vault_key(settings: Settings) -> bytes:
    """HERALD_VAULT_KEY, or a key file under the data dir (created 0600 on first use)."""
    if settings.vault_key:
        return settings.vault_key.encode()
    path = Path(settings.data_dir) / "vault.key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(Fernet.generate_key())
    return path.read_bytes().strip()


def build_vault(settings: Settings, engine: AsyncEngine) -> Vault:
    if settings.redis_url:
        return RedisVault(settings.redis_url)
    return TableVault(engine, vault_key(settings))
