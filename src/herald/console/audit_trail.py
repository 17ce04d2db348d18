"""An override's history as its audit records tell it: who did what, when, and each changed
field's before and after, with a line diff for wording (R-ADMIN-6 records exactly that).

Read only by the template screen, which is open only to NotificationTemplate_READ — the audit
records of the NotificationTemplate module (R-ADMIN-8).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from herald.auth.service import Operator
from herald.console import queries
from herald.errors import NotFound

TEMPLATE_READ = "NotificationTemplate_READ"
ENTITY = "notification_template"
# The fields shown, in this order; the rest of a create's snapshot (kind, channel, locale) is
# the page's heading already.
FIELDS = ("status", "title", "body", "version")
LIMIT = 50


@dataclass(frozen=True)
class FieldChange:
    field: str
    before: Any
    after: Any
    # Unified diff lines (without the file headers) for wording; empty for other fields.
    diff: list[str]


@dataclass(frozen=True)
class AuditEntry:
    action: str
    actor: str
    at: datetime
    changes: list[FieldChange]


def _diff(before: Any, after: Any) -> list[str]:
    if not isinstance(after, str) and not isinstance(before, str):
        return []
    lines = difflib.unified_diff(
        str(before or "").splitlines(), str(after or "").splitlines(), lineterm="", n=1
    )
    return [line for line in lines if not line.startswith(("---", "+++", "@@"))]


def _changes(action: str, raw: dict[str, Any]) -> list[FieldChange]:
    found = []
    for field in FIELDS:
        if field not in raw:
            continue
        value = raw[field]
        if isinstance(value, dict) and set(value) == {"before", "after"}:
            before, after = value["before"], value["after"]
        elif action == "delete":
            before, after = value, None
        else:  # a create's snapshot
            before, after = None, value
        diff = _diff(before, after) if field in ("title", "body") else []
        found.append(FieldChange(field=field, before=before, after=after, diff=diff))
    return found


async def template_trail(
    conn: AsyncConnection, operator: Operator, template_public_id: str
) -> list[AuditEntry]:
    """The newest LIMIT audit records of one override, newest first."""
    if not operator.may(TEMPLATE_READ):
        raise NotFound()
    rows = await queries.audit_records(
        conn, operator.tenant_id, ENTITY, template_public_id, limit=LIMIT
    )
    return [
        AuditEntry(
            action=row.action,
            actor=f"{row.actor_kind}:{row.actor_id}",
            at=row.created_at,
            changes=_changes(row.action, dict(row.changes or {})),
        )
        for row in rows
    ]
