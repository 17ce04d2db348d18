"""SQL of the maintenance stage: retention, the once-a-day compare-and-set, operational email, and
the vault key rotation's reads and rewrites of every stored ciphertext.

The long statements live in queries.sql, each with what it guarantees; this module binds their
parameters and shapes their answers.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from sqlalchemy import TextClause, bindparam, func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.db import partitions, sqlfile
from herald.db import schema as s

SQL = sqlfile.load(Path(__file__).with_name("queries.sql"))

# The canonical text form of a uuid, any letter case: only these references are cast to uuid.
UUID_PATTERN: Final = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"

# The dead-letter identity of an operational email (outside the channel replay allowlist, R-DLQ-8).
OPERATIONAL_QUEUE: Final = "notification.operational"
OPERATIONAL_JOB: Final = "operational_email"


# -- retention -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeletedDeliveries:
    deliveries: int
    attempts: int


# The whole tables: what a window naming no partition reads (the tests' direct calls).
PARENTS: Final = {t: t for t in (partitions.RECIPIENT, partitions.DELIVERY, partitions.ATTEMPT)}
_TEXT = sqlfile.load_text(Path(__file__).with_name("queries.sql"))


@functools.cache
def _windowed(statement: str, recipient: str, delivery: str, attempt: str) -> TextClause:
    """`statement` with each `<table>__part` replaced by that table's partition of the window."""
    sql = (
        _TEXT[statement]
        .replace("notification_delivery_attempt__part", f'"{attempt}"')
        .replace("notification_delivery__part", f'"{delivery}"')
        .replace("notification_recipient__part", f'"{recipient}"')
    )
    return text(sql)


def windowed(statement: str, parts: Mapping[str, str]) -> TextClause:
    return _windowed(
        statement,
        parts[partitions.RECIPIENT],
        parts[partitions.DELIVERY],
        parts[partitions.ATTEMPT],
    )


def _window(after: datetime | None, before: datetime) -> dict[str, str]:
    """An occurred_at window as the statements take it (text cast to timestamptz, so the open
    start is '-infinity')."""
    return {
        "after": "-infinity" if after is None else after.isoformat(),
        "before": before.isoformat(),
    }


async def delete_aged_deliveries(
    conn: AsyncConnection,
    *,
    after: datetime | None = None,
    before: datetime,
    limit: int,
    parts: Mapping[str, str] = PARENTS,
) -> DeletedDeliveries:
    row = (
        await conn.execute(
            windowed("delete_aged_deliveries", parts),
            {
                **_window(after, before),
                "limit": limit,
                "in_flight": list(vocabulary.IN_FLIGHT_STATUSES),
                "uuid_pattern": UUID_PATTERN,
            },
        )
    ).one()
    return DeletedDeliveries(deliveries=int(row.deliveries), attempts=int(row.attempts))


@dataclass(frozen=True)
class WindowedDelete:
    """One level of the event retention's bounded deletes (queries.sql's `statement`): up to
    `limit` rows with occurred_at in the window (`after`, `before`), read from the window's
    partitions `parts` (the whole tables by default). Returns the rows deleted."""

    statement: str

    async def __call__(
        self,
        conn: AsyncConnection,
        *,
        after: datetime | None = None,
        before: datetime,
        limit: int,
        parts: Mapping[str, str] = PARENTS,
    ) -> int:
        result = await conn.execute(
            windowed(self.statement, parts), {**_window(after, before), "limit": limit}
        )
        return int(result.rowcount)


delete_aged_recipients = WindowedDelete("delete_aged_recipients")
delete_aged_events = WindowedDelete("delete_aged_events")


@dataclass(frozen=True)
class TableDelete:
    """One single-table retention DELETE of queries.sql, named `statement`: up to `limit` rows
    older than `days` (and whatever else that statement keeps). Returns the rows deleted."""

    statement: str

    async def __call__(self, conn: AsyncConnection, *, days: int, limit: int) -> int:
        result = await conn.execute(SQL[self.statement], {"days": days, "limit": limit})
        return int(result.rowcount)


delete_invalidated_push_tokens = TableDelete("delete_invalidated_push_tokens")
delete_aged_feed_notifications = TableDelete("delete_aged_feed_notifications")
delete_aged_reminder_runs = TableDelete("delete_aged_reminder_runs")
delete_settled_broadcasts = TableDelete("delete_settled_broadcasts")
delete_resolved_followups = TableDelete("delete_resolved_followups")
delete_decided_escalation_steps = TableDelete("delete_decided_escalation_steps")
delete_sent_webhook_messages = TableDelete("delete_sent_webhook_messages")
delete_aged_undeliverable_addresses = TableDelete("delete_aged_undeliverable_addresses")
delete_finished_operational_emails = TableDelete("delete_finished_operational_emails")
delete_expired_console_sessions = TableDelete("delete_expired_console_sessions")
delete_aged_pending_receipts = TableDelete("delete_aged_pending_receipts")


# -- once per period -------------------------------------------------------------------------


async def claim_period(conn: AsyncConnection, task: str, period_key: str) -> bool:
    """True for exactly one caller per (task, newer period key), across every worker."""
    row = (
        await conn.execute(SQL["claim_period"], {"task": task, "period_key": period_key})
    ).first()
    return row is not None


# -- operational email -----------------------------------------------------------------------


async def insert_operational_email(conn: AsyncConnection, values: dict[str, Any]) -> uuid.UUID:
    public_id: uuid.UUID = (
        await conn.execute(
            insert(s.operational_email).values(**values).returning(s.operational_email.c.public_id)
        )
    ).scalar_one()
    return public_id


