"""Which provider sends a delivery: the deployment's, or its tenant's own (issue 46).

A tenant with a provider account (herald.admin.providers) has its channel's provider built from
the deployment's Settings with the account laid over them (herald.channels.accounts.overlay),
once, and kept per (tenant, channel) with the account versions it was built from. A tenant
without an account — and every tenant of a deployment that has none — uses the process's own
providers, looked up in a dict: the default path does no extra work per delivery or per batch.

Invalidation, without a restart. Each change to an account raises its version and notifies
`herald_provider_account` (PostgreSQL delivers it on commit); the worker's LISTEN connection
marks the cache stale (`notified`), and the next batch of any channel re-reads the versions
(one small query over the table, as the owner) before it picks providers. A rebuilt tenant's
old provider is closed a while later, once no send can still hold it. A lost notification
(the LISTEN connection was down) delays a change until the versions are read anyway, every
REFRESH_SECONDS. So a change reaches the next batch claimed after its commit is delivered to
the worker; a batch already claimed finishes with the provider it started with.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from herald.channels import accounts
from herald.channels.base import Provider
from herald.channels.providers import build_channel
from herald.config import Settings
from herald.delivery import queries
from herald.secrets.vault import key_ring

log = logging.getLogger(__name__)

# How stale the versions may get when no notification arrives (the LISTEN connection was lost,
# or a process runs batches without one).
REFRESH_SECONDS = 30.0
# A replaced provider is closed this long after it was replaced: a send that picked it up just
# before has finished by then (provider timeouts are at most 30 s connect + 60 s read).
RETIRE_SECONDS = 120.0


class TenantProviders:
    """The providers of the tenants holding provider accounts, for one worker process."""

    def __init__(
        self,
        settings: Settings,
        defaults: Mapping[str, Provider],
        *,
        refresh_seconds: float = REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.defaults = dict(defaults)
        self.refresh_seconds = refresh_seconds
        self._clock = clock
        self._stale = True
        self._read_at: float | None = None
        self._versions: dict[tuple[str, str], int] = {}
        # tenant → provider → its fields (plain and secret merged), for tenants with accounts.
        self._accounts: dict[str, dict[str, dict[str, Any]]] = {}
        self._built: dict[tuple[str, str], Provider] = {}
        self._retired: list[tuple[float, Provider]] = []
        self._closing: set[asyncio.Future[None]] = set()
        self._lock = asyncio.Lock()
        # Set on every notification; tests and the runtime may wait on it.
        self.changed = asyncio.Event()

    def notified(self, _payload: str = "") -> None:
        """A provider account changed somewhere (the NOTIFY's payload names the tenant)."""
        self._stale = True
        self.changed.set()

    def _due(self) -> bool:
        if self._stale or self._read_at is None:
            return True
        return self._clock() - self._read_at >= self.refresh_seconds

    async def refresh(self, engine: AsyncEngine) -> None:
        """Re-read the versions when stale or due; rebuild what changed. Cheap when nothing did:
        one statement returning (tenant, provider, version) per account."""
        if not self._due():
            self._close_retired(force=False)
            return
        async with self._lock:
            if not self._due():
                return
            self._stale = False
            async with engine.connect() as conn:
                versions = await queries.provider_account_versions(conn)
                changed = sorted(
                    {key[0] for key, v in versions.items() if self._versions.get(key) != v}
                    | {key[0] for key in self._versions if key not in versions}
                )
                rows = await queries.provider_accounts_of(conn, changed) if changed else []
            self._read_at = self._clock()
            self._versions = versions
            ring = key_ring(self.settings) if rows else None
            for tenant in changed:
                self._accounts.pop(tenant, None)
                for key in [k for k in self._built if k[0] == tenant]:
                    replaced = self._built.pop(key)
                    if replaced is not self.defaults.get(key[1]):
                        self._retired.append((self._clock(), replaced))
            for row in rows:
                fields = dict(row["settings"])
                if ring is not None and row["secret_ciphertext"]:
                    try:
                        fields |= accounts.decrypt(ring, row["secret_ciphertext"])
                    except Exception:
                        # Under a key outside the ring: the tenant's plain fields still apply,
                        # and the deployment's secret with them. Said without the tenant's data.
                        log.warning(
                            "provider account %s of tenant %s cannot be decrypted with the "
                            "vault key ring; its secret fields are ignored",
                            row["provider"],
                            row["tenant_id"],
                        )
                self._accounts.setdefault(row["tenant_id"], {})[row["provider"]] = fields
            if changed:
                log.info("provider accounts changed for %d tenant(s)", len(changed))
        self._close_retired(force=False)

    def has_accounts(self) -> bool:
        return bool(self._accounts)

    def provider_for(self, tenant_id: str, channel: str) -> Provider:
        """The tenant's provider of `channel`: its own when one of its accounts touches the
        channel, else the deployment's."""
        default = self.defaults[channel]
        held = self._accounts.get(tenant_id)
        if not held or not any(accounts.SPECS[p].channel == channel for p in held):
            return default
        key = (tenant_id, channel)
        built = self._built.get(key)
        if built is None:
            of_channel = {p: f for p, f in held.items() if accounts.SPECS[p].channel == channel}
            try:
                built = build_channel(accounts.overlay(self.settings, of_channel), channel)
            except Exception as exc:
                # A provider that cannot be built (a Web Push key file gone bad) must not fail
                # every batch holding this tenant's rows: the deployment's sends them, until the
                # account changes. Said once per version, without the account's values.
                log.warning(
                    "tenant %s: its own %s provider could not be built (%s); the deployment's "
                    "is used until its provider account changes",
                    tenant_id,
                    channel,
                    type(exc).__name__,
                )
                built = default
            self._built[key] = built
        return built

    def providers_of(self, tenant_ids: Sequence[str], channel: str) -> dict[str, Provider]:
        """provider_for for each tenant that has one of its own (others use the default)."""
        if not self._accounts:
            return {}
        found: dict[str, Provider] = {}
        for tenant in tenant_ids:
            provider = self.provider_for(tenant, channel)
            if provider is not self.defaults[channel]:
                found[tenant] = provider
        return found

    def configured_pairs(self) -> list[tuple[str, str]]:
        """(tenant, channel) where the deployment's provider cannot send but the tenant's can:
        the tenant's skipped_unconfigured rows of that channel are for backfill to re-drive."""
        pairs: list[tuple[str, str]] = []
        for tenant in sorted(self._accounts):
            for channel in sorted(accounts.CHANNELS):
                default = self.defaults.get(channel)
                if default is None or (default.is_configured() and not default.is_mock):
                    continue
                own = self.provider_for(tenant, channel)
                if own is not default and own.is_configured() and not own.is_mock:
                    pairs.append((tenant, channel))
        return pairs

    def _close_retired(self, *, force: bool) -> None:
        now = self._clock()
        keep: list[tuple[float, Provider]] = []
        for retired_at, provider in self._retired:
            if force or now - retired_at >= RETIRE_SECONDS:
                closing = asyncio.ensure_future(_close(provider))
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
            else:
                keep.append((retired_at, provider))
        self._retired = keep

    async def aclose(self) -> None:
        own = [p for k, p in self._built.items() if p is not self.defaults.get(k[1])]
        providers = [p for _, p in self._retired] + own
        self._retired, self._built = [], {}
        for provider in providers:
            await _close(provider)


async def _close(provider: Provider) -> None:
    try:
        await provider.aclose()
    except Exception:
        log.warning("closing a tenant's %s provider failed", provider.name, exc_info=True)
