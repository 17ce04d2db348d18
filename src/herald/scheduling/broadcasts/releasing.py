"""Broadcasts, the scheduler's side (seed 003, DESIGN.md §5.2): releasing an approved broadcast
as one event with a frozen audience, and settling it once its work is done or cancelled.

Release (`release_broadcast`, called by the scheduler under its lease, one transaction per
broadcast, as the broadcast's tenant): lock the approved broadcast, freeze `audienceFrozenAt`
(R-BCAST-7), record one event through the send path with that timestamp, deduplicated on the
broadcast (so a retried release records one event), and move to `sending`. The fan-out leaves
out people created after the freeze (R-BCAST-8) and writes the deliveries the channel workers
send (R-BCAST-9): the scheduler itself never sends.

Settling (`settle_broadcast`, each tick): a `sending` broadcast whose event's fan-out completed
and has no delivery in flight becomes `completed`; a cancelled one has its unclaimed deliveries
cancelled in bounded statements until nothing is in flight.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.audit.service import record_audit
from herald.auth.service import Operator
from herald.db import tenancy
from herald.delivery import service as delivery
from herald.errors import ValidationFailed
from herald.kinds import Registry
from herald.scheduling.broadcasts import queries
from herald.sending import service as sending
from herald.webhooks import service as webhooks

log = logging.getLogger(__name__)

ENTITY = "broadcast"
# Deliveries one cancelling statement touches, and statements per request or per tick: what
# is left is taken by the scheduler's next tick.
CANCEL_BATCH = 5000
CANCEL_STATEMENTS = 20


@dataclass(frozen=True)
class Due:
    id: int
    tenant_id: str


async def due_broadcasts(conn: AsyncConnection, *, limit: int) -> list[Due]:
    return [Due(r["id"], r["tenant_id"]) for r in await queries.due_broadcasts(conn, limit=limit)]


async def unsettled_broadcasts(conn: AsyncConnection, *, after_id: int, limit: int) -> list[Due]:
    rows = await queries.unsettled_broadcasts(conn, after_id=after_id, limit=limit)
    return [Due(r["id"], r["tenant_id"]) for r in rows]


def release_key(public_id: uuid.UUID) -> str:
    """What identifies a broadcast's one event: the broadcast."""
    return f"broadcast:{public_id}"


async def release_broadcast(
    conn: AsyncConnection, registry: Registry, due: Due
) -> uuid.UUID | None:
    """Freeze the audience, record the event and move to `sending`, in the caller's one
    transaction, as the broadcast's tenant. None when another scheduler or a cancel holds the
    row, or it is no longer due (nothing is written)."""
    await tenancy.enter_tenant(conn, due.tenant_id)
    row = await queries.lock_due(conn, due.tenant_id, due.id)
    if row is None:
        return None
    # R-BCAST-7: the freeze is fixed before anything resolves the audience. now() is this
    # transaction's start: everyone committed before it is in, nobody created after it.
    frozen_at = await queries.now(conn)
    send_input = sending.SendInput(
        tenant_id=due.tenant_id,
        kind=row["kind"],
        audience=row["audience"],
        channels=row["channels"],
        variables=row["variables"],
    )
    operator = scheduler_operator(due.tenant_id)
    try:
        result = await sending.record_occurrence(
            conn,
            send_input,
            registry=registry,
            occurrence_key=release_key(row["public_id"]),
            audience_frozen_at=frozen_at,
        )
    except ValidationFailed as exc:
        await queries.mark_release_failed(conn, row["id"], f"system:{exc.code}")
        await record_audit(
            conn, operator, "cancel", ENTITY, str(row["public_id"]), {"reason": exc.code}
        )
        log.error("broadcast %s could not be released: %s", row["public_id"], exc.code)
        return None
    event_id = await queries.event_id_of(conn, due.tenant_id, result.id)
    await queries.mark_sending(
        conn, row["id"], frozen_at=frozen_at, event_id=event_id, event_public_id=result.id
    )
    await record_audit(
        conn,
        operator,
        "release",
        ENTITY,
        str(row["public_id"]),
        {"state": {"before": "approved", "after": "sending"}, "audienceFrozenAt": frozen_at},
    )
    return result.id


async def settle_broadcast(conn: AsyncConnection, due: Due) -> str | None:
    """Complete a sending broadcast whose work is done, or carry a cancelled one's cancelling
    on, or fail one whose event's fan-out gave up; the state reached ("completed", "failed",
    "settled", "sending", "cancelling") or None when locked."""
    await tenancy.enter_tenant(conn, due.tenant_id)
    row = await queries.lock_unsettled(conn, due.tenant_id, due.id)
    if row is None:
        return None
    event_id = row["event_id"]
    if event_id is None:  # the event aged out: nothing of it is left in flight
        await queries.mark_settled(conn, row["id"])
        return "settled"
    if row["state"] == "sending" and row["fanout_failed"]:
        # The fan-out was dead-lettered (its attempt budget spent): no more recipients will be
        # written. What it wrote goes on being sent; once none of it is in flight the broadcast
        # is final as `failed`, and its report adds up from the rows it has.
        if await delivery.in_flight(conn, event_id):
            return "sending"
        await queries.mark_failed(conn, row["id"])
        await record_audit(
            conn,
            scheduler_operator(due.tenant_id),
            "complete",
            ENTITY,
            str(row["public_id"]),
            {"state": {"before": "sending", "after": "failed"}},
        )
        return "failed"
    if row["state"] == "sending":
        if not row["fanout_completed"] or await delivery.in_flight(conn, event_id):
            return "sending"
        await queries.mark_completed(conn, row["id"])
        await webhooks.emit(
            conn,
            due.tenant_id,
            "broadcast.completed",
            {"broadcastId": row["public_id"], "state": "completed"},
        )
        await record_audit(
            conn,
            scheduler_operator(due.tenant_id),
            "complete",
            ENTITY,
            str(row["public_id"]),
            {"state": {"before": "sending", "after": "completed"}},
        )
        return "completed"
    return "settled" if await cancel_deliveries(conn, row) else "cancelling"


async def cancel_deliveries(conn: AsyncConnection, row: RowMapping) -> bool:
    """Unclaimed deliveries → cancelled, at most CANCEL_STATEMENTS bounded statements; True (and
    the broadcast settled) once nothing is in flight."""
    for _ in range(CANCEL_STATEMENTS):
        if (
            await delivery.cancel_unclaimed(conn, row["event_id"], limit=CANCEL_BATCH)
            < CANCEL_BATCH
        ):
            break
    if await delivery.in_flight(conn, row["event_id"]):
        return False
    await queries.mark_settled(conn, row["id"])
    return True


def scheduler_operator(tenant_id: str) -> Operator:
    return Operator(
        tenant_id=tenant_id,
        actor_kind="system",
        actor_id="scheduler",
        person_id=None,
        permissions=frozenset(),
        superadmin=False,
    )