async def claim_due_operational_emails(
    conn: AsyncConnection, *, limit: int, lease_seconds: int, tenant_id: str | None = None
) -> list[dict[str, Any]]:
    params: dict[str, Any] = {"limit": limit, "lease_seconds": lease_seconds}
    if tenant_id is None:
        result = await conn.execute(SQL["claim_due_operational_emails"], params)
    else:
        result = await conn.execute(
            SQL["claim_due_operational_emails_of_tenant"], {**params, "tenant_id": tenant_id}
        )
    return [dict(row._mapping) for row in result]


async def finish_operational_email(
    conn: AsyncConnection,
    *,
    id: int,
    claimed_at: datetime,
    status: str,
    attempt_inc: int,
    delay: int | None,
    error: str | None,
) -> str | None:
    """Write the outcome; the status written, or None when the claim was lost meanwhile."""
    row = (
        await conn.execute(
            SQL["finish_operational_email"],
            {
                "id": id,
                "claimed_at": claimed_at,
                "status": status,
                "attempt_inc": attempt_inc,
                "delay": delay,
                "error": error,
                "queue_name": OPERATIONAL_QUEUE,
                "job_name": OPERATIONAL_JOB,
            },
        )
    ).first()
    return None if row is None else str(row.status)


async def reclaim_operational_email_leases(
    conn: AsyncConnection, *, max_attempts: int, limit: int
) -> list[str]:
    """Statuses of the rows reclaimed (queued again, or dead)."""
    result = await conn.execute(
        SQL["reclaim_operational_email_leases"],
        {
            "max_attempts": max_attempts,
            "limit": limit,
            "queue_name": OPERATIONAL_QUEUE,
            "job_name": OPERATIONAL_JOB,
        },
    )
    return [str(row.status) for row in result]


# -- vault key rotation ----------------------------------------------------------------------
# Run as the connecting user (the schema owner), whose policy sees every tenant's rows: the
# rotation is one of the named cross-tenant jobs (herald.db.tenancy).


@dataclass(frozen=True)
class StoredCiphertext:
    """One encrypted column value: the row's key, its tenant, a name safe to show (a webhook
    endpoint's public id; a vault entry has none), and the ciphertext."""

    key: object
    tenant_id: str
    label: str | None
    ciphertext: bytes


async def lock_vault_ciphertexts(conn: AsyncConnection) -> list[StoredCiphertext]:
    """Every live vault entry, locked until the transaction ends: a claim waits for the rewrite
    instead of reading the ciphertext it replaces. Expired entries are left to the purge."""
    v = s.secret_vault
    rows = await conn.execute(
        select(v.c.ref_id, v.c.tenant_id, v.c.ciphertext)
        .where(v.c.expires_at > func.now())
        .order_by(v.c.ref_id)
        .with_for_update()
    )
    return [StoredCiphertext(r.ref_id, r.tenant_id, None, bytes(r.ciphertext)) for r in rows]


async def lock_webhook_ciphertexts(conn: AsyncConnection) -> list[StoredCiphertext]:
    """Every webhook endpoint's signing secret, locked until the transaction ends (a secret
    rotated through the API meanwhile waits, then writes under the new primary key)."""
    w = s.webhook_endpoint
    rows = await conn.execute(
        select(w.c.id, w.c.tenant_id, w.c.public_id, w.c.secret_ciphertext)
        .order_by(w.c.id)
        .with_for_update()
    )
    return [
        StoredCiphertext(r.id, r.tenant_id, str(r.public_id), bytes(r.secret_ciphertext))
        for r in rows
    ]


async def set_vault_ciphertexts(conn: AsyncConnection, changes: Mapping[object, bytes]) -> None:
    if not changes:
        return
    v = s.secret_vault
    await conn.execute(
        update(v).where(v.c.ref_id == bindparam("row_key")).values(ciphertext=bindparam("new")),
        [{"row_key": key, "new": value} for key, value in changes.items()],
    )


async def set_webhook_ciphertexts(conn: AsyncConnection, changes: Mapping[object, bytes]) -> None:
    if not changes:
        return
    w = s.webhook_endpoint
    await conn.execute(
        update(w).where(w.c.id == bindparam("row_key")).values(secret_ciphertext=bindparam("new")),
        [{"row_key": key, "new": value} for key, value in changes.items()],
    )


async def lock_provider_account_ciphertexts(conn: AsyncConnection) -> list[StoredCiphertext]:
    """Every tenant provider account's secret fields, locked until the transaction ends (a change
    through the admin API meanwhile waits, then writes under the new primary key)."""
    a = s.notification_provider_account
    rows = await conn.execute(
        select(a.c.id, a.c.tenant_id, a.c.provider, a.c.secret_ciphertext)
        .where(a.c.secret_ciphertext.is_not(None))
        .order_by(a.c.id)
        .with_for_update()
    )
    return [
        StoredCiphertext(r.id, r.tenant_id, r.provider, bytes(r.secret_ciphertext)) for r in rows
    ]


async def set_provider_account_ciphertexts(
    conn: AsyncConnection, changes: Mapping[object, bytes]
) -> None:
    """The same secrets under the new key; the version stays (the values did not change)."""
    if not changes:
        return
    a = s.notification_provider_account
    await conn.execute(
        update(a).where(a.c.id == bindparam("row_key")).values(secret_ciphertext=bindparam("new")),
        [{"row_key": key, "new": value} for key, value in changes.items()],
    )
