"""send()/asend(): validate, build the dedupe key, insert the event in the caller's transaction.

send() writes one row and a transactional wake-up, and returns (R-SEND-2): it resolves no
audience, renders nothing, reads no preference and contacts no provider, so it is safe inside any
business transaction. Every check runs before the write (R-SEND-4), in the order the seed fixes
(R-SEND-5): known kind, buildable channels, audience caps, action URL, dedupe key. Variables are
checked between the action URL and the dedupe key (the seed names no step for them).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from sqlalchemy import Connection, TextClause
from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.audience import service as audience
from herald.errors import (
    ActionUrlForbidden,
    ChannelUnknown,
    DeliverAtInvalid,
    EventAlreadyCancelled,
    EventFanoutStarted,
    EventNotFound,
    HeraldError,
    SecretAudienceInvalid,
    SecretInVariables,
    SendOutsideTransaction,
    TemplateNotFound,
    VariablesInvalid,
)
from herald.kinds import Kind, Registry, get_registry
from herald.observability import logs, tracing
from herald.rendering.urls import is_safe_action_url
from herald.scheduling import clock
from herald.sending import queries

log = logging.getLogger(__name__)

# Written as an escape, never a raw byte in the source (R-PLAT, R-DEDUPE-8).
SEPARATOR = "\x00"
MAX_VARIABLES = 50
MAX_VARIABLE_LENGTH = 10_000
SECRET_REF = re.compile(r"^[a-z][a-z0-9_]{0,63}:[A-Za-z0-9._~-]{1,200}$")
_WHITESPACE = re.compile(r"\s+")
_ISO_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")


@dataclass(frozen=True)
class SendInput:
    """What the host says happened and whom to tell.

    `request_id` is the caller's idempotency key: a `repeatable` kind folds it into the dedupe key
    (none given: every call is a new event); a `collapse` kind ignores it.
    """

    tenant_id: str
    kind: str
    audience: Mapping[str, Any]
    channels: Sequence[str] | None = None
    variables: Mapping[str, Any] = field(default_factory=dict)
    action_url: str | None = None
    scheduled_for: datetime | None = None
    request_id: str | None = None
    # deliverAt (issue 45): each recipient's own wall-clock time HH:MM, optionally on one local
    # date YYYY-MM-DD (herald.scheduling.clock; docs/sending-and-delivery.md).
    deliver_local_time: str | None = None
    deliver_local_date: str | None = None


@dataclass(frozen=True)
class SendResult:
    id: uuid.UUID
    created: bool


@dataclass(frozen=True)
class _Prepared:
    """The one statement that records the event and wakes the fan-out (one round trip)."""

    statement: TextClause
    params: dict[str, Any]


def prepare(
    input: SendInput,
    registry: Registry,
    *,
    occurrence_key: str | None = None,
    audience_frozen_at: datetime | None = None,
) -> _Prepared:
    """Run every validation step and build the statements; raises before anything is written.

    `occurrence_key` is for the scheduler: the event of one occurrence of something scheduled
    (a reminder) is identified by that occurrence alone, whatever the kind's policy, so the
    occurrence records one event however often it is retried (R-REMIND-6).
    """
    kind = _known_kind(registry, input.kind)  # 1 (R-SEND-6)
    channels = _buildable_channels(kind, input.channels)  # 2 (R-SEND-7)
    spec = audience.validate_audience(input.audience)  # 3 (R-SEND-8..10)
    if kind.secret_variables:
        _single_destination(kind, spec, channels)
    if input.action_url is not None and not is_safe_action_url(
        input.action_url
    ):  # 4 (R-SEND-11/12)
        raise ActionUrlForbidden()
    variables = _checked_variables(kind, input.variables)
    _checked_request_id(input.request_id)
    scheduled_for = _aware(input.scheduled_for)
    deliver_time, deliver_date = checked_deliver_at(input, datetime.now(UTC))
    dedupe_key = (
        build_occurrence_dedupe_key(occurrence_key)
        if occurrence_key is not None
        else build_dedupe_key(
            kind,
            spec,
            variables,
            input.action_url,
            scheduled_for,
            input.request_id,
            deliver_at=_deliver_material(deliver_time, deliver_date),
        )
    )  # 5
    values: dict[str, Any] = {
        "tenant_id": input.tenant_id,
        "kind": kind.name,
        "category": kind.category,
        "priority": kind.priority,
        "audience": spec,
        "channels": channels,
        "variables": variables,
        "action_url": input.action_url,
        "dedupe_key": dedupe_key,
        "request_id": input.request_id,
        "scheduled_for": scheduled_for,
        "deliver_local_time": deliver_time,
        "deliver_local_date": deliver_date,
        # What ties the worker's log lines and spans to the request that recorded the event.
        "origin_request_id": logs.current_request_id(),
        "traceparent": tracing.current_traceparent(),
    }
    if audience_frozen_at is not None:
        # A broadcast's frozen audience (R-BCAST-8); only the scheduler sets it.
        values["audience_frozen_at"] = audience_frozen_at
    return _Prepared(*queries.record_and_wake(values))


def send(
    tx: Connection, input: SendInput, *, registry: Registry | None = None, best_effort: bool = False
) -> SendResult | None:
    """Record the event on the host's own (sync) transaction; commits or rolls back with it (R-SEND-3).

    With best_effort=True the insert runs in a SAVEPOINT and any failure is rolled back to it,
    logged and swallowed, so the host's business write still commits (Herald's decision 8,
    R-SEND-13). It then returns None.
    """
    require_transaction(tx.in_transaction(), _isolation_level(tx.connection.dbapi_connection, tx))
    if not best_effort:
        return _send_sync(tx, input, registry)
    try:
        with tx.begin_nested():
            return _send_sync(tx, input, registry)
    except Exception as exc:  # a notification must not cost the host its own write
        _log_best_effort_failure(input, exc)
        return None


async def asend(
    tx: AsyncConnection,
    input: SendInput,
    *,
    registry: Registry | None = None,
    best_effort: bool = False,
) -> SendResult | None:
    """The async twin of send(): same statements, same guarantees."""
    raw = tx.sync_connection.connection.dbapi_connection if tx.sync_connection else None
    level = _isolation_level(raw, None) or await tx.get_isolation_level()
    require_transaction(tx.in_transaction(), level)
    if not best_effort:
        return await _send_async(tx, input, registry)
    try:
        async with tx.begin_nested():
            return await _send_async(tx, input, registry)
    except Exception as exc:
        _log_best_effort_failure(input, exc)
        return None


async def record_event(tx: AsyncConnection, input: SendInput, *, registry: Registry) -> SendResult:
    """asend() without best-effort: for callers that always want a result (the route, the CLI)."""
    return await _send_async(tx, input, registry)


async def record_occurrence(
    tx: AsyncConnection,
    input: SendInput,
    *,
    registry: Registry,
    occurrence_key: str,
    audience_frozen_at: datetime | None = None,
) -> SendResult:
    """The event of one scheduled occurrence, in the scheduler's transaction: the same checks,
    insert and wake-up as asend(), deduplicated on `occurrence_key` (`created` is false when the
    occurrence already has its event). `audience_frozen_at` (a broadcast's release) leaves
    people created after it out of the fan-out."""
    prepared = prepare(
        input, registry, occurrence_key=occurrence_key, audience_frozen_at=audience_frozen_at
    )
    row = (await tx.execute(prepared.statement, prepared.params)).one()
    return SendResult(id=row.public_id, created=bool(row.inserted))


def _send_sync(tx: Connection, input: SendInput, registry: Registry | None) -> SendResult:
    prepared = prepare(input, registry or get_registry())
    row = tx.execute(prepared.statement, prepared.params).one()
    return SendResult(id=row.public_id, created=bool(row.inserted))


async def _send_async(
    tx: AsyncConnection, input: SendInput, registry: Registry | None
) -> SendResult:
    prepared = prepare(input, registry or get_registry())
    row = (await tx.execute(prepared.statement, prepared.params)).one()
    return SendResult(id=row.public_id, created=bool(row.inserted))


def _isolation_level(dbapi_connection: Any, tx: Connection | None) -> str:
    """What require_transaction() needs — "AUTOCOMMIT" or not — read from the
    driver's own flag instead of asking the server (get_isolation_level() is a round trip,
    a fifth of send()'s cost in bench/send.py). SQLAlchemy's AUTOCOMMIT level sets exactly that
    flag. A driver without the flag falls back to asking (sync) or to "" (async: the caller
    asks)."""
    autocommit = getattr(dbapi_connection, "autocommit", None)
    if isinstance(autocommit, bool):
        return "AUTOCOMMIT" if autocommit else "TRANSACTIONAL"
    return tx.get_isolation_level() if tx is not None else ""


def require_transaction(in_transaction: bool, isolation_level: str) -> None:
    # An autocommit connection would commit the event on its own, independently of the business
    # write it describes (R-SEND-3); refuse it rather than guess.
    if not in_transaction or isolation_level == "AUTOCOMMIT":
        raise SendOutsideTransaction()


def _log_best_effort_failure(input: SendInput, exc: Exception) -> None:
    code = exc.code if isinstance(exc, HeraldError) else type(exc).__name__
    # Never the variables: they may be the very thing that failed validation (a secret).
    log.error(
        "best-effort send of %s for tenant %s failed (%s); host transaction kept",
        input.kind,
        input.tenant_id,
        code,
    )


def _checked_request_id(request_id: str | None) -> str | None:
    if request_id is not None and (not request_id.isprintable() or len(request_id) > 200):
        raise VariablesInvalid("the Idempotency-Key must be printable and at most 200 characters")
    return request_id


def _known_kind(registry: Registry, name: str) -> Kind:
    kind = registry.get(name)
    if kind is None:
        raise TemplateNotFound(f"no kind named {name!r} in the registry")
    return kind


def _single_destination(kind: Kind, spec: Mapping[str, Any], channels: Sequence[str]) -> None:
    """A secret reference is read once (R-SECRET-9), so a kind that carries one goes to one person
    on one channel: a second delivery would find the vault empty and the person would get one of
    two messages at random."""
    ids = spec.get("userIds") if spec.get("kind") == "users" else None
    if not ids or len(ids) != 1 or len(channels) != 1:
        raise SecretAudienceInvalid(
            f"{kind.name} carries a secret: send it to one person (users, one id) on one channel"
        )


def _buildable_channels(kind: Kind, requested: Sequence[str] | None) -> list[str]:
    if requested is None:
        return list(kind.channels)
    if not requested:
        raise ChannelUnknown("channels, when given, must name at least one channel")
    unknown = [c for c in requested if c not in kind.channels]
    if unknown:
        raise ChannelUnknown(f"{kind.name} has no builder for {', '.join(map(str, unknown))}")
    # Keep the caller's order, drop repeats.
    return list(dict.fromkeys(requested))


def _checked_variables(kind: Kind, variables: Mapping[str, Any]) -> dict[str, str]:
    if not isinstance(variables, Mapping):
        raise VariablesInvalid("variables must be an object")
    if len(variables) > MAX_VARIABLES:
        raise VariablesInvalid(f"at most {MAX_VARIABLES} variables")
    checked: dict[str, str] = {}
    for key, value in variables.items():
        if key == "secretRef":
            if not kind.secret_variables:
                raise VariablesInvalid(f"{kind.name} takes no secretRef")
            if not isinstance(value, str) or not SECRET_REF.match(value):
                raise VariablesInvalid("secretRef must look like '<type>:<id>'")
            checked[key] = value
            continue
        # R-SECRET-3: the secret itself never reaches the event row.
        if key in kind.secret_variables or key in vocabulary.FORBIDDEN_VARIABLE_KEYS:
            raise SecretInVariables(
                f"{key!r} is a secret: stash it and pass {{'secretRef': …}} instead"
            )
        if key not in kind.variables:
            raise VariablesInvalid(f"{kind.name} declares no variable {key!r}")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise VariablesInvalid(f"variable {key!r} must be a string or a number")
        text = str(value)
        if "\x00" in text or "\x00" in key:
            # jsonb cannot store NUL: refuse it as the caller's mistake, never a 500.
            raise VariablesInvalid(f"variable {key!r} contains a NUL character")
        if len(text) > MAX_VARIABLE_LENGTH:
            raise VariablesInvalid(
                f"variable {key!r} is longer than {MAX_VARIABLE_LENGTH} characters"
            )
        checked[key] = text
    missing = [name for name in kind.variables if name not in checked]
    if missing:
        raise VariablesInvalid(f"{kind.name} needs {', '.join(missing)}")
    if kind.secret_variables and "secretRef" not in checked:
        raise VariablesInvalid(f"{kind.name} needs a secretRef")
    return checked


# The wall clocks furthest behind and ahead of UTC (Etc/GMT+12, Pacific/Kiritimati).
_LATEST_OFFSET = timedelta(hours=12)
_MAX_AHEAD = timedelta(days=366)


def checked_deliver_at(input: SendInput, now: datetime) -> tuple[time | None, date | None]:
    """deliverAt's local time and date, or DeliverAtInvalid before anything is written. A date's
    time is "in the past" once it has passed on every clock on Earth (at UTC-12): a recipient for
    whom it has passed but for whom the event is still news gets it at once."""
    if input.deliver_local_time is None:
        if input.deliver_local_date is not None:
            raise DeliverAtInvalid("deliverAt needs a localTime")
        return None, None
    if input.scheduled_for is not None:
        raise DeliverAtInvalid("give deliverAt or scheduledFor, not both")
    try:
        at = clock.parse_local_time(input.deliver_local_time)
    except ValueError:
        raise DeliverAtInvalid(
            f"deliverAt.localTime {input.deliver_local_time[:16]!r} is not HH:MM from 00:00 to 23:59"
        ) from None
    if input.deliver_local_date is None:
        return at, None
    try:
        if not _ISO_DATE.match(input.deliver_local_date):
            raise ValueError
        day = date.fromisoformat(input.deliver_local_date)
    except ValueError:
        raise DeliverAtInvalid(
            f"deliverAt.date {input.deliver_local_date[:32]!r} is not a calendar date YYYY-MM-DD"
        ) from None
    latest = datetime.combine(day, at, tzinfo=UTC) + _LATEST_OFFSET
    if latest <= now:
        raise DeliverAtInvalid(
            f"deliverAt {day.isoformat()} {at.strftime('%H:%M')} has passed in every time zone"
        )
    if latest - now > _MAX_AHEAD:
        raise DeliverAtInvalid("deliverAt.date is more than a year ahead")
    return at, day


def _deliver_material(at: time | None, day: date | None) -> str | None:
    if at is None:
        return None
    return at.strftime("%H:%M") + ("" if day is None else " " + day.isoformat())


def _aware(moment: datetime | None) -> datetime | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        raise VariablesInvalid("scheduledFor must carry a time zone")
    return moment.astimezone(UTC)


def _normalise(value: Any) -> Any:
    """Whitespace-normalise every string in the material, so "foo " and "foo" fold (R-DEDUPE-7)."""
    if isinstance(value, str):
        return _WHITESPACE.sub(" ", value).strip()
    if isinstance(value, Mapping):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalise(v) for v in value]
    return value


def build_dedupe_key(
    kind: Kind,
    audience_spec: Mapping[str, Any],
    variables: Mapping[str, str],
    action_url: str | None,
    scheduled_for: datetime | None,
    request_id: str | None,
    *,
    deliver_at: str | None = None,
) -> str:
    """sha256 hex of the NUL-joined key material: always 64 characters (R-DEDUPE-6).

    collapse folds the domain facts only (R-DEDUPE-10); repeatable adds the caller's request id,
    or a fresh uuid when none is given, so each call is its own event (R-DEDUPE-11). The policy is
    the kind's, never the caller's (R-DEDUPE-9).
    """
    parts = [
        kind.name,
        json.dumps(
            _normalise(audience_spec), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ),
        json.dumps(
            _normalise(variables), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ),
        _normalise(action_url or ""),
        scheduled_for.isoformat() if scheduled_for else "",
    ]
    if deliver_at is not None:
        # Only when given, so every key built before deliverAt existed is unchanged.
        parts.append("deliverAt=" + deliver_at)
    if kind.dedupe == "repeatable":
        parts.append(_normalise(request_id) if request_id else uuid.uuid4().hex)
    return hashlib.sha256(SEPARATOR.join(parts).encode()).hexdigest()


def build_occurrence_dedupe_key(occurrence_key: str) -> str:
    """sha256 hex of a scheduled occurrence's identity (e.g. a schedule id and its instant),
    tagged so it can never equal a key built from an event's domain facts."""
    return hashlib.sha256(SEPARATOR.join(["occurrence", occurrence_key]).encode()).hexdigest()


def event_state(row: Mapping[str, Any]) -> str:
    if row["cancelled_at"] is not None:
        return "cancelled"
    if row["fanout_failed_at"] is not None:
        return "failed"
    if row["fanout_completed_at"] is not None:
        return "completed"
    if row["fanout_claimed_at"] is not None:
        return "fanning_out"
    if row["scheduled_for"] is not None and row["scheduled_for"] > row["now"]:
        return "scheduled"
    return "pending"


async def get_event(conn: AsyncConnection, tenant_id: str, public_id: uuid.UUID) -> dict[str, Any]:
    """The event's state and its delivery counts by status; 404 for another tenant's event."""
    row = await queries.event_status(conn, tenant_id, public_id)
    if row is None:
        raise EventNotFound()
    return {
        "id": row["public_id"],
        "kind": row["kind"],
        "state": event_state(row),
        "recipient_count": row["recipient_count"],
        "deliveries": row["deliveries"],
    }


async def cancel_event(
    conn: AsyncConnection, tenant_id: str, public_id: uuid.UUID, *, actor: str
) -> dict[str, Any]:
    """Cancel an event the fan-out has not started (R-ADMIN-4, R-ADMIN-15, R-ADMIN-16).

    One compare-and-set UPDATE decides; it is never a read followed by a write, so a cancel cannot
    "succeed" after the fan-out committed its claim. When it matches nothing, the event is re-read
    to say precisely why: absent (404), already cancelled, or the fan-out won (409 each, with its
    own code). `actor` is recorded as `cancelled_by`.
    """
    row = await queries.cancel_event(conn, tenant_id, public_id, actor)
    if row is not None:
        return {
            "id": row["public_id"],
            "kind": row["kind"],
            "state": "cancelled",
            "cancelled_at": row["cancelled_at"],
        }
    current = await queries.cancel_refusal_state(conn, tenant_id, public_id)
    if current is None:
        raise EventNotFound()
    if current["cancelled_at"] is not None:
        raise EventAlreadyCancelled()
    # Claimed, completed, or released mid-way with pages already written: in every case some
    # recipients may already have been told, so the cancel did not happen.
    raise EventFanoutStarted()
