"""The kinds admin: what the registry declares, with this tenant's escalation overrides.

Gate: the template-override permissions (a kind's plan is part of how it is worded and sent):
NotificationTemplate_READ to list, _UPDATE to set delays, _DELETE to revert to the code's plan.
Without READ the list is empty, as `/v1/admin/templates/kinds` answers; an unknown kind is 404.
Every change is audited (entity `notification_escalation_override`, the kind's name as its id)
and versioned (notification_escalation_override_version). Bad input is a 422 with the code of
the first problem (herald.kinds.registry.escalation_problem, the rule the registry applies at
load), and nothing is stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from herald.admin import paging
from herald.admin.kinds import queries
from herald.admin.kinds.schemas import (
    DigestEntry,
    EscalationEntry,
    EscalationOverrideIn,
    EscalationStepEntry,
    KindSummary,
    KindSummaryPage,
)
from herald.audit import service as audit
from herald.auth.service import Operator
from herald.errors import (
    EscalationChannelsFixed,
    EscalationCycle,
    EscalationDelayOutOfRange,
    EscalationEmpty,
    EscalationNotDeclared,
    EscalationOverrideNotFound,
    EscalationPlanInvalid,
    EscalationStepBeforePredecessor,
    EscalationUnknownChannel,
    KindNotFound,
)
from herald.kinds import Kind, Registry
from herald.kinds.registry import escalation_problem

READ = "NotificationTemplate_READ"
UPDATE = "NotificationTemplate_UPDATE"
DELETE = "NotificationTemplate_DELETE"
ENTITY = "notification_escalation_override"

# escalation_problem's codes → the error each answers with.
_PROBLEMS: Mapping[str, type[EscalationPlanInvalid]] = {
    "ESCALATION_EMPTY": EscalationEmpty,
    "ESCALATION_UNKNOWN_CHANNEL": EscalationUnknownChannel,
    "ESCALATION_CYCLE": EscalationCycle,
    "ESCALATION_STEP_BEFORE_PREDECESSOR": EscalationStepBeforePredecessor,
    "ESCALATION_DELAY_OUT_OF_RANGE": EscalationDelayOutOfRange,
}


async def list_kinds(
    conn: AsyncConnection, operator: Operator, registry: Registry, page: paging.Page
) -> KindSummaryPage:
    if not operator.may(READ):
        return KindSummaryPage(items=[], next_cursor=None)
    after = paging.decode_cursor(page.cursor, "k", (str,))[0] if page.cursor is not None else None
    kinds = sorted((k for k in registry if after is None or k.name > after), key=lambda k: k.name)
    chosen, more = kinds[: page.limit], len(kinds) > page.limit
    found = await queries.overrides(
        conn, operator.tenant_id, [k.name for k in chosen if k.escalation is not None]
    )
    return KindSummaryPage(
        items=[_summary(kind, found.get(kind.name)) for kind in chosen],
        next_cursor=paging.encode_cursor("k", chosen[-1].name) if more else None,
    )


def _summary(kind: Kind, override: Mapping[str, Any] | None) -> KindSummary:
    return KindSummary(
        kind=kind.name,
        category=kind.category,
        priority=kind.priority,
        channels=list(kind.channels),
        dedupe=kind.dedupe,
        unsuppressible=kind.unsuppressible,
        digest=(
            DigestEntry(
                window_seconds=kind.digest.window_seconds, channels=list(kind.digest.channels)
            )
            if kind.digest is not None
            else None
        ),
        escalation=_escalation(kind, override),
    )


def _escalation(kind: Kind, override: Mapping[str, Any] | None) -> EscalationEntry | None:
    plan = kind.escalation
    if plan is None:
        return None
    delays = plan.delays_with(override["delays"] if override else None)
    return EscalationEntry(
        steps=[
            EscalationStepEntry(
                step=index,
                channel=step.channel,
                after_seconds=delay,
                default_after_seconds=step.after_seconds,
            )
            for index, (step, delay) in enumerate(zip(plan.steps, delays, strict=True), start=1)
        ],
        overridden=tuple(delays) != plan.delays,
        version=override["version"] if override else None,
        updated_at=override["updated_at"] if override else None,
        updated_by=override["updated_by"] if override else None,
    )


def _plan_kind(registry: Registry, name: str) -> Kind:
    kind = registry.get(name)
    if kind is None:
        raise KindNotFound()
    if kind.escalation is None:
        raise EscalationNotDeclared()
    return kind


def check_override(kind: Kind, data: EscalationOverrideIn) -> list[int]:
    """The delays of a valid override, or the 422 of its first problem."""
    assert kind.escalation is not None
    channels = [step.channel for step in data.steps]
    delays = [step.after_seconds for step in data.steps]
    problem = escalation_problem(kind.channels, channels, delays)
    if problem is not None:
        code, message = problem
        raise _PROBLEMS.get(code, EscalationPlanInvalid)(message)
    if tuple(channels) != kind.escalation.channels:
        raise EscalationChannelsFixed(
            "the steps are the kind's own channels in order: " + ", ".join(kind.escalation.channels)
        )
    return delays


async def put_escalation(
    conn: AsyncConnection,
    operator: Operator,
    registry: Registry,
    name: str,
    data: EscalationOverrideIn,
) -> KindSummary:
    if not operator.may(UPDATE):
        raise KindNotFound()
    kind = _plan_kind(registry, name)
    delays = check_override(kind, data)
    before = await queries.lock_current(conn, operator.tenant_id, name)
    row = await queries.write(conn, operator.tenant_id, name, delays, audit.actor_label(operator))
    await audit.record_audit(
        conn,
        operator,
        "update" if before is not None else "create",
        ENTITY,
        name,
        {
            "delays": {"from": before["delays"] if before else None, "to": delays},
            "version": row["version"],
        },
    )
    return _summary(kind, row)


async def delete_escalation(
    conn: AsyncConnection, operator: Operator, registry: Registry, name: str
) -> KindSummary:
    if not operator.may(DELETE):
        raise KindNotFound()
    kind = _plan_kind(registry, name)
    before = await queries.lock_current(conn, operator.tenant_id, name)
    if before is None:
        raise EscalationOverrideNotFound()
    row = await queries.write(conn, operator.tenant_id, name, None, audit.actor_label(operator))
    await audit.record_audit(
        conn,
        operator,
        "delete",
        ENTITY,
        name,
        {"delays": {"from": before["delays"], "to": None}, "version": row["version"]},
    )
    return _summary(kind, row)
