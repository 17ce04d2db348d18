"""Broadcasts (seed 003, DESIGN.md §5.2): drafted by one operator, approved by a different
person, released by the scheduler as one ordinary event with a frozen audience, cancellable
until completed.

Admin side. Permissions NotificationBroadcast_CREATE (draft), _READ (list, read, audience
preview, report), _UPDATE (change a draft), _APPROVE (approve) and _DELETE (cancel); an
id-addressed route answers 404 to a caller without the permission, a list an empty page. Every
state change is a compare-and-set with an audit record, in the request's transaction. A refusal
changes nothing: the body, then the row's existence, then its state, then the version are
checked before any write.

Approval (R-BCAST-3..6) needs a person — an operator's token, never an API key — who is not the
creator (and the CHECK approver_not_creator refuses such a row whatever this code does), on the
version they read, and a kind whose wording (or published override) renders.

Release and settling, the scheduler's side: herald.scheduling.broadcasts.releasing.

Cancel (R-BCAST-11, R-BCAST-12): the compare-and-set, then — for a released broadcast — the
event's fan-out is halted under its row lock (no recipient is written after the cancel
commits), and unclaimed deliveries become `cancelled` in bounded statements; calls in flight
finish and are recorded as they end.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.admin import editing, paging
from herald.admin.paging import Page
from herald.admin.templates import wording
from herald.audience import service as audience
from herald.audit.service import actor_label, field_changes, record_audit
from herald.auth.service import Operator
from herald.errors import (
    BroadcastAlreadyApproved,
    BroadcastApproverNotPerson,
    BroadcastCancelled,
    BroadcastCompleted,
    BroadcastInvalid,
    BroadcastNotDraft,
    BroadcastNotFound,
    BroadcastSelfApproval,
    BroadcastTemplateInvalid,
    BroadcastVersionConflict,
)
from herald.fanout import service as fanout
from herald.kinds import Registry
from herald.scheduling import sendable
from herald.scheduling.broadcasts import audiences, queries, releasing
from herald.scheduling.broadcasts.schemas import (
    ApproveInput,
    AudiencePreview,
    BroadcastInput,
    BroadcastOut,
    BroadcastPage,
    BroadcastReport,
    BroadcastUpdate,
)
from herald.vocabulary import IN_FLIGHT_STATUSES as IN_FLIGHT

log = logging.getLogger(__name__)

CREATE = audiences.CREATE
READ = "NotificationBroadcast_READ"
UPDATE = "NotificationBroadcast_UPDATE"
DELETE = "NotificationBroadcast_DELETE"
APPROVE = "NotificationBroadcast_APPROVE"

ENTITY = releasing.ENTITY
FIELDS = ("title", "kind", "variables", "channels", "audience", "scheduled_for")
AUDITED_FIELDS = (*FIELDS, "state", "version")


# ---------------------------------------------------------------------------------------------
# Input


def _invalid(field_name: str, message: str) -> BroadcastInvalid:
    return BroadcastInvalid(f"{field_name}: {message}")


M = TypeVar("M", bound=BaseModel)


def _parse(model: type[M], raw: object) -> M:
    if not isinstance(raw, Mapping):
        raise BroadcastInvalid("body: a JSON object is required")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        location = error.get("loc", ())
        name = str(location[0]) if location else "body"
        raise _invalid(name, str(error.get("msg", "invalid value"))) from None


def check_input(tenant_id: str, registry: Registry, data: BroadcastInput) -> dict[str, Any]:
    """Every semantic check through the send path itself, so a draft is accepted exactly when
    its event would be; the values as stored."""
    kind = sendable.checked_kind(
        tenant_id,
        registry,
        kind=data.kind,
        audience=data.audience,
        channels=data.channels,
        variables=data.variables,
        invalid=_invalid,
        secret_refusal="cannot be broadcast",
    )
    return {
        "title": data.title,
        "kind": kind.name,
        "variables": {key: str(value) for key, value in data.variables.items()},
        "channels": list(dict.fromkeys(data.channels)) if data.channels is not None else None,
        "audience": audience.validate_audience(data.audience),
        "scheduled_for": data.scheduled_for.astimezone(UTC) if data.scheduled_for else None,
    }


# ---------------------------------------------------------------------------------------------
# Admin


async def create_broadcast(
    conn: AsyncConnection, operator: Operator, registry: Registry, raw: object
) -> BroadcastOut:
    """R-BCAST-1, R-BCAST-2: a new broadcast is a draft."""
    _require(operator, CREATE)
    values = check_input(operator.tenant_id, registry, _parse(BroadcastInput, raw))
    row = await queries.insert_broadcast(
        conn, operator.tenant_id, values, actor=actor_label(operator)
    )
    await record_audit(conn, operator, "create", ENTITY, str(row["public_id"]), _snapshot(row))
    return await _out(conn, row)


async def list_broadcasts(conn: AsyncConnection, operator: Operator, page: Page) -> BroadcastPage:
    if not operator.may(READ):
        return BroadcastPage(items=[], next_cursor=None)
    before = paging.decode_cursor(page.cursor, "b", (int,))[0] if page.cursor is not None else None
    rows = await queries.list_page(conn, operator.tenant_id, before_id=before, limit=page.limit + 1)
    chosen, more = rows[: page.limit], len(rows) > page.limit
    return BroadcastPage(
        items=[await _out(conn, row) for row in chosen],
        next_cursor=paging.encode_cursor("b", chosen[-1]["id"]) if more else None,
    )


async def get_broadcast(
    conn: AsyncConnection, operator: Operator, broadcast_id: str
) -> BroadcastOut:
    _require(operator, READ)
    return await _out(conn, await _find(conn, operator, broadcast_id))


async def update_broadcast(
    conn: AsyncConnection, operator: Operator, registry: Registry, broadcast_id: str, raw: object
) -> BroadcastOut:
    """Replace a draft's fields, on the version read; anything past draft is a 409."""
    _require(operator, UPDATE)
    data = _parse(BroadcastUpdate, raw)
    values = check_input(operator.tenant_id, registry, data)
    before = await _find(conn, operator, broadcast_id)
    _require_draft(before)
    _check_version(before, data.version)
    after = await queries.update_draft(
        conn,
        operator.tenant_id,
        before["id"],
        expected_version=data.version,
        changes=values,
        actor=actor_label(operator),
    )
    if after is None:
        raise BroadcastVersionConflict()
    await record_audit(
        conn,
        operator,
        "update",
        ENTITY,
        str(after["public_id"]),
        field_changes(before, after, AUDITED_FIELDS),
    )
    return await _out(conn, after)


