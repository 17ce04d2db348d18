"""Record who changed what, in the caller's transaction (R-ADMIN-6..8, R-SEC-18).

`record_audit` runs inside the mutation's own transaction, so an audit row exists exactly when
the change it describes committed: a rolled-back mutation leaves no trace and a committed one is
never unaudited.

`changes` is `{"field": {"before": …, "after": …}}` for an update (use `field_changes` to build it
from two snapshots), and the created or deleted values for a create or delete. Values are made
JSON-safe here (uuids, datetimes, enums become strings), so callers may pass row values as read.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from enum import Enum
from typing import Any
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.audit import queries
from herald.auth.service import Operator

# R-ADMIN-8: the permission module each audited entity type belongs to. audit_record has no module
# column, so the module is derived from entity_type (one entity type, one module).
MODULES: Mapping[str, str] = {
    "notification_template": "NotificationTemplate",
    "notification_escalation_override": "NotificationTemplate",
    "notification_event": "NotificationHistory",
    "notification_delivery": "NotificationHistory",
    "dead_letter": "NotificationFailure",
    "reminder_schedule": "NotificationReminder",
    "webhook_endpoint": "NotificationWebhook",
}


def module_of(entity_type: str) -> str | None:
    """The permission module an audited entity type belongs to (R-ADMIN-8)."""
    return MODULES.get(entity_type)


def actor_label(operator: Operator) -> str:
    """How a row's `created_by` / `updated_by` / `…_by` names an operator: `person:<external id>`
    or `api_key:<key id>`, so a person and a key with the same text can never be confused."""
    return f"{operator.actor_kind}:{operator.actor_id}"


def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Enum):
        return _json_safe(value.value)
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_json_safe(v) for v in value]
    return str(value)


def field_changes(
    before: Mapping[Any, Any], after: Mapping[Any, Any], fields: tuple[str, ...]
) -> dict[str, dict[str, Any]]:
    """Per-field before/after for the fields whose value changed (R-ADMIN-6)."""
    return {
        field: {"before": before.get(field), "after": after.get(field)}
        for field in fields
        if before.get(field) != after.get(field)
    }


async def record_audit(
    conn: AsyncConnection,
    operator: Operator,
    action: str,
    entity_type: str,
    entity_id: str,
    changes: Mapping[str, Any],
) -> None:
    """Append one audit record for `operator`'s `action` on `entity_type`/`entity_id`."""
    if action not in vocabulary.AUDIT_ACTIONS:
        raise ValueError(f"unknown audit action {action!r}")
    await queries.insert_record(
        conn,
        tenant_id=operator.tenant_id,
        actor_kind=operator.actor_kind,
        actor_id=operator.actor_id,
        action=action,
        entity_type=entity_type,
        entity_id=str(entity_id),
        changes=_json_safe(dict(changes)),
    )
