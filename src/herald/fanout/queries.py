"""SQL of the fan-out stage. The hot statements live in queries.sql; this module binds them."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

from sqlalchemy import BigInteger, any_, func, literal, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import schema as s
from herald.db import sqlfile

SQL = sqlfile.load(Path(__file__).with_name("queries.sql"))
DELIVERY_CHANNEL = "herald_delivery"


@dataclass(frozen=True)
class ClaimedEvent:
    id: int
    tenant_id: str
    public_id: uuid.UUID
    kind: str
    category: str
    priority: str
    audience: dict[str, Any]
    channels: list[str]
    variables: dict[str, str]
    action_url: str | None
    occurred_at: datetime
    fanout_cursor: int
    fanout_attempts: int = 1
    # A broadcast's frozen audience: people created after it are left out (R-BCAST-8).
    audience_frozen_at: datetime | None = None
    # The request that recorded the event and its trace context (observability; may be None).
    origin_request_id: str | None = None
    traceparent: str | None = None
    # deliverAt (issue 45): each recipient's own wall-clock time, optionally on one local date.
    deliver_local_time: time | None = None
    deliver_local_date: date | None = None


async def claim_event(
    conn: AsyncConnection, token: uuid.UUID, tenant_id: str | None, holder: int | None
) -> tuple[int, str] | None:
    """Claim the oldest due event (cross-tenant); its (id, tenant id)."""
    row = (
        await conn.execute(
            SQL["claim_event"], {"token": token, "tenant_id": tenant_id, "holder": holder}
        )
    ).first()
    return (int(row.id), str(row.tenant_id)) if row else None


async def load_claimed_event(conn: AsyncConnection, event_id: int) -> ClaimedEvent:
    row = (await conn.execute(SQL["load_claimed_event"], {"event_id": event_id})).one()
    return ClaimedEvent(**row._asdict())


async def lock_claimed_event(conn: AsyncConnection, event_id: int, token: uuid.UUID) -> int | None:
    """The event's cursor if this worker still owns the claim (row locked for the batch), else None."""
    row = (
        await conn.execute(SQL["lock_claimed_event"], {"event_id": event_id, "token": token})
    ).first()
    return int(row.fanout_cursor) if row else None


async def lock_event_for_halt(conn: AsyncConnection, event_id: int) -> bool:
    """Wait for the fan-out batch in progress (it holds the event's row lock) and hold the lock;
    False when the event is gone."""
    query = (
        select(s.notification_event.c.id)
        .where(s.notification_event.c.id == event_id)
        .with_for_update()
    )
    return (await conn.execute(query)).first() is not None


async def halt_fanout(conn: AsyncConnection, event_id: int, actor: str) -> bool:
    """Cut the event's fan-out short (see queries.sql); False when it had already completed."""
    result = await conn.execute(SQL["halt_fanout"], {"event_id": event_id, "actor": actor})
    return result.first() is not None


async def insert_recipients(
    conn: AsyncConnection,
    *,
    tenant_id: str,
    event_id: int,
    occurred_at: datetime,
    person_ids: Sequence[int],
    public_ids: Sequence[uuid.UUID],
    role_ids: Sequence[int | None],
    names: Sequence[str],
    locales: Sequence[str],
) -> dict[int, tuple[int, uuid.UUID]]:
    """Insert the page's recipients; return {person_id: (recipient id, public id)} for rows inserted now.

    No src caller: the fan-out writes its recipients in the batch statement (fanout.pagewrite);
    the row-by-row reference (tests/integration/fanout_reference.py) uses this."""
    result = await conn.execute(
        SQL["insert_recipients"],
        {
            "tenant_id": tenant_id,
            "event_id": event_id,
            "occurred_at": occurred_at,
            "person_ids": list(person_ids),
            "public_ids": list(public_ids),
            "role_ids": list(role_ids),
            "names": list(names),
            "locales": list(locales),
        },
    )
    return {row.user_id: (row.id, row.public_id) for row in result}


@dataclass
class DeliveryRows:
    """Column arrays for one INSERT … SELECT FROM unnest(…): `insert_deliveries`' rows, which
    only the row-by-row reference (tests/integration/fanout_reference.py) builds."""

    recipient_ids: list[int]
    channels: list[str]
    target_ids: list[int | None]
    statuses: list[str]
    skipped: list[bool]
    titles: list[str | None]
    bodies: list[str | None]
    template_versions: list[int | None]
    hashes: list[str | None]

    @classmethod
    def empty(cls) -> DeliveryRows:
        return cls([], [], [], [], [], [], [], [], [])

    def add(
        self,
        recipient_id: int,
        channel: str,
        status: str,
        *,
        skipped: bool = False,
        target_id: int | None = None,
        title: str | None = None,
        body: str | None = None,
        template_version: int | None = None,
        rendered_hash: str | None = None,
    ) -> None:
        self.recipient_ids.append(recipient_id)
        self.channels.append(channel)
        self.target_ids.append(target_id)
        self.statuses.append(status)
        self.skipped.append(skipped)
        self.titles.append(title)
        self.bodies.append(body)
        self.template_versions.append(template_version)
        self.hashes.append(rendered_hash)

    def __len__(self) -> int:
        return len(self.recipient_ids)


