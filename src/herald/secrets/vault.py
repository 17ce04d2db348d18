"""Where a secret waits between the host's stash and the channel's send: Redis or an embedded table.

A secret is read by *claiming* it for one delivery: one atomic step moves the entry from the
stash to a claim owned by that delivery and returns it. A second claim by the same delivery gets
the same values back; a claim by anything else finds nothing (R-SECRET-9). The claim is deleted
once the delivery's outcome is recorded (`release`), and both entries expire on their own
(R-SECRET-8).

Why a claim and not a get-and-delete: a read whose answer never arrives — a frozen Redis that
executes the buffered GETDEL when it resumes, a commit whose reply is lost — must be safe to try
again. With GETDEL the retry found the secret gone and a password-reset email was dropped; with a
claim the retry finds its own claim and sends.

Redis keeps nothing in PostgreSQL (R-SECRET-10); the embedded table is UNLOGGED, encrypted with a
Fernet key that lives outside the database, and purged when expired.

The key is a ring (`key_ring`): HERALD_VAULT_KEY encrypts, and it or any of HERALD_VAULT_OLD_KEYS
decrypts, so processes keep reading what an earlier key wrote while `herald vault rotate-key`
re-encrypts it (herald.maintenance.keyrotation).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.config import Settings
from herald.db import tenancy
from herald.secrets import queries

# A Redis that does not answer within this long is treated as unavailable: the API answers 503 and
# the worker retries the delivery later, instead of hanging on redis-py's default (no) timeout.
REDIS_TIMEOUT_SECONDS = 2.0

# Move the stash to the holder's claim (keeping its remaining lifetime) and return it; or, when
# the stash is gone, return the holder's own earlier claim (nil for anyone else). Atomic in Redis.
_CLAIM = """
local value = redis.call('GET', KEYS[1])
if value then
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl < 1 then ttl = tonumber(ARGV[1]) end
  redis.call('SET', KEYS[2], value, 'PX', ttl)
  redis.call('DEL', KEYS[1])
  return value
end
return redis.call('GET', KEYS[2])
"""


class Vault(Protocol):
    # True when the vault is a service of its own (Redis) whose outage readiness must report.
    remote: bool

    async def put(
        self, tenant_id: str, ref_id: str, values: dict[str, str], ttl_seconds: int
    ) -> None: ...

    async def claim(self, tenant_id: str, ref_id: str, holder: str) -> dict[str, str] | None: ...

    async def release(self, tenant_id: str, ref_id: str, holder: str) -> None: ...

    async def ping(self) -> None: ...

    async def aclose(self) -> None: ...


class RedisVault:
    """HERALD_REDIS_URL set: SET … PX ttl, then a claim script, with explicit timeouts."""

    remote = True

    def __init__(self, url: str, *, timeout_seconds: float = REDIS_TIMEOUT_SECONDS) -> None:
        import redis.asyncio as redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        self._redis = redis.from_url(
            url,
            socket_connect_timeout=timeout_seconds,
            socket_timeout=timeout_seconds,
            # No silent retries inside the client: Herald decides (the API answers 503, the
            # worker retries the delivery), and every operation here is safe to repeat anyway.
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
        )

    @staticmethod
    def _key(tenant_id: str, ref_id: str) -> str:
        return f"herald:secret:{tenant_id}:{ref_id}"

    @classmethod
    def _claim_key(cls, tenant_id: str, ref_id: str, holder: str) -> str:
        return f"{cls._key(tenant_id, ref_id)}:claim:{holder}"

    async def put(
        self, tenant_id: str, ref_id: str, values: dict[str, str], ttl_seconds: int
    ) -> None:
        await self._redis.set(self._key(tenant_id, ref_id), json.dumps(values), ex=ttl_seconds)

    async def claim(self, tenant_id: str, ref_id: str, holder: str) -> dict[str, str] | None:
        # EVAL, not EVALSHA: a script cache flushed by a Redis restart must not turn a lost
        # answer into a NOSCRIPT round trip; the script is a few hundred bytes.
        raw = await self._redis.eval(
            _CLAIM,
            2,
            self._key(tenant_id, ref_id),
            self._claim_key(tenant_id, ref_id, holder),
            60_000,
        )
        return _decode(raw) if raw is not None else None

    async def release(self, tenant_id: str, ref_id: str, holder: str) -> None:
        await self._redis.delete(self._claim_key(tenant_id, ref_id, holder))

    async def ping(self) -> None:
        await self._redis.ping()

    async def aclose(self) -> None:
        await self._redis.aclose()


class TableVault:
    """No Redis: the UNLOGGED secret_vault table, Fernet-encrypted; a claim marks the row with its
    holder, a release deletes it."""

    remote = False

    def __init__(self, engine: AsyncEngine, key: bytes, old_keys: Sequence[bytes] = ()) -> None:
        self._engine = engine
        self._fernet = MultiFernet([Fernet(k) for k in (key, *old_keys)])

    async def put(
        self, tenant_id: str, ref_id: str, values: dict[str, str], ttl_seconds: int
    ) -> None:
        ciphertext = self._fernet.encrypt(json.dumps(values).encode())
        # Its own transaction: the secret must be readable by a worker as soon as the host's
        # event commits, whatever the host does with its own transaction.
        async with self._engine.begin() as conn:
            await tenancy.enter_tenant(conn, tenant_id)
            await queries.put(conn, ref_id, tenant_id, ciphertext, ttl_seconds)

    async def claim(self, tenant_id: str, ref_id: str, holder: str) -> dict[str, str] | None:
        async with self._engine.begin() as conn:
            await tenancy.enter_tenant(conn, tenant_id)
            ciphertext = await queries.claim(conn, ref_id, tenant_id, holder)
        if ciphertext is None:
            return None
        try:
            return _decode(self._fernet.decrypt(ciphertext))
        except InvalidToken:
            return None  # encrypted under a key outside the ring: as good as gone

    async def release(self, tenant_id: str, ref_id: str, holder: str) -> None:
        async with self._engine.begin() as conn:
            await tenancy.enter_tenant(conn, tenant_id)
            await queries.release(conn, ref_id, tenant_id, holder)

    async def ping(self) -> None:
        return None  # the database's own probe covers it

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
        _create_key_file(path)
    return path.read_bytes().strip()


def old_vault_keys(settings: Settings) -> list[bytes]:
    """HERALD_VAULT_OLD_KEYS: the keys still accepted for reading, newest first."""
    return [key.encode() for key in settings.vault_old_key_list]


def key_ring(settings: Settings) -> MultiFernet:
    """Encrypt under the primary key (HERALD_VAULT_KEY or the key file); decrypt under it or any
    old key, so a rotation in progress never makes a stored secret unreadable."""
    return MultiFernet([Fernet(k) for k in (vault_key(settings), *old_vault_keys(settings))])


def _create_key_file(path: Path) -> None:
    """Write a new key beside `path`, then link it into place: `herald api` and `herald worker`
    started together on a fresh data dir both get here, and the one that loses must read the
    winner's whole key, never fail on the name or read a file still being written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(prefix=".vault.key.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:  # mkstemp creates it 0600
            handle.write(Fernet.generate_key())
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(staging, path)
    finally:
        os.unlink(staging)


def build_vault(settings: Settings, engine: AsyncEngine) -> Vault:
    if settings.redis_url:
        return RedisVault(settings.redis_url)
    return TableVault(engine, vault_key(settings), old_vault_keys(settings))
