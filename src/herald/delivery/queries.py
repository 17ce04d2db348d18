"""SQL of the delivery stage: claims, send context, the recorder's batch write, sweeps, replay."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pydantic_core
from sqlalchemy import func, select
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.db import schema as s
from herald.db import sqlfile

SQL = sqlfile.load(Path(__file__).with_name("queries.sql"))
DELIVERY_CHANNEL = "herald_delivery"


# The least and the greatest occurred_at of a batch's rows: the month partitions its statements
# read (every statement that reaches claimed rows by id alone is bounded by them, and pruned).
Span = tuple[datetime, datetime]


def span_of(moments: Iterable[datetime]) -> Span:
    values = list(moments)
    return min(values), max(values)


def bigint_array(values: Iterable[int]) -> str:
    """Integers as the text of a PostgreSQL array, for a `CAST(:x AS bigint[])` parameter: the
    driver dumps a list element by element in Python (~1 µs an id, 2 µs a delivery of the
    worker's Python where a batch's ids go back to the server); this is one join."""
    return "{" + ",".join(map(str, values)) + "}"


def _span_params(span: Span) -> dict[str, datetime]:
    return {"first_at": span[0], "last_at": span[1]}


async def claim_due_deliveries(
    conn: AsyncConnection,
    channel: str,
    limit: int,
    lease_seconds: int,
    tenant_id: str | None = None,
) -> list[tuple[int, str, datetime]]:
    """Claim a batch; (delivery id, tenant id, occurred_at) of each claimed row."""
    params: dict[str, Any] = {"channel": channel, "limit": limit, "lease_seconds": lease_seconds}
    if tenant_id is None:
        result = await conn.execute(SQL["claim_due_deliveries"], params)
    else:
        result = await conn.execute(
            SQL["claim_due_deliveries_of_tenant"], {**params, "tenant_id": tenant_id}
        )
    # By position, as they came (bigint, text and timestamptz are already int, str and
    # datetime): reading each column by name and converting it again cost 1 µs a row, 2 % of the
    # worker's CPU a delivery; this is 0.06 µs.
    return [(row[0], row[1], row[2]) for row in result]


async def load_send_contexts(
    conn: AsyncConnection, ids: Sequence[int], span: Span
) -> list[dict[str, Any]]:
    """The send context of each claimed row (`span`: the rows' occurred_at bounds), with its
    event's columns. The event's are read once per distinct event in the batch (a second,
    one-row-an-event statement): every row of an event shares that event's one dict of variables,
    which `prepare()` only copies, never changes. The delivery's and the event's public ids are
    text (`public_id`, `event_public_id`), as every use of them prints them.

    JSON is decoded by pydantic-core (0.15 µs for a recipient's `{"name": …}` against 1.7 µs for
    the driver's loader). With the event's columns on every row, the rows' decoding and the two
    UUID objects a row made were a quarter of the worker's Python a delivery (docs/scaling.md,
    the worker's round trips)."""
    result = await conn.execute(
        SQL["load_send_contexts"], {"ids": bigint_array(ids)} | _span_params(span)
    )
    keys = list(result.keys())
    contexts = []
    for row in result:
        # zip over the row's values: less than half the cost of dict(row._mapping) a row.
        context = dict(zip(keys, row, strict=True))
        raw = context.pop("recipient_variables_json")
        context["recipient_variables"] = pydantic_core.from_json(raw) if raw is not None else None
        contexts.append(context)
    if contexts:
        events = await _load_send_events(conn, {context["event_id"] for context in contexts})
        for context in contexts:
            context.update(events[context["event_id"]])
    return contexts


async def _load_send_events(
    conn: AsyncConnection, event_ids: Iterable[int]
) -> dict[int, dict[str, Any]]:
    """The columns a send reads from its event, by event id."""
    result = await conn.execute(SQL["load_send_events"], {"ids": list(event_ids)})
    events: dict[int, dict[str, Any]] = {}
    for row in result:
        raw = row.variables_json
        events[row.id] = {
            "kind": row.kind,
            "event_variables": pydantic_core.from_json(raw) if raw is not None else None,
            "action_url": row.action_url,
            "priority": row.priority,
            "event_public_id": row.event_public_id,
            "origin_request_id": row.origin_request_id,
            "traceparent": row.traceparent,
        }
    return events


@dataclass
class OutcomeRows:
    """Column arrays for one record_outcomes statement."""

    ids: list[int] = field(default_factory=list)
    claimed_ats: list[datetime] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    attempt_incs: list[int] = field(default_factory=list)
    failure_incs: list[int] = field(default_factory=list)
    delays: list[int | None] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)
    message_ids: list[str | None] = field(default_factory=list)
    hints: list[str | None] = field(default_factory=list)
    titles: list[str | None] = field(default_factory=list)
    bodies: list[str | None] = field(default_factory=list)
    hashes: list[str | None] = field(default_factory=list)
    template_versions: list[int | None] = field(default_factory=list)
    called: list[bool] = field(default_factory=list)
    provider_statuses: list[str | None] = field(default_factory=list)
    outcomes: list[str | None] = field(default_factory=list)
    providers: list[str | None] = field(default_factory=list)
    passed_over: list[str | None] = field(default_factory=list)
    # Not a column of the statement: the rows' months, its bounds (`first_at`, `last_at`).
    occurred_ats: list[datetime] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    def row(self, index: int) -> OutcomeRows:
        """A one-row copy, for recording rows one by one when a batch write fails."""
        return self.subset([index])

    def subset(self, indexes: Sequence[int]) -> OutcomeRows:
        """A copy holding only the rows at `indexes` (one tenant's rows of a batch)."""
        part = OutcomeRows()
        for name, values in vars(self).items():
            getattr(part, name).extend(values[i] for i in indexes)
        return part

    # The statement's columns, in the order record_outcomes reads each row's array.
    COLUMNS = (
        "ids",
        "claimed_ats",
        "statuses",
        "attempt_incs",
        "failure_incs",
        "delays",
        "errors",
        "message_ids",
        "hints",
        "titles",
        "bodies",
        "hashes",
        "template_versions",
        "called",
        "provider_statuses",
        "outcomes",
        "providers",
        "passed_over",
    )

    def params(self) -> dict[str, Any]:
        """The statement's parameters: the rows as one JSON document, an array a row in COLUMNS'
        order (record_outcomes reads them by position)."""
        rows = list(zip(*(getattr(self, name) for name in self.COLUMNS), strict=True))
        # pydantic-core's serialiser (a dependency already, through pydantic): 0.6 µs a row
        # against the standard library's 2.0 with a callback a timestamp, 2-3 % of the worker's
        # CPU a delivery (docs/scaling.md, the worker). claimed_at is the lease token, compared for
        # equality: an aware datetime is written as RFC 3339 with every microsecond and its
        # offset, so the timestamptz read back is the one claimed.
        return {
            "rows": pydantic_core.to_json(rows).decode(),
            "skipped_statuses": list(vocabulary.SKIPPED_STATUSES),
        } | _span_params(span_of(self.occurred_ats))


async def record_outcomes(conn: AsyncConnection, rows: OutcomeRows) -> tuple[set[int], str | None]:
    """Write the batch; return the ids actually written (a row whose lease was reclaimed is not)
    and the id of the writing transaction (None when nothing was written)."""
    if not rows:
        return set(), None
    result = (await conn.execute(SQL["record_outcomes"], rows.params())).all()
    return {row.id for row in result}, (result[0].xid if result else None)


async def transaction_status(conn: AsyncConnection, xid: str) -> str | None:
    """What became of a transaction whose COMMIT's answer was lost: 'committed', 'aborted',
    'in progress' (its session has not ended yet), or None (too old to tell)."""
    status = (await conn.execute(SQL["transaction_status"], {"xid": xid})).scalar_one()
    return str(status) if status is not None else None


async def requeue_due_failures(conn: AsyncConnection, limit: int) -> list[str]:
    return [
        row.channel for row in await conn.execute(SQL["requeue_due_failures"], {"limit": limit})
    ]


async def release_due_inbox(conn: AsyncConnection, limit: int) -> list[dict[str, Any]]:
    result = await conn.execute(SQL["release_due_inbox"], {"limit": limit})
    return [dict(row) for row in result.mappings()]


async def reclaim_expired_leases(
    conn: AsyncConnection, max_attempts: int, limit: int
) -> list[dict[str, Any]]:
    result = await conn.execute(
        SQL["reclaim_expired_leases"], {"max_attempts": max_attempts, "limit": limit}
    )
    return [dict(row._mapping) for row in result]


async def backfill_unconfigured(
    conn: AsyncConnection, channels: Sequence[str], max_age_hours: int, limit: int
) -> list[str]:
    """Up to `limit` rows in all, one channel at a time (each statement walks its index in order)."""
    redriven: list[str] = []
    for channel in channels:
        if len(redriven) >= limit:
            break
        result = await conn.execute(
            SQL["backfill_unconfigured"],
            {"channel": channel, "max_age_hours": max_age_hours, "limit": limit - len(redriven)},
        )
        redriven.extend(row.channel for row in result)
    return redriven


async def backfill_unconfigured_of_tenants(
    conn: AsyncConnection,
    pairs: Sequence[tuple[str, str]],
    max_age_hours: int,
    limit: int,
) -> list[str]:
    """backfill_unconfigured for (tenant, channel) pairs: a channel configured only by the
    tenant's own provider account. Up to `limit` rows in all."""
    redriven: list[str] = []
    for tenant_id, channel in pairs:
        if len(redriven) >= limit:
            break
        result = await conn.execute(
            SQL["backfill_unconfigured_of_tenant"],
            {
                "channel": channel,
                "tenant_id": tenant_id,
                "max_age_hours": max_age_hours,
                "limit": limit - len(redriven),
            },
        )
        redriven.extend(row.channel for row in result)
    return redriven


async def provider_account_versions(conn: AsyncConnection) -> dict[tuple[str, str], int]:
    """Every tenant's provider accounts, (tenant, provider) → version, read as the owner across
    tenants: the cheap look the workers' provider cache takes to see what changed."""
    a = s.notification_provider_account
    rows = await conn.execute(select(a.c.tenant_id, a.c.provider, a.c.version))
    return {(row.tenant_id, row.provider): row.version for row in rows}


async def provider_accounts_of(
    conn: AsyncConnection, tenant_ids: Sequence[str]
) -> list[RowMapping]:
    """The full accounts of these tenants (plain settings and the secret ciphertext)."""
    a = s.notification_provider_account
    rows = await conn.execute(
        select(a.c.tenant_id, a.c.provider, a.c.version, a.c.settings, a.c.secret_ciphertext)
        .where(a.c.tenant_id.in_(list(tenant_ids)))
        .order_by(a.c.tenant_id, a.c.provider)
    )
    return list(rows.mappings())


async def deactivate_push_token(conn: AsyncConnection, token_id: int, reason: str) -> None:
    t = s.notification_push_token
    await conn.execute(
        t.update()
        .where(t.c.id == token_id, t.c.is_active)
        .values(is_active=False, invalidated_at=s.NOW, invalidation_reason=reason)
    )


# The flag each chat channel drops when its provider says the destination is gone for good.
_CAN_WRITE = {
    "telegram": "telegram_can_write",
    "slack": "slack_can_write",
    "teams": "teams_can_write",
}


async def forbid_destination(conn: AsyncConnection, channel: str, person_id: int) -> None:
    """The person's destination on `channel` is unreachable (blocked, deleted, archived): later
    deliveries skip it until the host sets a different one."""
    column = _CAN_WRITE.get(channel)
    if column is None:
        return
    await conn.execute(s.person.update().where(s.person.c.id == person_id).values({column: False}))


async def find_dead_letter(
    conn: AsyncConnection, tenant_id: str, public_id: uuid.UUID
) -> dict[str, Any] | None:
    d = s.dead_letter
    row = (
        await conn.execute(
            select(d.c.id, d.c.queue_name, d.c.job_name, d.c.payload_ref, d.c.replayed_at).where(
                d.c.tenant_id == tenant_id, d.c.public_id == public_id
            )
        )
    ).first()
    return dict(row._mapping) if row else None


async def insert_replay(
    conn: AsyncConnection, tenant_id: str, delivery_public_id: uuid.UUID
) -> dict[str, Any] | None:
    row = (
        await conn.execute(
            SQL["insert_replay"], {"tenant_id": tenant_id, "delivery_public_id": delivery_public_id}
        )
    ).first()
    return dict(row._mapping) if row else None


async def mark_dead_letter_replayed(
    conn: AsyncConnection, dead_letter_id: int, actor: str, replay_job_id: str
) -> bool:
    result = await conn.execute(
        SQL["mark_dead_letter_replayed"],
        {"id": dead_letter_id, "actor": actor, "replay_job_id": replay_job_id},
    )
    return bool(result.rowcount == 1)


async def published_overrides(
    conn: AsyncConnection, pairs: Sequence[tuple[str, str]]
) -> list[dict[str, Any]]:
    if not pairs:
        return []
    result = await conn.execute(
        SQL["published_overrides"],
        {"tenants": [p[0] for p in pairs], "kinds": [p[1] for p in pairs]},
    )
    return [dict(row._mapping) for row in result]


async def wake_channel_workers(conn: AsyncConnection) -> None:
    await conn.execute(select(func.pg_notify(DELIVERY_CHANNEL, "")))


async def extend_leases(
    conn: AsyncConnection,
    held: Sequence[tuple[int, datetime]],
    lease_seconds: int,
) -> set[int]:
    """Renew the leases of `held` (id, claimed_at) on their queue rows; the ids still held."""
    if not held:
        return set()
    result = await conn.execute(
        SQL["extend_leases"],
        {
            "ids": [h[0] for h in held],
            "claimed_ats": [h[1] for h in held],
            "lease_seconds": lease_seconds,
        },
    )
    return {row.id for row in result}


@asynccontextmanager
async def _through_an_index(conn: AsyncConnection) -> AsyncIterator[None]:
    """Plan the statements inside with plain index scans only, then put the settings back.

    The per-event statements below look for an event's unfinished deliveries. When one event
    dominates the table (a new platform's first national broadcast) and the statistics still
    describe it as mostly queued, the planner expects the first match within a few rows and
    scans the table from its start — but the unfinished rows are the newest, at its end: a
    sequential prefix that grows with the drain (docs/scaling.md, generic plans). Their index answers in
    probes whatever the estimates say, but only as a plain index scan: a bitmap scan (the
    planner's choice for a few hundred expected rows) reads every index entry the drain has left
    behind for the event's in-flight states — each status change is a new entry, the old one
    dead until a vacuum — 1,898,000 of them and 60,000 heap pages, 356 ms a check, late in a
    1,000,000-person broadcast. A plain index scan stops at the first live row, and marks the
    dead entries it passes so the next check skips them. Needs a transaction (SET LOCAL)."""
    was = (await conn.execute(SQL["index_scans_only"])).one()
    try:
        yield
    finally:
        await conn.execute(
            SQL["index_scans_restore"], {"seqscan": was.seqscan, "bitmapscan": was.bitmapscan}
        )


async def cancel_unclaimed_deliveries(conn: AsyncConnection, event_id: int, limit: int) -> int:
    async with _through_an_index(conn):
        result = await conn.execute(
            SQL["cancel_unclaimed_deliveries"], {"event_id": event_id, "limit": limit}
        )
    return int(result.rowcount)


async def deliveries_in_flight(conn: AsyncConnection, event_id: int) -> bool:
    async with _through_an_index(conn):
        row = (await conn.execute(SQL["deliveries_in_flight"], {"event_id": event_id})).one()
    return bool(row.busy)


async def hold_until(
    conn: AsyncConnection, held: Sequence[tuple[int, datetime, datetime]], span: Span
) -> set[int]:
    """Put claimed rows back on the queue unclaimed, due at their moment: (id, claim, until)."""
    if not held:
        return set()
    result = await conn.execute(
        SQL["hold_until"],
        {
            "ids": bigint_array(row[0] for row in held),
            "claims": [row[1] for row in held],
            "untils": [row[2] for row in held],
        }
        | _span_params(span),
    )
    return {int(row[0]) for row in result}