async def insert_deliveries(
    conn: AsyncConnection,
    *,
    tenant_id: str,
    event_id: int,
    occurred_at: datetime,
    rows: DeliveryRows,
) -> None:
    """Insert one page's deliveries. No src caller: the fan-out writes its deliveries in the batch
    statement (fanout.pagewrite); the row-by-row reference (tests/integration/fanout_reference.py)
    uses this."""
    if not rows:
        return
    await conn.execute(
        SQL["insert_deliveries"],
        {
            "tenant_id": tenant_id,
            "event_id": event_id,
            "occurred_at": occurred_at,
            "recipient_ids": rows.recipient_ids,
            "channels": rows.channels,
            "target_ids": rows.target_ids,
            "statuses": rows.statuses,
            "skipped": rows.skipped,
            "titles": rows.titles,
            "bodies": rows.bodies,
            "template_versions": rows.template_versions,
            "hashes": rows.hashes,
        },
    )


async def advance_cursor(
    conn: AsyncConnection, event_id: int, token: uuid.UUID, cursor: int
) -> None:
    await conn.execute(
        SQL["advance_cursor"], {"event_id": event_id, "token": token, "cursor": cursor}
    )


async def complete_fanout(
    conn: AsyncConnection, event_id: int, token: uuid.UUID, cursor: int
) -> int:
    row = (
        await conn.execute(
            SQL["complete_fanout"], {"event_id": event_id, "token": token, "cursor": cursor}
        )
    ).one()
    return int(row.recipient_count)


async def release_stale_fanout_claims(
    conn: AsyncConnection, older_than_seconds: int, limit: int
) -> list[int]:
    result = await conn.execute(
        SQL["release_stale_fanout_claims"],
        {"older_than_seconds": older_than_seconds, "limit": limit},
    )
    return [row.id for row in result]


async def active_push_tokens(
    conn: AsyncConnection, person_ids: Sequence[int]
) -> dict[int, list[int]]:
    """{person_id: [token ids]} of the page's active push tokens, in one query. No src caller:
    the batch statement joins the tokens (fanout.pagewrite); the row-by-row reference
    (tests/integration/fanout_reference.py) uses this."""
    t = s.notification_push_token
    rows = await conn.execute(
        select(t.c.person_id, t.c.id)
        .where(t.c.person_id == any_(literal(list(person_ids), ARRAY(BigInteger))), t.c.is_active)
        .order_by(t.c.person_id, t.c.id)
    )
    tokens: dict[int, list[int]] = {}
    for person_id, token_id in rows:
        tokens.setdefault(person_id, []).append(token_id)
    return tokens


async def published_overrides(
    conn: AsyncConnection, tenant_id: str, kind: str
) -> list[dict[str, Any]]:
    """The kind's published operator overrides, read once per batch (R-RENDER-3, R-RENDER-17)."""
    t = s.notification_template
    rows = await conn.execute(
        select(t.c.channel, t.c.locale, t.c.title, t.c.body, t.c.version).where(
            t.c.tenant_id == tenant_id, t.c.kind == kind, t.c.status == "published"
        )
    )
    return [row._asdict() for row in rows]


async def escalation_delays(conn: AsyncConnection, tenant_id: str, kind: str) -> list[int] | None:
    """The tenant's delays for the kind's escalation plan (PUT /v1/admin/kinds/{kind}/escalation),
    None for the code's; read once per batch, only for a kind with a plan."""
    o = s.notification_escalation_override
    found = await conn.execute(
        select(o.c.delays).where(
            o.c.tenant_id == tenant_id, o.c.kind == kind, o.c.delays.is_not(None)
        )
    )
    delays = found.scalar_one_or_none()
    return list(delays) if delays is not None else None


async def release_orphaned_fanout_claims(
    conn: AsyncConnection, namespace: int, limit: int
) -> list[int]:
    result = await conn.execute(
        SQL["release_orphaned_fanout_claims"], {"namespace": namespace, "limit": limit}
    )
    return [row.id for row in result]


async def wake_delivery_workers(conn: AsyncConnection) -> None:
    """Wake every delivery worker. No src caller: the batch statement wakes the channels it queued
    itself; the row-by-row reference (tests/integration/fanout_reference.py) uses this."""
    await conn.execute(select(func.pg_notify(DELIVERY_CHANNEL, "")))


async def release_own_claim(conn: AsyncConnection, event_id: int, token: uuid.UUID) -> None:
    await conn.execute(SQL["release_own_claim"], {"event_id": event_id, "token": token})


async def wake_if_due(conn: AsyncConnection) -> None:
    await conn.execute(SQL["wake_if_due"])


async def fail_fanout(conn: AsyncConnection, event_id: int, token: uuid.UUID, error: str) -> None:
    await conn.execute(SQL["fail_fanout"], {"event_id": event_id, "token": token, "error": error})


async def now(conn: AsyncConnection) -> datetime:
    """The database's clock (the moment a deliverAt batch is written)."""
    moment: datetime = (await conn.execute(select(func.now()))).scalar_one()
    return moment
