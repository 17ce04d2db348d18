"""A broadcast's audience before and after it is saved: the draft's check of a spec, how many
people it reaches (R-BCAST-16), and the directory's roles and groups a picker offers.

The reach is counted with `herald.audience.service.resolve_audience_page`, the fan-out's own
resolution, a keyset page at a time; nothing here writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from herald.audience import service as audience
from herald.auth.service import Operator
from herald.errors import AudienceInvalid, AudienceTooLarge, BroadcastInvalid, BroadcastNotFound
from herald.scheduling.broadcasts import queries
from herald.scheduling.broadcasts.schemas import AudiencePreview, DraftAudienceReach, PreviewPerson

CREATE = "NotificationBroadcast_CREATE"
PREVIEW_SAMPLE = 20
PREVIEW_PAGE = 5000


@dataclass(frozen=True)
class AudienceChoices:
    """(code, name) of the roles and (external id, name) of the live groups."""

    roles: list[tuple[str, str]]
    groups: list[tuple[str, str]]


def audience_refusal(message: str) -> BroadcastInvalid:
    """A refused audience, worded as a draft's refusal names its field."""
    return BroadcastInvalid(f"audience: {message}")


def check_audience(spec: object) -> dict[str, Any]:
    """The spec as a draft's audience is checked (service.check_input: an object, then
    validate_audience through the send path) and refused (400 NOTIFICATION_BROADCAST_INVALID
    naming the audience); the normalised spec that a draft would store."""
    if not isinstance(spec, Mapping):
        raise audience_refusal("Input should be a valid dictionary")
    try:
        return audience.validate_audience(spec)
    except (AudienceInvalid, AudienceTooLarge) as exc:
        raise audience_refusal(exc.message) from None


async def reach(
    conn: AsyncConnection,
    tenant_id: str,
    spec: Mapping[str, Any],
    *,
    created_until: datetime | None = None,
) -> AudiencePreview:
    """How many people `spec` reaches now (or at `created_until`, a frozen audience), and the
    first 20 of them. Reads keyset pages; writes nothing."""
    count, after = 0, 0
    sampled: list[audience.AudienceMember] = []
    while True:
        page = await audience.resolve_audience_page(
            conn, tenant_id, spec, after, PREVIEW_PAGE, created_until=created_until
        )
        admitted = [m for m in page if m.admitted]
        count += len(admitted)
        sampled.extend(admitted[: PREVIEW_SAMPLE - len(sampled)])
        if len(page) < PREVIEW_PAGE:
            break
        after = page[-1].person_id
    external = await queries.external_ids(conn, [m.person_id for m in sampled])
    sample = [
        PreviewPerson(external_id=external[m.person_id], full_name=m.full_name)
        for m in sampled
        if m.person_id in external
    ]
    return AudiencePreview(count=count, sample=sample)


async def draft_reach(
    conn: AsyncConnection, operator: Operator, spec: object
) -> DraftAudienceReach:
    """How many people an unsaved draft's audience would reach, for a caller who may draft
    (404 otherwise, as for every broadcast route): checked exactly as the draft is."""
    _may_draft(operator)
    normalised = check_audience(spec)
    found = await reach(conn, operator.tenant_id, normalised)
    return DraftAudienceReach(count=found.count, audience=normalised, sample=found.sample)


async def choices(conn: AsyncConnection, operator: Operator) -> AudienceChoices:
    """The roles and groups a draft's audience picker offers, for a caller who may draft."""
    _may_draft(operator)
    return AudienceChoices(
        roles=await queries.role_choices(conn, operator.tenant_id),
        groups=await queries.group_choices(conn, operator.tenant_id),
    )


def _may_draft(operator: Operator) -> None:
    if not operator.may(CREATE):
        raise BroadcastNotFound()
