"""Rotating the vault key: re-encrypt every stored ciphertext from the old key to the new one.

Three columns hold ciphertext under the vault key: `secret_vault.ciphertext` (the embedded
vault's stashed secrets), `webhook_endpoint.secret_ciphertext` (the webhook signing secrets) and
`notification_provider_account.secret_ciphertext` (tenants' provider passwords, keys and
tokens). The rotation reads all three across every tenant, as the schema owner (herald.db.tenancy), and locks
the rows it read until its one transaction ends.

Each ciphertext is sorted three ways: already under the new key (skipped, so a second run, or
one after a crash, finishes the job and changes nothing else); readable under an old key
(re-encrypted under the new one, keeping its Fernet timestamp: `MultiFernet.rotate`); readable
under neither. A single one of the last kind refuses the whole rotation before any row is
written: an old key that does not open the stored secrets is a wrong key, and re-encrypting the
rest would leave the operator with two keys to keep and no way to tell which row needs which.

No key and no plaintext ever reaches a message or a log line: a refusal names the tenant and the
endpoint's public id of what it could not read, never its content.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.errors import ConfigurationError
from herald.maintenance import queries
from herald.maintenance.queries import StoredCiphertext

log = logging.getLogger(__name__)

# How many unreadable webhook endpoints a refusal names; the rest are counted.
NAMED_UNREADABLE = 10


class VaultKeyInvalid(ConfigurationError):
    """A vault key given to the rotation is missing or is not a Fernet key (urlsafe base64 of
    32 bytes); nothing was changed."""

    code = "VAULT_KEY_INVALID"


class VaultKeyMismatch(ConfigurationError):
    """Stored secrets decrypt under neither the old key nor the new one; nothing was changed."""

    code = "VAULT_KEY_MISMATCH"


@dataclass(frozen=True)
class RotationReport:
    """What one rotation did: secrets re-encrypted, per column, and those already under the new
    key."""

    vault_secrets: int
    webhook_secrets: int
    already_rotated: int
    provider_secrets: int = 0

    @property
    def re_encrypted(self) -> int:
        return self.vault_secrets + self.webhook_secrets + self.provider_secrets


def parse_key(value: str | None, source: str) -> Fernet:
    """One Fernet key from `source` (an environment variable's name, for the message)."""
    if not value or not value.strip():
        raise VaultKeyInvalid(f"{source} is not set: give the vault key there")
    try:
        return Fernet(value.strip())
    except (ValueError, TypeError):
        # The variable's name, never its value.
        raise VaultKeyInvalid(
            f"{source} is not a Fernet key (urlsafe base64 of 32 bytes)"
        ) from None


def parse_keys(value: str | None, source: str) -> list[Fernet]:
    """One or more comma-separated Fernet keys from `source`."""
    pieces = [piece.strip() for piece in (value or "").split(",") if piece.strip()]
    if not pieces:
        raise VaultKeyInvalid(f"{source} is not set: give the old vault key (or keys) there")
    return [
        parse_key(piece, f"{source} (entry {position})" if len(pieces) > 1 else source)
        for position, piece in enumerate(pieces, start=1)
    ]


def _same_key(a: Fernet, b: Fernet) -> bool:
    # Two Fernet objects of the same key decrypt each other's tokens; comparing a token is the
    # public way to tell without reaching into the key bytes.
    try:
        b.decrypt(a.encrypt(b"herald-key-probe"))
    except InvalidToken:
        return False
    return True


@dataclass
class _Sorted:
    changes: dict[object, bytes]
    already: int
    unreadable: list[StoredCiphertext]


def _sort(rows: Sequence[StoredCiphertext], new: Fernet, ring: MultiFernet) -> _Sorted:
    out = _Sorted({}, 0, [])
    for row in rows:
        try:
            new.decrypt(row.ciphertext)
        except InvalidToken:
            pass
        else:
            out.already += 1
            continue
        try:
            out.changes[row.key] = ring.rotate(row.ciphertext)
        except InvalidToken:
            out.unreadable.append(row)
    return out


def _refusal(
    vault: Sequence[StoredCiphertext],
    webhooks: Sequence[StoredCiphertext],
    accounts: Sequence[StoredCiphertext] = (),
) -> str:
    parts = []
    if accounts:
        named = ", ".join(f"{r.tenant_id}/{r.label}" for r in accounts[:NAMED_UNREADABLE])
        more = len(accounts) - NAMED_UNREADABLE
        parts.append(
            f"{len(accounts)} provider account secret(s) (tenant/provider: {named}"
            + (f", and {more} more" if more > 0 else "")
            + ")"
        )
    if webhooks:
        named = ", ".join(f"{r.tenant_id}/{r.label}" for r in webhooks[:NAMED_UNREADABLE])
        more = len(webhooks) - NAMED_UNREADABLE
        parts.append(
            f"{len(webhooks)} webhook signing secret(s) (tenant/endpoint: {named}"
            + (f", and {more} more" if more > 0 else "")
            + ")"
        )
    if vault:
        tenants = len({r.tenant_id for r in vault})
        parts.append(f"{len(vault)} vault secret(s) in {tenants} tenant(s)")
    return (
        f"{' and '.join(parts)} decrypt under neither the old key nor the new one, so the old "
        "key is probably wrong; nothing was changed. A webhook endpoint whose key is lost for "
        "good gets a new secret from POST /v1/admin/webhooks/{id}/rotate-secret."
    )


async def rotate(conn: AsyncConnection, old: Sequence[Fernet], new: Fernet) -> RotationReport:
    """Re-encrypt every stored ciphertext readable under `old` under `new`, in the caller's
    transaction (the caller commits). Raises VaultKeyMismatch, having written nothing, when
    any live ciphertext is readable under neither."""
    if not old:
        raise VaultKeyInvalid("no old vault key was given")
    if any(_same_key(key, new) for key in old):
        raise VaultKeyInvalid("the new vault key is also among the old keys: nothing to rotate")
    # The new key first: rotate() decrypts with any key of the ring, encrypts with the first.
    ring = MultiFernet([new, *old])
    vault = _sort(await queries.lock_vault_ciphertexts(conn), new, ring)
    webhooks = _sort(await queries.lock_webhook_ciphertexts(conn), new, ring)
    accounts = _sort(await queries.lock_provider_account_ciphertexts(conn), new, ring)
    if vault.unreadable or webhooks.unreadable or accounts.unreadable:
        raise VaultKeyMismatch(_refusal(vault.unreadable, webhooks.unreadable, accounts.unreadable))
    await queries.set_vault_ciphertexts(conn, vault.changes)
    await queries.set_webhook_ciphertexts(conn, webhooks.changes)
    await queries.set_provider_account_ciphertexts(conn, accounts.changes)
    report = RotationReport(
        vault_secrets=len(vault.changes),
        webhook_secrets=len(webhooks.changes),
        already_rotated=vault.already + webhooks.already + accounts.already,
        provider_secrets=len(accounts.changes),
    )
    log.info(
        "vault key rotation: %d secrets re-encrypted (%d webhook, %d vault, %d provider "
        "account), %d already rotated",
        report.re_encrypted,
        report.webhook_secrets,
        report.vault_secrets,
        report.provider_secrets,
        report.already_rotated,
    )
    return report
