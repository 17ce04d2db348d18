"""Reminder schedules: the admin side (R-REMIND-1..3, R-REMIND-18) and one occurrence's firing
(R-REMIND-4..7).

A schedule names a kind, its variables and channels, any audience spec, an IANA zone, a local
`HH:MM` and ISO weekdays. Every field is checked before anything is written, and a refusal is a
400 NOTIFICATION_REMINDER_INVALID whose message starts with the field's name. The kind, channels,
audience and variables are checked by the send path itself (`sending.prepare`), so a schedule
is accepted exactly when its occurrences' events would be.

Changes are compare-and-sets on the version read, each with an audit record in the same
transaction. Permissions: NotificationReminder_READ to list and read (and preview, and see
runs), _CREATE, _UPDATE, _DELETE; an id-addressed route answers 404 to a caller without the
permission, a list answers an empty page.

Firing (`fire_occurrence`, called by the scheduler, one transaction per occurrence): lock the
schedule still at the occurrence it was seen at, record the occurrence's event through the send
path (deduplicated on schedule id + instant), record the run, and move `next_run_at` past it.
A crash anywhere before the commit leaves the occurrence due and unrecorded; after it, done. A
scheduler back from an outage fires only the latest missed occurrence, and only if it is at most
`reminder_max_lateness_minutes` late; the others are recorded as `missed`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import AwareDatetime, TypeAdapter, ValidationError
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.admin import editing, paging
from herald.admin.paging import Page
from herald.audience import service as audience
from herald.audit.service import actor_label, field_changes, record_audit
from herald.auth.service import Operator
from herald.db import tenancy
from herald.errors import (
    CursorInvalid,
    ReminderInvalid,
    ReminderNotFound,
    ReminderVersionConflict,
    ValidationFailed,
)
from herald.kinds import Registry
from herald.scheduling import clock, sendable
from herald.scheduling.reminders import queries
from herald.scheduling.reminders.schemas import (
    OccurrenceOut,
    OccurrencePage,
    ReminderInput,
    ReminderOut,
    ReminderPage,
    ReminderUpdate,
    RunOut,
    RunPage,
)
from herald.sending import service as sending

READ = "NotificationReminder_READ"
CREATE = "NotificationReminder_CREATE"
UPDATE = "NotificationReminder_UPDATE"
DELETE = "NotificationReminder_DELETE"

ENTITY = "reminder_schedule"
FIELDS = (
    "name",
    "kind",
    "variables",
    "channels",
    "audience",
    "timezone",
    "local_time",
    "weekdays",
    "enabled",
)
AUDITED_FIELDS = (*FIELDS, "version")

MAX_OCCURRENCES = 50
DEFAULT_OCCURRENCES = 10
# A scheduler back from a long outage records at most this many `missed` runs per schedule
# (the latest ones); it never floods either the runs or the recipients.
MAX_MISSED_RECORDED = 50


# ---------------------------------------------------------------------------------------------
# Input


@dataclass(frozen=True)
class Checked:
    """A schedule whose every field passed, in the form it is stored."""

    values: dict[str, Any]
    version: int | None = None


def _invalid(field_name: str, message: str) -> ReminderInvalid:
    return ReminderInvalid(f"{field_name}: {message}")


def parse_body(raw: object, *, with_version: bool) -> ReminderInput:
    """The JSON body as a ReminderInput (ReminderUpdate with `with_version`); a shape error is a
    400 naming the first field at fault, never a 422."""
    model = ReminderUpdate if with_version else ReminderInput
    if not isinstance(raw, Mapping):
        raise ReminderInvalid("body: a JSON object with the schedule's fields is required")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        location = error.get("loc", ())
        name = str(location[0]) if location else "body"
        raise _invalid(name, str(error.get("msg", "invalid value"))) from None


def check_input(tenant_id: str, registry: Registry, data: ReminderInput) -> Checked:
    """Every semantic check, in field order; raises before anything is written."""
    try:
        clock.zone(data.timezone)
    except ValueError:
        raise _invalid(
            "timezone", f"{data.timezone!r} is not an IANA time zone name (like Asia/Kathmandu)"
        ) from None
    try:
        clock.parse_local_time(data.local_time)
    except ValueError:
        raise _invalid(
            "localTime", f"{data.local_time!r} is not a local time HH:MM from 00:00 to 23:59"
        ) from None
    weekdays = _checked_weekdays(data.weekdays)
    # A secret is read from the vault once; a schedule would send it at most once.
    kind = sendable.checked_kind(
        tenant_id,
        registry,
        kind=data.kind,
        audience=data.audience,
        channels=data.channels,
        variables=data.variables,
        invalid=_invalid,
        secret_refusal="cannot be scheduled",
    )
    values = {
        "name": data.name,
        "kind": kind.name,
        "variables": {key: str(value) for key, value in data.variables.items()},
        "channels": list(dict.fromkeys(data.channels)) if data.channels is not None else None,
        "audience": audience.validate_audience(data.audience),
        "timezone": data.timezone,
        "local_time": data.local_time,
        "weekdays": weekdays,
        "enabled": data.enabled,
    }
    version = data.version if isinstance(data, ReminderUpdate) else None
    return Checked(values=values, version=version)


def _checked_weekdays(weekdays: list[int]) -> list[int]:
    if not weekdays:
        raise _invalid("weekdays", "at least one ISO weekday (1 Monday … 7 Sunday)")
    for day in weekdays:
        if day not in clock.ISO_WEEKDAYS:
            raise _invalid("weekdays", f"{day} is not an ISO weekday (1 Monday … 7 Sunday)")
    if len(set(weekdays)) != len(weekdays):
        raise _invalid("weekdays", "a weekday appears more than once")
    return sorted(weekdays)


_INSTANT: TypeAdapter[datetime] = TypeAdapter(AwareDatetime)


def parse_occurrence_query(
    after: str | None, count: str | int | None
) -> tuple[datetime | None, int]:
    moment: datetime | None = None
    if after is not None:
        try:
            moment = _INSTANT.validate_python(after)
        except ValidationError:
            raise _invalid("after", "an ISO 8601 instant with its offset is required") from None
    number = DEFAULT_OCCURRENCES
    if count is not None:
        try:
            number = int(count)
        except ValueError:
            raise _invalid("count", f"a whole number from 1 to {MAX_OCCURRENCES}") from None
        if not 1 <= number <= MAX_OCCURRENCES:
            raise _invalid("count", f"a whole number from 1 to {MAX_OCCURRENCES}")
    return moment, number


def next_run_at(values: Mapping[str, Any], now: datetime) -> datetime | None:
    """The first occurrence after `now`, or None for a disabled schedule."""
    if not values["enabled"]:
        return None
    return clock.next_occurrence(
        now,
        clock.zone(values["timezone"]),
        clock.parse_local_time(values["local_time"]),
        values["weekdays"],
    )


# ---------------------------------------------------------------------------------------------
# Admin


async def create_reminder(
    conn: AsyncConnection, operator: Operator, registry: Registry, raw: object
) -> ReminderOut:
    _require(operator, CREATE)
    checked = check_input(operator.tenant_id, registry, parse_body(raw, with_version=False))
    now = await queries.now(conn)
    values = {**checked.values, "next_run_at": next_run_at(checked.values, now)}
    row = await queries.insert_schedule(
        conn, operator.tenant_id, values, actor=actor_label(operator)
    )
    await record_audit(conn, operator, "create", ENTITY, str(row["public_id"]), _snapshot(row))
    return _out(row)


async def list_reminders(conn: AsyncConnection, operator: Operator, page: Page) -> ReminderPage:
    if not operator.may(READ):
        return ReminderPage(items=[], next_cursor=None)
    after = paging.decode_cursor(page.cursor, "r", (int,))[0] if page.cursor is not None else None
    if after is not None and not isinstance(after, int):
        raise CursorInvalid()
    rows = await queries.list_page(conn, operator.tenant_id, after_id=after, limit=page.limit + 1)
    chosen, more = rows[: page.limit], len(rows) > page.limit
    return ReminderPage(
        items=[_out(row) for row in chosen],
        next_cursor=paging.encode_cursor("r", chosen[-1]["id"]) if more else None,
    )


async def exists_named(conn: AsyncConnection, tenant_id: str, name: str) -> bool:
    """Whether the tenant has a schedule called `name` (the demo loader's idempotence)."""
    return await queries.exists_named(conn, tenant_id, name)


async def get_reminder(conn: AsyncConnection, operator: Operator, reminder_id: str) -> ReminderOut:
    _require(operator, READ)
    return _out(await _find(conn, operator, reminder_id))


async def update_reminder(
    conn: AsyncConnection, operator: Operator, registry: Registry, reminder_id: str, raw: object
) -> ReminderOut:
    """Replace the whole schedule; `next_run_at` is recomputed from now."""
    _require(operator, UPDATE)
    checked = check_input(operator.tenant_id, registry, parse_body(raw, with_version=True))
    assert checked.version is not None
    before = await _find(conn, operator, reminder_id)
    _check_version(before, checked.version)
    now = await queries.now(conn)
    changes = {**checked.values, "next_run_at": next_run_at(checked.values, now)}
    after = await queries.compare_and_set(
        conn,
        operator.tenant_id,
        before["id"],
        expected_version=checked.version,
        changes=changes,
        actor=actor_label(operator),
    )
    if after is None:
        raise ReminderVersionConflict()
    await record_audit(
        conn,
        operator,
        "update",
        ENTITY,
        str(after["public_id"]),
        field_changes(before, after, AUDITED_FIELDS),
    )
    return _out(after)


async def delete_reminder(
    conn: AsyncConnection, operator: Operator, reminder_id: str, version: int | None
) -> None:
    """Remove the schedule and its runs; the events it already recorded stay. With `version`,
    only if still current."""
    _require(operator, DELETE)
    before = await _find(conn, operator, reminder_id)
    if version is not None:
        _check_version(before, version)
    removed = await queries.delete_schedule(
        conn, operator.tenant_id, before["id"], expected_version=before["version"]
    )
    if removed is None:
        raise ReminderVersionConflict()
    await record_audit(
        conn, operator, "delete", ENTITY, str(removed["public_id"]), _snapshot(removed)
    )


async def preview_occurrences(
    conn: AsyncConnection,
    operator: Operator,
    reminder_id: str,
    after: datetime | None,
    count: int,
) -> OccurrencePage:
    """The next `count` occurrences after `after` (default now): pure computation, sends nothing
    and writes nothing. Computed for a disabled schedule too (what it would do if enabled)."""
    _require(operator, READ)
    row = await _find(conn, operator, reminder_id)
    start = after if after is not None else await queries.now(conn)
    tz = clock.zone(row["timezone"])
    instants = clock.occurrences(
        start, tz, clock.parse_local_time(row["local_time"]), row["weekdays"], count
    )
    return OccurrencePage(
        items=[
            OccurrenceOut(at=instant, local_at=instant.astimezone(tz).isoformat())
            for instant in instants
        ]
    )


async def list_runs(
    conn: AsyncConnection, operator: Operator, reminder_id: str, page: Page
) -> RunPage:
    """Past occurrences, newest first: fired (with the event), missed or failed."""
    _require(operator, READ)
    row = await _find(conn, operator, reminder_id)
    before = None
    if page.cursor is not None:
        occurrence, run_id = paging.decode_cursor(page.cursor, "u", (str, int))
        if not isinstance(occurrence, str) or not isinstance(run_id, int):
            raise CursorInvalid()
        try:
            before = (datetime.fromisoformat(occurrence), run_id)
        except ValueError:
            raise CursorInvalid() from None
    rows = await queries.runs_page(
        conn, operator.tenant_id, row["id"], before=before, limit=page.limit + 1
    )
    chosen, more = rows[: page.limit], len(rows) > page.limit
    return RunPage(
        items=[
            RunOut(
                occurrence=r["occurrence"].astimezone(UTC),
                event_id=r["event_public_id"],
                state=r["state"],
                error_code=r["error_code"],
                recorded_at=r["created_at"].astimezone(UTC),
            )
            for r in chosen
        ],
        next_cursor=(
            paging.encode_cursor("u", chosen[-1]["occurrence"].isoformat(), chosen[-1]["id"])
            if more
            else None
        ),
    )


# ---------------------------------------------------------------------------------------------
# Firing (the scheduler)


@dataclass(frozen=True)
class DueSchedule:
    id: int
    tenant_id: str
    next_run_at: datetime


@dataclass
class OccurrenceOutcome:
    schedule_id: uuid.UUID
    tenant_id: str
    occurrence: datetime
    state: str
    event_id: uuid.UUID | None = None
    error_code: str | None = None
    missed: list[datetime] = field(default_factory=list)
    next_run_at: datetime | None = None


async def due_schedules(conn: AsyncConnection, *, limit: int) -> list[DueSchedule]:
    rows = await queries.due_schedules(conn, limit=limit)
    return [DueSchedule(r["id"], r["tenant_id"], r["next_run_at"]) for r in rows]


def occurrence_key(schedule_public_id: uuid.UUID, occurrence: datetime) -> str:
    """What identifies one occurrence's event: the schedule and the UTC instant."""
    instant = occurrence.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"reminder:{schedule_public_id}:{instant}"


async def fire_occurrence(
    conn: AsyncConnection,
    registry: Registry,
    due: DueSchedule,
    *,
    max_lateness: timedelta,
) -> OccurrenceOutcome | None:
    """Claim the schedule's due occurrence, record its event and its run, and advance
    `next_run_at`, all in the caller's one transaction. None when another scheduler has it
    locked or has already moved it on (nothing is written). Runs as the schedule's tenant: the due
    scan that found it is cross-tenant and read ids only."""
    await tenancy.enter_tenant(conn, due.tenant_id)
    row = await queries.lock_occurrence(conn, due.tenant_id, due.id, due.next_run_at)
    if row is None:
        return None
    now: datetime = row["now"]
    tz = clock.zone(row["timezone"])
    at = clock.parse_local_time(row["local_time"])
    claimed: datetime = row["next_run_at"]
    # The claimed boundary, then every later occurrence that has also come (a scheduler that
    # was down); only the latest may fire.
    later = clock.occurrences_through(
        claimed + timedelta(microseconds=1), now, tz, at, row["weekdays"], MAX_MISSED_RECORDED
    )
    due_instants = [claimed, *later][-(MAX_MISSED_RECORDED + 1) :]
    latest = due_instants[-1]
    outcome = OccurrenceOutcome(
        schedule_id=row["public_id"],
        tenant_id=due.tenant_id,
        occurrence=latest,
        state="missed",
        missed=due_instants[:-1],
    )
    runs: list[dict[str, Any]] = [{"occurrence": m, "state": "missed"} for m in outcome.missed]
    if now - latest <= max_lateness:
        send_input = sending.SendInput(
            tenant_id=due.tenant_id,
            kind=row["kind"],
            audience=row["audience"],
            channels=row["channels"],
            variables=row["variables"],
        )
        try:
            result = await sending.record_occurrence(
                conn,
                send_input,
                registry=registry,
                occurrence_key=occurrence_key(row["public_id"], latest),
            )
        except ValidationFailed as exc:
            # The registry changed under a stored schedule (a kind removed, a variable renamed):
            # record why, and move on rather than retry an occurrence that can never fire.
            outcome.state, outcome.error_code = "failed", exc.code
        else:
            outcome.state, outcome.event_id = "fired", result.id
    runs.append(
        {
            "occurrence": latest,
            "state": outcome.state,
            "event_public_id": outcome.event_id,
            "error_code": outcome.error_code,
        }
    )
    for run in runs:
        run.setdefault("event_public_id", None)
        run.setdefault("error_code", None)
    await queries.insert_runs(conn, due.tenant_id, due.id, runs)
    outcome.next_run_at = clock.next_occurrence(max(latest, now), tz, at, row["weekdays"])
    if not await queries.advance(
        conn, due.tenant_id, due.id, claimed=claimed, next_run_at=outcome.next_run_at
    ):
        # Unreachable while the row is locked; refuse to commit a half-claimed occurrence.
        raise RuntimeError("the reminder schedule moved while it was locked")
    return outcome


# ---------------------------------------------------------------------------------------------
# Helpers


def _require(operator: Operator, permission: str) -> None:
    editing.require(operator, permission, ReminderNotFound)


async def _find(conn: AsyncConnection, operator: Operator, reminder_id: str) -> RowMapping:
    return await editing.find(conn, operator, reminder_id, queries.find, ReminderNotFound)


def _check_version(row: RowMapping, read: int) -> None:
    editing.check_version(row, read, ReminderVersionConflict, "reminder")


def _snapshot(row: RowMapping) -> dict[str, Any]:
    return {name: row[name] for name in (*FIELDS, "next_run_at", "version")}


def _out(row: RowMapping) -> ReminderOut:
    next_at = row["next_run_at"]
    return ReminderOut(
        id=row["public_id"],
        name=row["name"],
        kind=row["kind"],
        variables=row["variables"],
        channels=row["channels"],
        audience=row["audience"],
        timezone=row["timezone"],
        local_time=row["local_time"],
        weekdays=row["weekdays"],
        enabled=row["enabled"],
        next_run_at=next_at.astimezone(UTC) if next_at is not None else None,
        version=row["version"],
        created_by=row["created_by"],
        updated_by=row["updated_by"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
