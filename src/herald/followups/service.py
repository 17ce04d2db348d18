"""Follow-ups (DESIGN.md §5.2, seed 004 generalised): notify at armAt, remind once at
escalateAt, unless acknowledged first.

The host's four writes — arm, acknowledge, reopen, cancel — run in the caller's transaction, so
"mark absent" and "arm its follow-up", or "record the justification" and "acknowledge", commit
or roll back together (R-FOLLOW-10). Each is written once, as a *plan*: a generator that yields
the statements it needs and receives each one's row. `run_plan` drives a plan over a sync
connection, `run_plan_async` over an async one, so `arm()` and `aarm()` share their logic and
their statements instead of duplicating them (STYLE: the sync twin).

The sweep's two transitions (`claim`) are async only: one conditional UPDATE decides (zero rows:
someone else took it, or an acknowledgement or reopen got there first, and nothing is sent,
R-FOLLOW-24), and the event is recorded through the send path in the *same* transaction
(Herald's departure from R-FOLLOW-37, DESIGN.md §7): a crash before the commit leaves the
follow-up due and no event; after it, both. Exactly one event per transition.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar

from pydantic import ValidationError
from sqlalchemy import Connection, Executable
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.audience import service as audience
from herald.config import Settings, get_settings
from herald.errors import (
    AudienceInvalid,
    AudienceTooLarge,
    ChannelUnknown,
    FollowupInvalid,
    FollowupNotFound,
    HeraldError,
    SecretInVariables,
    TemplateNotFound,
    ValidationFailed,
    VariablesInvalid,
)
from herald.followups import queries
from herald.followups.schemas import KEY_PATTERN, FollowupArm, FollowupOut
from herald.kinds import Registry, get_registry
from herald.sending import service as sending
from herald.webhooks import service as webhooks

log = logging.getLogger(__name__)

T = TypeVar("T")
# Yields a statement, is sent the statement's first row (or None), returns the answer.
Plan = Generator[Executable, RowMapping | None, T]

Leg = Literal["notify", "remind"]
NOTIFY: Leg = "notify"
REMIND: Leg = "remind"

_KEY = re.compile(KEY_PATTERN)

# The send-path refusal → the field it is about.
_SEND_FIELDS: tuple[tuple[type[HeraldError], str], ...] = (
    (ChannelUnknown, "kind"),
    (AudienceInvalid, "audience"),
    (AudienceTooLarge, "audience"),
    (VariablesInvalid, "variables"),
    (SecretInVariables, "variables"),
)


# ---------------------------------------------------------------------------------------------
# Input


def parse_arm(raw: object) -> FollowupArm:
    """The body (or the library's keywords) as a FollowupArm; a shape error is a 400
    NOTIFICATION_FOLLOWUP_INVALID naming the first field at fault, never a 422."""
    if not isinstance(raw, Mapping):
        raise FollowupInvalid("body: a JSON object with the follow-up's fields is required")
    try:
        return FollowupArm.model_validate(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        location = error.get("loc", ())
        name = str(location[0]) if location else "body"
        raise FollowupInvalid(f"{name}: {error.get('msg', 'invalid value')}") from None


def check_arm(
    tenant_id: str, registry: Registry, data: FollowupArm, settings: Settings | None = None
) -> dict[str, Any]:
    """Every semantic check before anything is written: both kinds must take the audience and
    the variables exactly as send() would (so each transition's event can be recorded), and
    neither may carry a secret. Returns the row's values."""
    spec: dict[str, Any] = {}
    for field_name, kind_name in (("kind", data.kind), ("reminderKind", data.reminder_kind)):
        kind = registry.get(kind_name)
        if kind is None:
            raise FollowupInvalid(f"{field_name}: no kind named {kind_name!r} in the registry")
        if kind.secret_variables:
            raise FollowupInvalid(f"{field_name}: {kind.name} carries a secret")
        try:
            sending.prepare(
                sending.SendInput(
                    tenant_id=tenant_id,
                    kind=kind_name,
                    audience=data.audience,
                    variables=data.variables,
                ),
                registry,
            )
        except ValidationFailed as exc:
            if isinstance(exc, TemplateNotFound):
                raise FollowupInvalid(f"{field_name}: {exc.message}") from None
            where = next((f for cls, f in _SEND_FIELDS if isinstance(exc, cls)), "audience")
            raise FollowupInvalid(f"{where}: {exc.message}") from None
        spec = audience.validate_audience(data.audience)
    defaults = settings or (
        get_settings()
        if data.grace_seconds is None or data.reminder_delay_seconds is None
        else None
    )
    return {
        "key": data.key,
        "kind": data.kind,
        "reminder_kind": data.reminder_kind,
        "audience": spec,
        "variables": {key: str(value) for key, value in data.variables.items()},
        "grace_seconds": (
            data.grace_seconds
            if data.grace_seconds is not None
            else _minutes(defaults, "followup_grace_minutes")
        ),
        "reminder_delay_seconds": (
            data.reminder_delay_seconds
            if data.reminder_delay_seconds is not None
            else _minutes(defaults, "followup_reminder_delay_minutes")
        ),
    }


def _minutes(settings: Settings | None, name: str) -> int:
    assert settings is not None
    return int(getattr(settings, name)) * 60


# ---------------------------------------------------------------------------------------------
# Plans (written once, driven sync or async)


def arm_plan(
    tenant_id: str, values: Mapping[str, Any], *, covered: bool
) -> Plan[tuple[FollowupOut, bool]]:
    row = yield queries.arm(tenant_id, values, covered=covered)
    assert row is not None
    return to_out(row), bool(row["inserted"])


def _transition_plan(
    statement: Callable[[str, str], Executable], tenant_id: str, key: str
) -> Plan[FollowupOut]:
    """One compare-and-set; when it matches nothing the follow-up is either absent (404) or
    already where the call would put it (or beyond reach of it), and is answered as it is."""
    if not isinstance(key, str) or not _KEY.match(key):
        raise FollowupNotFound()
    row = yield statement(tenant_id, key)
    if row is None:
        row = yield queries.find(tenant_id, key)
        if row is None:
            raise FollowupNotFound()
    return to_out(row)


def acknowledge_plan(tenant_id: str, key: str) -> Plan[FollowupOut]:
    return _transition_plan(queries.acknowledge, tenant_id, key)


def reopen_plan(tenant_id: str, key: str) -> Plan[FollowupOut]:
    return _transition_plan(queries.reopen, tenant_id, key)


def cancel_plan(tenant_id: str, key: str) -> Plan[FollowupOut]:
    return _transition_plan(queries.cancel, tenant_id, key)


def find_plan(tenant_id: str, key: str) -> Plan[FollowupOut]:
    if not isinstance(key, str) or not _KEY.match(key):
        raise FollowupNotFound()
    row = yield queries.find(tenant_id, key)
    if row is None:
        raise FollowupNotFound()
    return to_out(row)


def run_plan(tx: Connection, plan: Plan[T]) -> T:
    try:
        statement = next(plan)
        while True:
            row = tx.execute(statement).mappings().first()
            statement = plan.send(row)
    except StopIteration as done:
        result: T = done.value
        return result


async def run_plan_async(tx: AsyncConnection, plan: Plan[T]) -> T:
    try:
        statement = next(plan)
        while True:
            row = (await tx.execute(statement)).mappings().first()
            statement = plan.send(row)
    except StopIteration as done:
        result: T = done.value
        return result


def to_out(row: RowMapping) -> FollowupOut:
    return FollowupOut(
        key=row["key"],
        state=row["state"],
        arm_at=row["arm_at"],
        notified_at=row["notified_at"],
        escalate_at=row["escalate_at"],
        reminded_at=row["reminded_at"],
        notify_event_id=row["notify_event_id"],
        reminder_event_id=row["reminder_event_id"],
    )


# ---------------------------------------------------------------------------------------------
# The library: herald.followups.arm / acknowledge / reopen / cancel and their async twins


@dataclass(frozen=True)
class Armed:
    followup: FollowupOut
    # False when the tenant already had a follow-up under that key (returned unchanged).
    created: bool


def _arm_input(
    tenant_id: str,
    key: str,
    kind: str,
    reminder_kind: str,
    audience_spec: Mapping[str, Any],
    variables: Mapping[str, Any] | None,
    grace_seconds: int | None,
    reminder_delay_seconds: int | None,
    covered: bool,
    registry: Registry | None,
) -> Plan[tuple[FollowupOut, bool]]:
    data = parse_arm(
        {
            "key": key,
            "kind": kind,
            "reminderKind": reminder_kind,
            "audience": dict(audience_spec),
            "variables": dict(variables or {}),
            "graceSeconds": grace_seconds,
            "reminderDelaySeconds": reminder_delay_seconds,
            "covered": covered,
        }
    )
    values = check_arm(tenant_id, registry or get_registry(), data)
    return arm_plan(tenant_id, values, covered=data.covered)


def arm(
    tx: Connection,
    tenant_id: str,
    key: str,
    *,
    kind: str,
    reminder_kind: str,
    audience: Mapping[str, Any],
    variables: Mapping[str, Any] | None = None,
    grace_seconds: int | None = None,
    reminder_delay_seconds: int | None = None,
    covered: bool = False,
    registry: Registry | None = None,
) -> Armed:
    """Arm a follow-up in the host's own (sync) transaction: `armed` with `armAt = now +
    grace`, or `not_required` when `covered` (it can never send). The same key again returns
    the existing follow-up unchanged (`created` false)."""
    sending.require_transaction(tx.in_transaction(), tx.get_isolation_level())
    plan = _arm_input(
        tenant_id, key, kind, reminder_kind, audience, variables,
        grace_seconds, reminder_delay_seconds, covered, registry,
    )  # fmt: skip
    followup, created = run_plan(tx, plan)
    return Armed(followup, created)


async def aarm(
    tx: AsyncConnection,
    tenant_id: str,
    key: str,
    *,
    kind: str,
    reminder_kind: str,
    audience: Mapping[str, Any],
    variables: Mapping[str, Any] | None = None,
    grace_seconds: int | None = None,
    reminder_delay_seconds: int | None = None,
    covered: bool = False,
    registry: Registry | None = None,
) -> Armed:
    """The async twin of arm(): same checks, same statement."""
    sending.require_transaction(tx.in_transaction(), await tx.get_isolation_level())
    plan = _arm_input(
        tenant_id, key, kind, reminder_kind, audience, variables,
        grace_seconds, reminder_delay_seconds, covered, registry,
    )  # fmt: skip
    followup, created = await run_plan_async(tx, plan)
    return Armed(followup, created)


def acknowledge(tx: Connection, tenant_id: str, key: str) -> FollowupOut:
    """Open → acknowledged, in the host's transaction (with the write that resolves it): not
    notified if armAt has not passed, not reminded if escalateAt has not (R-FOLLOW-10..13).
    Already acknowledged or not required: answered as it is."""
    sending.require_transaction(tx.in_transaction(), tx.get_isolation_level())
    return run_plan(tx, acknowledge_plan(tenant_id, key))


async def aacknowledge(tx: AsyncConnection, tenant_id: str, key: str) -> FollowupOut:
    sending.require_transaction(tx.in_transaction(), await tx.get_isolation_level())
    return await run_plan_async(tx, acknowledge_plan(tenant_id, key))


def reopen(tx: Connection, tenant_id: str, key: str) -> FollowupOut:
    """Acknowledged or not required → armed, timing fields cleared, `armAt = now + grace`: it
    will be notified again, and reminded again if still unacknowledged (R-FOLLOW-14). A
    follow-up still open is answered as it is (follow_up stays final: no third notification)."""
    sending.require_transaction(tx.in_transaction(), tx.get_isolation_level())
    return run_plan(tx, reopen_plan(tenant_id, key))


async def areopen(tx: AsyncConnection, tenant_id: str, key: str) -> FollowupOut:
    sending.require_transaction(tx.in_transaction(), await tx.get_isolation_level())
    return await run_plan_async(tx, reopen_plan(tenant_id, key))


def cancel(tx: Connection, tenant_id: str, key: str) -> FollowupOut:
    """Any state → not_required: nothing more is sent unless it is reopened."""
    sending.require_transaction(tx.in_transaction(), tx.get_isolation_level())
    return run_plan(tx, cancel_plan(tenant_id, key))


async def acancel(tx: AsyncConnection, tenant_id: str, key: str) -> FollowupOut:
    sending.require_transaction(tx.in_transaction(), await tx.get_isolation_level())
    return await run_plan_async(tx, cancel_plan(tenant_id, key))


async def get(tx: AsyncConnection, tenant_id: str, key: str) -> FollowupOut:
    return await run_plan_async(tx, find_plan(tenant_id, key))


# ---------------------------------------------------------------------------------------------
# The sweep's transitions


@dataclass(frozen=True)
class Candidate:
    id: int
    due_at: datetime


@dataclass(frozen=True)
class Transition:
    id: int
    tenant_id: str
    key: str
    leg: Leg
    cycle: int
    # None when the event could not be recorded (its kind left the registry): the claim stands.
    event_id: uuid.UUID | None


async def tenants_with_followups(conn: AsyncConnection) -> list[str]:
    return [row[0] for row in await conn.execute(queries.tenants_with_followups())]


async def candidates(
    conn: AsyncConnection,
    tenant_id: str,
    leg: Leg,
    *,
    after: tuple[datetime, int] | None,
    limit: int,
) -> list[Candidate]:
    scan = queries.notify_candidates if leg == NOTIFY else queries.remind_candidates
    rows = await conn.execute(scan(tenant_id, after=after, limit=limit))
    return [Candidate(row.id, row.due_at) for row in rows]


def occurrence_key(row_id: int, cycle: int, leg: Leg) -> str:
    """What identifies a transition's event: the row (never reused), its cycle (a reopen starts
    a new one) and the leg. Also what keeps N follow-ups with equal variables N events
    (R-FOLLOW-35), where a `collapse` kind would otherwise fold them."""
    return f"followup:{row_id}:{cycle}:{leg}"


async def claim(
    conn: AsyncConnection, registry: Registry, tenant_id: str, row_id: int, leg: Leg
) -> Transition | None:
    """Claim one due follow-up for `leg` and record its event, in the caller's transaction (run
    as the follow-up's tenant). None: the claim matched no row, and nothing is written."""
    statement = queries.claim_notify if leg == NOTIFY else queries.claim_remind
    row = (await conn.execute(statement(tenant_id, row_id))).mappings().first()
    if row is None:
        return None  # R-FOLLOW-24: zero rows, no send
    kind = row["kind"] if leg == NOTIFY else row["reminder_kind"]
    send_input = sending.SendInput(
        tenant_id=tenant_id, kind=kind, audience=row["audience"], variables=row["variables"]
    )
    event_id: uuid.UUID | None = None
    try:
        result = await sending.record_occurrence(
            conn,
            send_input,
            registry=registry,
            occurrence_key=occurrence_key(row["id"], row["cycle"], leg),
        )
    except ValidationFailed as exc:
        # The registry changed under a stored follow-up (a kind removed, a variable renamed):
        # nothing was written for the event; the claim stands rather than retry forever
        # (R-FOLLOW-38). Codes and ids only in the log, never the variables.
        log.error(
            "follow-up %s (tenant %s): %s event not recorded (%s); the claim stands",
            row["id"],
            tenant_id,
            leg,
            exc.code,
        )
    else:
        event_id = result.id
        column = "notify_event_id" if leg == NOTIFY else "reminder_event_id"
        await conn.execute(
            queries.stamp_event(tenant_id, row["id"], column=column, event_id=event_id)
        )
        if leg == REMIND:
            await webhooks.emit(
                conn,
                tenant_id,
                "followup.reminded",
                {"followupKey": row["key"], "cycle": row["cycle"], "eventId": event_id},
            )
    return Transition(
        id=row["id"],
        tenant_id=tenant_id,
        key=row["key"],
        leg=leg,
        cycle=row["cycle"],
        event_id=event_id,
    )
