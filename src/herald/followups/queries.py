"""SQL of follow-ups. Statements are built once and executed by the sync and the async library
calls alike (and by the routes and the sweep).

Every statement names the tenant, and row-level security applies it again for herald_app. Time
is the database's `now()` (the transaction's instant), so API processes, host processes and
sweepers agree on it, and deadlines compare as instants (R-FOLLOW-8).

The sweep's statements: `tenants_with_followups` is its one cross-tenant read (tenant ids only,
R-FOLLOW-16); `notify_candidates` and `remind_candidates` are the two candidate scans on the
two (tenant_id, state, deadline) indexes (R-FOLLOW-2, R-FOLLOW-19, R-FOLLOW-20); `claim_notify`
and `claim_remind` are the claims, one conditional UPDATE each whose row count decides
(R-FOLLOW-21, R-FOLLOW-23, R-FOLLOW-25).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Executable,
    func,
    literal_column,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import insert

from herald import vocabulary
from herald.db import schema as s

f = s.followup

COLUMNS = (
    f.c.id,
    f.c.tenant_id,
    f.c.key,
    f.c.kind,
    f.c.reminder_kind,
    f.c.audience,
    f.c.variables,
    f.c.state,
    f.c.cycle,
    f.c.arm_at,
    f.c.notified_at,
    f.c.escalate_at,
    f.c.reminded_at,
    f.c.notify_event_id,
    f.c.reminder_event_id,
)

RESOLVED = ("acknowledged", "not_required")


def _seconds(column: Any) -> Any:
    return func.make_interval(0, 0, 0, 0, 0, 0, column)


# ---------------------------------------------------------------------------------------------
# The host's writes (library and HTTP)


def arm(tenant_id: str, values: Mapping[str, Any], *, covered: bool) -> Executable:
    """Insert the follow-up, or return the one the tenant already has under that key, unchanged
    (ON CONFLICT with a no-op SET so RETURNING yields the row on both paths; `inserted` tells
    them apart). Armed: `armAt = now + grace` (R-FOLLOW-6, R-FOLLOW-7); covered: born
    `not_required` with no armAt, in no claim set (R-FOLLOW-9)."""
    row = {
        **values,
        "tenant_id": tenant_id,
        "state": "not_required" if covered else "armed",
        "arm_at": None if covered else func.now() + _seconds(values["grace_seconds"]),
    }
    stmt = insert(f).values(**row)
    return stmt.on_conflict_do_update(
        index_elements=[f.c.tenant_id, f.c.key], set_={"key": f.c.key}
    ).returning(*COLUMNS, literal_column("(xmax = 0)").label("inserted"))


def find(tenant_id: str, key: str) -> Executable:
    return select(*COLUMNS).where(f.c.tenant_id == tenant_id, f.c.key == key)


def acknowledge(tenant_id: str, key: str) -> Executable:
    """Open → acknowledged (R-FOLLOW-10): out of both claim sets from this commit on
    (R-FOLLOW-11). A claim racing it waits for the row and then matches nothing."""
    return (
        update(f)
        .where(
            f.c.tenant_id == tenant_id,
            f.c.key == key,
            f.c.state.in_(vocabulary.FOLLOWUP_OPEN_STATES),
        )
        .values(state="acknowledged", updated_at=func.now())
        .returning(*COLUMNS)
    )


def reopen(tenant_id: str, key: str) -> Executable:
    """Resolved → armed with every timing field (and both event ids) cleared and `armAt = now +
    grace`; a new cycle, so its events are new events (R-FOLLOW-14)."""
    return (
        update(f)
        .where(f.c.tenant_id == tenant_id, f.c.key == key, f.c.state.in_(RESOLVED))
        .values(
            state="armed",
            cycle=f.c.cycle + 1,
            arm_at=func.now() + _seconds(f.c.grace_seconds),
            notified_at=None,
            escalate_at=None,
            reminded_at=None,
            notify_event_id=None,
            reminder_event_id=None,
            updated_at=func.now(),
        )
        .returning(*COLUMNS)
    )


def cancel(tenant_id: str, key: str) -> Executable:
    """Any state but not_required → not_required: never sends again until reopened."""
    return (
        update(f)
        .where(f.c.tenant_id == tenant_id, f.c.key == key, f.c.state != "not_required")
        .values(state="not_required", updated_at=func.now())
        .returning(*COLUMNS)
    )


# ---------------------------------------------------------------------------------------------
# The sweep


def tenants_with_followups() -> Executable:
    """Every tenant that has a follow-up, by a loose index scan over the notify index's leading
    column: one index probe per tenant, however many rows each has. Cross-tenant, so tenant ids
    only (R-FOLLOW-15, R-FOLLOW-16)."""
    return text(
        """
        WITH RECURSIVE t(tenant_id) AS (
            (SELECT tenant_id FROM followup ORDER BY tenant_id LIMIT 1)
            UNION ALL
            SELECT (SELECT n.tenant_id FROM followup n
                     WHERE n.tenant_id > t.tenant_id ORDER BY n.tenant_id LIMIT 1)
              FROM t WHERE t.tenant_id IS NOT NULL
        )
        SELECT tenant_id FROM t WHERE tenant_id IS NOT NULL
        """
    )


def notify_candidates(
    tenant_id: str, *, after: tuple[datetime, int] | None, limit: int
) -> Executable:
    """Armed follow-ups whose armAt has come, oldest first: (tenant_id, state, arm_at). Only
    tenant, state and deadline are filtered on (R-FOLLOW-17, R-FOLLOW-19)."""
    query = select(f.c.id, f.c.arm_at.label("due_at")).where(
        f.c.tenant_id == tenant_id, f.c.state == "armed", f.c.arm_at <= func.now()
    )
    if after is not None:
        query = query.where(tuple_(f.c.arm_at, f.c.id) > tuple_(*after))
    return query.order_by(f.c.arm_at, f.c.id).limit(limit)


def remind_candidates(
    tenant_id: str, *, after: tuple[datetime, int] | None, limit: int
) -> Executable:
    """Notified follow-ups whose escalateAt has come: (tenant_id, state, escalate_at)
    (R-FOLLOW-20)."""
    query = select(f.c.id, f.c.escalate_at.label("due_at")).where(
        f.c.tenant_id == tenant_id, f.c.state == "notified", f.c.escalate_at <= func.now()
    )
    if after is not None:
        query = query.where(tuple_(f.c.escalate_at, f.c.id) > tuple_(*after))
    return query.order_by(f.c.escalate_at, f.c.id).limit(limit)


def claim_notify(tenant_id: str, row_id: int) -> Executable:
    """R-FOLLOW-21: armed and armAt <= now → notified, notifiedAt = now, escalateAt = now +
    delay, in one statement. Re-checking armAt is what keeps a follow-up reopened between the
    scan and this claim (armAt now in the future) from being claimed (R-FOLLOW-22)."""
    return (
        update(f)
        .where(
            f.c.id == row_id,
            f.c.tenant_id == tenant_id,
            f.c.state == "armed",
            f.c.arm_at <= func.now(),
        )
        .values(
            state="notified",
            notified_at=func.now(),
            escalate_at=func.now() + _seconds(f.c.reminder_delay_seconds),
            updated_at=func.now(),
        )
        .returning(*COLUMNS)
    )


def claim_remind(tenant_id: str, row_id: int) -> Executable:
    """R-FOLLOW-23: notified and escalateAt <= now → follow_up, remindedAt = now. follow_up is
    in no claim set: no third notification (R-FOLLOW-29)."""
    return (
        update(f)
        .where(
            f.c.id == row_id,
            f.c.tenant_id == tenant_id,
            f.c.state == "notified",
            f.c.escalate_at <= func.now(),
        )
        .values(state="follow_up", reminded_at=func.now(), updated_at=func.now())
        .returning(*COLUMNS)
    )


def stamp_event(tenant_id: str, row_id: int, *, column: str, event_id: uuid.UUID) -> Executable:
    """Record which event a transition recorded (`notify_event_id` or `reminder_event_id`), in
    the claim's transaction."""
    return update(f).where(f.c.id == row_id, f.c.tenant_id == tenant_id).values({column: event_id})