async def approve_broadcast(
    conn: AsyncConnection, operator: Operator, registry: Registry, broadcast_id: str, raw: object
) -> BroadcastOut:
    """R-BCAST-3..6: a person other than the creator, holding _APPROVE, approves the version
    they read, provided the kind renders and the broadcast still passes the send path."""
    _require(operator, APPROVE)
    if operator.actor_kind != "person":
        raise BroadcastApproverNotPerson()
    data = _parse(ApproveInput, raw)
    before = await _find(conn, operator, broadcast_id)
    if before["state"] == "cancelled":
        raise BroadcastCancelled("a cancelled broadcast cannot be approved")
    if before["state"] != "draft":
        raise BroadcastAlreadyApproved(f"the broadcast is already {before['state']}")
    _check_version(before, data.version)
    approver = actor_label(operator)
    if approver == before["created_by"]:
        raise BroadcastSelfApproval(
            "a broadcast is approved by a different person from the one who created it"
        )
    channels = _channels(registry, before)
    problem = await wording.rendering_problem(
        conn, operator.tenant_id, registry, before["kind"], channels
    )
    if problem is not None:
        raise BroadcastTemplateInvalid(problem)
    # The registry may have changed since the draft was written.
    check_input(operator.tenant_id, registry, _as_input(before))
    after = await queries.approve(
        conn, operator.tenant_id, before["id"], expected_version=data.version, approver=approver
    )
    if after is None:
        raise BroadcastVersionConflict()
    await record_audit(
        conn,
        operator,
        "approve",
        ENTITY,
        str(after["public_id"]),
        field_changes(before, after, ("state", "approved_by", "approved_at", "version")),
    )
    return await _out(conn, after)


async def cancel_broadcast(
    conn: AsyncConnection, operator: Operator, broadcast_id: str
) -> BroadcastOut:
    """Cancel from draft, approved or sending (R-BCAST-11, R-BCAST-12)."""
    _require(operator, DELETE)
    before = await _find(conn, operator, broadcast_id)
    actor = actor_label(operator)
    after = await queries.cancel(conn, operator.tenant_id, before["id"], actor)
    if after is None:
        current = await _find(conn, operator, broadcast_id)
        if current["state"] in ("completed", "failed"):
            raise BroadcastCompleted(f"the broadcast has already {current['state']}")
        raise BroadcastCancelled("the broadcast is already cancelled")
    if after["event_id"] is not None:
        # No recipient is written after this commits: the fan-out's next batch finds the event
        # completed under its row lock. This waits for a batch in progress to commit.
        await fanout.halt(conn, after["event_id"], actor=actor)
        await releasing.cancel_deliveries(conn, after)
    await record_audit(
        conn,
        operator,
        "cancel",
        ENTITY,
        str(after["public_id"]),
        field_changes(before, after, ("state", "cancelled_at", "cancelled_by", "version")),
    )
    return await _out(conn, after)


async def audience_preview(
    conn: AsyncConnection, operator: Operator, broadcast_id: str
) -> AudiencePreview:
    """R-BCAST-16: how many people the audience reaches now (or reached at its freeze), and the
    first 20 of them by name, for a caller with _READ only. Reads keyset pages; writes nothing."""
    _require(operator, READ)
    row = await _find(conn, operator, broadcast_id)
    return await audiences.reach(
        conn, operator.tenant_id, row["audience"], created_until=row["audience_frozen_at"]
    )


