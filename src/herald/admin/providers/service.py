"""A tenant's own provider accounts (issue 46): read, set and clear them.

Each account overrides some fields of one provider's deployment settings for one tenant
(herald.channels.accounts says which). Secret fields are write-only: stored only encrypted with
the vault key, answered only as set or not, recorded in the audit only as changed or not. A
refused request stores nothing and its error never quotes a value the caller sent.

Permissions: NotificationProvider_READ to list and read, NotificationProvider_WRITE to set and
clear. A caller without them is told an account does not exist (404, R-SEC-7); the list
answers empty. Every change is audited in the same transaction as the write, and notifies the
workers, whose cache of built providers then rebuilds this tenant's (herald.delivery.accounts).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.admin.providers import queries
from herald.admin.providers.schemas import (
    MASK,
    ProviderAccount,
    ProviderAccountIn,
    ProviderAccountList,
    SecretState,
)
from herald.audit.service import actor_label, record_audit
from herald.auth.service import Operator, require_permission
from herald.channels import accounts, destination
from herald.config import Settings
from herald.errors import (
    ProviderAccountNotFound,
    ProviderAccountVersionConflict,
    ProviderHostForbidden,
    ProviderHostUnresolvable,
    ProviderSettingsInvalid,
)
from herald.secrets.vault import key_ring

READ = "NotificationProvider_READ"
WRITE = "NotificationProvider_WRITE"
ENTITY = "notification_provider_account"


async def list_accounts(
    conn: AsyncConnection, operator: Operator, settings: Settings
) -> ProviderAccountList:
    if not operator.may(READ):
        return ProviderAccountList(items=[])
    rows = await queries.list_accounts(conn, operator.tenant_id)
    return ProviderAccountList(items=[_out(settings, row) for row in rows])


async def get_account(
    conn: AsyncConnection, operator: Operator, settings: Settings, provider: str
) -> ProviderAccount:
    require_permission(operator, READ)
    row = await queries.get_account(conn, operator.tenant_id, provider)
    if row is None:
        raise ProviderAccountNotFound()
    return _out(settings, row)


def parse_settings(provider: str, given: Mapping[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """(validated fields by field name, secret fields explicitly cleared with null). The refusal
    names each bad field and the rule it broke, never the value."""
    spec = accounts.SPECS[provider]
    try:
        account = spec.schema_.model_validate(dict(given))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}"
            for err in exc.errors(include_input=False, include_url=False, include_context=False)
        )
        raise ProviderSettingsInvalid(f"settings.{problems}") from None
    cleared = {
        field
        for field in spec.secrets
        if field in account.model_fields_set and getattr(account, field) is None
    }
    plain, secret = accounts.split(spec, account)
    return {**plain, **secret}, cleared


async def put_account(
    conn: AsyncConnection,
    operator: Operator,
    settings: Settings,
    provider: str,
    data: ProviderAccountIn,
) -> ProviderAccount:
    require_permission(operator, WRITE)
    fields, cleared = parse_settings(provider, data.settings)
    spec = accounts.SPECS[provider]
    host = fields.get("host")
    if provider == "smtp" and isinstance(host, str):
        port = int(fields.get("port") or settings.smtp_port)
        refusal = await destination.host_refusal(host, port, settings)
        if refusal == "unresolvable":
            raise ProviderHostUnresolvable()
        if refusal == "forbidden":
            raise ProviderHostForbidden()
    ring = key_ring(settings)
    existing = await queries.get_account(conn, operator.tenant_id, provider, lock=True)
    if data.version is not None and (existing is None or existing["version"] != data.version):
        raise ProviderAccountVersionConflict()
    stored_secret = accounts.decrypt(ring, existing["secret_ciphertext"]) if existing else {}
    secret = {
        field: value
        for field, value in stored_secret.items()
        if field in spec.secrets and field not in cleared
    }
    secret |= {f: v for f, v in fields.items() if f in spec.secrets}
    plain = {f: v for f, v in fields.items() if f not in spec.secrets}
    values = {
        "settings": plain,
        "secret_ciphertext": accounts.encrypt(ring, secret),
        "updated_by": actor_label(operator),
    }
    if existing is None:
        row = await queries.insert_account(conn, operator.tenant_id, provider, values)
        if row is None:
            raise ProviderAccountVersionConflict()
        action = "create"
    else:
        row = await queries.update_account(
            conn, operator.tenant_id, provider, existing["version"], values
        )
        if row is None:
            raise ProviderAccountVersionConflict()
        action = "update"
    before_plain = dict(existing["settings"]) if existing else {}
    await record_audit(
        conn,
        operator,
        action,
        ENTITY,
        provider,
        _changes(spec, before_plain, stored_secret, plain, secret),
    )
    return _out(settings, row)


async def delete_account(conn: AsyncConnection, operator: Operator, provider: str) -> None:
    require_permission(operator, WRITE)
    existing = await queries.get_account(conn, operator.tenant_id, provider, lock=True)
    if existing is None or not await queries.delete_account(conn, operator.tenant_id, provider):
        raise ProviderAccountNotFound()
    await record_audit(
        conn,
        operator,
        "delete",
        ENTITY,
        provider,
        {"settings": dict(existing["settings"]), "version": existing["version"]},
    )


def _changes(
    spec: accounts.ProviderSpec,
    before_plain: Mapping[str, Any],
    before_secret: Mapping[str, str],
    after_plain: Mapping[str, Any],
    after_secret: Mapping[str, str],
) -> dict[str, dict[str, Any]]:
    """Per-field before/after of the plain fields; a secret field only as set or not, and whether
    it changed — never its value, nor anything derived from it."""
    changes: dict[str, dict[str, Any]] = {}
    for field in sorted(set(before_plain) | set(after_plain)):
        if before_plain.get(field) != after_plain.get(field):
            changes[accounts.field_alias(spec, field)] = {
                "before": before_plain.get(field),
                "after": after_plain.get(field),
            }
    for field in sorted(spec.secrets):
        old, new = before_secret.get(field), after_secret.get(field)
        if old != new:
            changes[accounts.field_alias(spec, field)] = {
                "before": "set" if old is not None else None,
                "after": "set" if new is not None else None,
            }
    return changes


def _out(settings: Settings, row: RowMapping) -> ProviderAccount:
    spec = accounts.SPECS[row["provider"]]
    try:
        secret = accounts.decrypt(key_ring(settings), row["secret_ciphertext"])
    except Exception:
        secret = {}  # under a key outside the ring: as good as unset
    return ProviderAccount(
        provider=spec.name,
        channel=spec.channel,
        settings={
            accounts.field_alias(spec, field): value
            for field, value in sorted(dict(row["settings"]).items())
        },
        secrets={
            accounts.field_alias(spec, field): SecretState(
                set=field in secret, masked=MASK if field in secret else None
            )
            for field in sorted(spec.secrets)
        },
        version=row["version"],
        updated_at=row["updated_at"],
        updated_by=row["updated_by"],
    )


async def forget_operator(
    conn: AsyncConnection, tenant_id: str, external_id: str, public_id: uuid.UUID
) -> int:
    """Erasure of a person who changed provider accounts: `updated_by` names them by an erased
    label that is still theirs alone (their public id). The accounts themselves are the
    tenant's configuration, not the person's data, and stay."""
    return await queries.rename_actor(
        conn, tenant_id, f"person:{external_id}", f"person:erased:{public_id}"
    )
