"""Secret references: the host stashes a value and passes only `{"secretRef": "<type>:<id>"}`.

Herald resolves the reference at send time without knowing how the value was produced
(R-SECRET-2): a resolver registered for the reference's prefix (R-SECRET-12), else the vault
(R-SECRET-13). The resolved values live in memory for that one send only (R-SECRET-4) and are
never logged — a failure logs the reference, never the value (R-SECRET-7).
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping

from herald import outages
from herald.errors import ConfigurationError, VariablesInvalid
from herald.secrets.vault import Vault

log = logging.getLogger(__name__)

Resolver = Callable[[str, str], Awaitable[Mapping[str, str] | None]]
TYPE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
VALUE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
MAX_VALUES = 10
MAX_VALUE_LENGTH = 4096


class SecretResolvers:
    """Per-process resolvers by prefix; registering a prefix twice raises (R-SECRET-17)."""

    def __init__(self) -> None:
        self._resolvers: dict[str, Resolver] = {}

    def register(self, prefix: str, resolver: Resolver) -> None:
        if prefix in self._resolvers:
            raise ConfigurationError(f"a secret resolver for {prefix!r} is already registered")
        self._resolvers[prefix] = resolver

    def get(self, prefix: str) -> Resolver | None:
        return self._resolvers.get(prefix)


# The process-wide registry modules register into at boot.
RESOLVERS = SecretResolvers()


async def stash(
    vault: Vault, *, tenant_id: str, type: str, values: Mapping[str, str], ttl_seconds: int
) -> str:
    """Put values in the vault and return the reference to pass as `secretRef`."""
    if not TYPE.match(type):
        raise VariablesInvalid(
            "a secret type is lower-case letters, digits and _ (e.g. password_reset)"
        )
    if not values or len(values) > MAX_VALUES:
        raise VariablesInvalid(f"a secret carries 1 to {MAX_VALUES} values")
    for name, value in values.items():
        if (
            not VALUE_NAME.match(name)
            or not isinstance(value, str)
            or len(value) > MAX_VALUE_LENGTH
        ):
            raise VariablesInvalid("secret values are short strings under simple names")
    ref_id = secrets.token_urlsafe(18)
    await vault.put(tenant_id, ref_id, dict(values), ttl_seconds)
    return f"{type}:{ref_id}"


class SecretVaultUnavailable(Exception):
    """The vault (or a resolver) did not answer: the secret may still be there; try again later."""


async def resolve(
    vault: Vault,
    tenant_id: str,
    ref: str,
    *,
    holder: str,
    resolvers: SecretResolvers = RESOLVERS,
) -> dict[str, str] | None:
    """The values behind `ref`, claimed for `holder` (a delivery), or None when they are gone
    (expired, used by someone else, flushed: R-SECRET-11, R-SECRET-14). A vault that does not
    answer raises SecretVaultUnavailable instead: a Redis restart must delay a reset email, not
    drop it — and since a claim is safe to repeat, the retry finds the values even when the lost
    read did reach the vault."""
    prefix, _, ref_id = ref.partition(":")
    if not ref_id:
        return None
    try:
        resolver = resolvers.get(prefix)
        if resolver is not None:
            found = await resolver(tenant_id, ref)
        else:
            found = await vault.claim(tenant_id, ref_id, holder)
    except Exception as exc:
        dependency = outages.unavailable(exc)
        if dependency is not None:
            outages.state(dependency).failed(exc)
        else:
            log.error("secret %s could not be resolved (%s); will retry", ref, type(exc).__name__)
        raise SecretVaultUnavailable(ref) from None
    if vault.remote and resolver is None:
        outages.state(outages.REDIS).succeeded()
    if found is None:
        log.warning("secret %s is gone (expired, already used, or the vault was flushed)", ref)
        return None
    return dict(found)


async def release(vault: Vault, tenant_id: str, ref: str, *, holder: str) -> None:
    """Delete `holder`'s claim once its outcome is recorded: nothing may read the secret again.
    A vault that does not answer leaves the claim to expire on its own; only `holder` could read
    it, and its delivery is finished."""
    prefix, _, ref_id = ref.partition(":")
    if not ref_id or RESOLVERS.get(prefix) is not None:
        return
    try:
        await vault.release(tenant_id, ref_id, holder)
    except Exception as exc:
        log.warning(
            "secret %s: claim not released (%s); it expires on its own", ref, outages.describe(exc)
        )