async def report(conn: AsyncConnection, operator: Operator, broadcast_id: str) -> BroadcastReport:
    """R-BCAST-10: {channel: {status: n}} rebuilt from the delivery rows."""
    _require(operator, READ)
    row = await _find(conn, operator, broadcast_id)
    counts: dict[str, dict[str, int]] = {}
    recipients = 0
    if row["event_id"] is not None:
        for channel, status, n in await queries.delivery_counts(conn, row["event_id"]):
            counts.setdefault(channel, {})[status] = n
        recipients = await queries.recipient_count(conn, row["event_id"])
    return BroadcastReport(
        id=row["public_id"],
        state=row["state"],
        recipient_count=recipients,
        delivery_count=sum(n for by_status in counts.values() for n in by_status.values()),
        counts=counts,
    )


@dataclass(frozen=True)
class Status:
    """What `herald broadcasts status` shows: the state and the delivery rows' counts."""

    state: str
    recipients: int
    counts: dict[str, int]
    settled: bool

    @property
    def deliveries(self) -> int:
        return sum(self.counts.values())

    @property
    def finished(self) -> int:
        """Deliveries with no work ahead of them."""
        return sum(n for status, n in self.counts.items() if status not in IN_FLIGHT)

    @property
    def done(self) -> bool:
        return self.state in ("completed", "failed") or (self.state == "cancelled" and self.settled)

    def describe(self) -> str:
        return ", ".join(f"{status} {n}" for status, n in sorted(self.counts.items())) or "none yet"


async def status(conn: AsyncConnection, tenant_id: str, broadcast_id: str) -> Status:
    """For the operator's CLI (a database credential, so no permission check)."""
    operator = Operator(
        tenant_id=tenant_id,
        actor_kind="system",
        actor_id="cli",
        person_id=None,
        permissions=frozenset(),
        superadmin=True,
    )
    found = await report(conn, operator, broadcast_id)
    row = await _find(conn, operator, broadcast_id)
    counts: dict[str, int] = {}
    for by_status in found.counts.values():
        for name, n in by_status.items():
            counts[name] = counts.get(name, 0) + n
    return Status(
        state=found.state,
        recipients=found.recipient_count,
        counts=counts,
        settled=row["settled_at"] is not None,
    )


async def forget_operator(
    conn: AsyncConnection, tenant_id: str, external_id: str, public_id: uuid.UUID
) -> int:
    """Erasure of a person who operated broadcasts: their label becomes an erased one that is
    still theirs alone (their public id), so the two-person record keeps its shape."""
    return await queries.rename_actor(
        conn, tenant_id, f"person:{external_id}", f"person:erased:{public_id}"
    )


# ---------------------------------------------------------------------------------------------
# Helpers


def _channels(registry: Registry, row: RowMapping) -> list[str]:
    if row["channels"] is not None:
        return list(row["channels"])
    kind = registry.get(row["kind"])
    return list(kind.channels) if kind is not None else []


def _as_input(row: RowMapping) -> BroadcastInput:
    return BroadcastInput(
        title=row["title"],
        kind=row["kind"],
        variables=row["variables"],
        channels=row["channels"],
        audience=row["audience"],
        scheduled_for=row["scheduled_for"],
    )


def _require(operator: Operator, permission: str) -> None:
    editing.require(operator, permission, BroadcastNotFound)


def _require_draft(row: RowMapping) -> None:
    if row["state"] == "cancelled":
        raise BroadcastCancelled("a cancelled broadcast cannot be changed")
    if row["state"] != "draft":
        raise BroadcastNotDraft(f"the broadcast is {row['state']}; only a draft can be changed")


async def _find(conn: AsyncConnection, operator: Operator, broadcast_id: str) -> RowMapping:
    return await editing.find(conn, operator, broadcast_id, queries.find, BroadcastNotFound)


def _check_version(row: RowMapping, read: int) -> None:
    editing.check_version(row, read, BroadcastVersionConflict, "broadcast")


def _snapshot(row: RowMapping) -> dict[str, Any]:
    return {name: row[name] for name in (*FIELDS, "state", "version")}


async def _out(conn: AsyncConnection, row: RowMapping) -> BroadcastOut:
    counts: dict[str, int] = {}
    recipients = 0
    if row["event_id"] is not None:
        for _, status, n in await queries.delivery_counts(conn, row["event_id"]):
            counts[status] = counts.get(status, 0) + n
        recipients = await queries.recipient_count(conn, row["event_id"])

    def utc(name: str) -> Any:
        value = row[name]
        return value.astimezone(UTC) if value is not None else None

    return BroadcastOut(
        id=row["public_id"],
        state=row["state"],
        title=row["title"],
        kind=row["kind"],
        audience=row["audience"],
        channels=row["channels"],
        variables=row["variables"],
        scheduled_for=utc("scheduled_for"),
        created_by=row["created_by"],
        approved_by=row["approved_by"],
        approved_at=utc("approved_at"),
        audience_frozen_at=utc("audience_frozen_at"),
        event_id=row["event_public_id"],
        cancelled_at=utc("cancelled_at"),
        cancelled_by=row["cancelled_by"],
        completed_at=utc("completed_at"),
        settled_at=utc("settled_at"),
        counts=counts,
        recipient_count=recipients,
        version=row["version"],
        created_at=utc("created_at"),
        updated_at=utc("updated_at"),
    )
