"""Realtime: what a live stream may be told about a new in-app row, and who may be told it.

A publish is a hint that lets an open session refresh its badge without polling (R-REALTIME-1);
the unread state itself lives only in PostgreSQL (R-REALTIME-2), so a lost, late or dropped hint
costs nothing that a refetch does not repair. What crosses the transport (a NOTIFY payload or a
Redis message) is a JSON array of compact notices: tenant, person, recipient id, kind, category,
priority, occurredAt and the recipient's role scope — the routing fields never leave the API
process, and a client sees only the five keys of R-REALTIME-7 (no title, no body).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from herald.auth.service import Actor
    from herald.fanout.service import InAppNotice

log = logging.getLogger(__name__)

# The PostgreSQL NOTIFY channel and the Redis pub/sub channel.
NOTIFY_CHANNEL = "herald_realtime"
REDIS_CHANNEL = "herald:realtime"
# PostgreSQL refuses a NOTIFY payload of 8000 bytes or more; stay clear of it.
MAX_PAYLOAD_BYTES = 7800
# Role scopes whose rows need no live role grant — the centre's list (R-CENTRE-9), kept in the
# same fail-closed form: a scope nobody anticipated counts as staff.
UNPRIVILEGED_SCOPES = frozenset({"guardian", "student"})


@dataclass(frozen=True)
class Notice:
    """One new in-app row as the listener receives it: routing fields plus the public five."""

    tenant_id: str
    person_id: int
    recipient_id: str
    kind: str
    category: str
    priority: str
    occurred_at: datetime
    audience_role_id: int | None


@dataclass(frozen=True)
class Viewer:
    """Who an open stream belongs to, resolved once at connect time from the token."""

    tenant_id: str
    person_id: int
    role_id: int | None
    # Whether rows scoped to the active role may show: a guardian or student scope always, a
    # staff scope only while the person still holds the role (re-checked while the stream is
    # open: see `still_live`).
    role_live: bool
    # The role is a staff scope, so the stream lives only while the person holds it.
    staff_role: bool = False

    @classmethod
    def of(cls, actor: Actor) -> Viewer:
        unprivileged = actor.role_scope_kind in UNPRIVILEGED_SCOPES
        return cls(
            tenant_id=actor.tenant_id,
            person_id=actor.person_id,
            role_id=actor.role_id,
            role_live=actor.role_id is not None and (actor.holds_role or unprivileged),
            staff_role=actor.role_id is not None and actor.holds_role and not unprivileged,
        )

    def still_live(self, held: Mapping[int, set[int]]) -> bool:
        """Whether this stream may stay open, given each live person's held roles (`held`, from
        the liveness query): the person still exists, and a staff role that let the stream see
        staff rows is still theirs. A dismissed teacher's stream must not go on showing staff
        notices until the browser happens to reconnect (R-CENTRE-9 while the stream is open)."""
        if self.person_id not in held:
            return False
        return not self.staff_role or self.role_id in held[self.person_id]

    @property
    def key(self) -> tuple[str, int]:
        return (self.tenant_id, self.person_id)

    def may_see(self, notice: Notice) -> bool:
        """The centre's predicate applied to one notice: ownership (R-CENTRE-6), the active role
        (R-CENTRE-7; with none, only unscoped rows, R-CENTRE-8) and, for a staff scope, the
        connect-time liveness of the role (R-CENTRE-9)."""
        if (notice.tenant_id, notice.person_id) != self.key:
            return False
        if notice.audience_role_id is None:
            return True
        return self.role_live and notice.audience_role_id == self.role_id


def _compact(notice: InAppNotice) -> str:
    return json.dumps(
        {
            "t": notice.tenant_id,
            "p": notice.person_id,
            "r": str(notice.recipient_public_id),
            "k": notice.kind,
            "c": notice.category,
            "y": notice.priority,
            "o": notice.occurred_at.isoformat(),
            "a": notice.audience_role_id,
        },
        separators=(",", ":"),
        ensure_ascii=True,
    )


def encode(notices: Iterable[InAppNotice], *, limit: int = MAX_PAYLOAD_BYTES) -> list[str]:
    """Pack notices into as few payloads as fit: JSON arrays of at most `limit` bytes each."""
    payloads: list[str] = []
    current: list[str] = []
    size = 2  # the brackets
    for notice in notices:
        item = _compact(notice)  # ASCII, so characters are bytes
        if len(item) + 2 > limit:
            log.warning(
                "realtime notice for recipient %s is too large to publish",
                notice.recipient_public_id,
            )
            continue
        if current and size + 1 + len(item) > limit:
            payloads.append("[" + ",".join(current) + "]")
            current, size = [], 2
        size += len(item) + (1 if current else 0)
        current.append(item)
    if current:
        payloads.append("[" + ",".join(current) + "]")
    return payloads


def decode(payload: str | bytes, wanted: Callable[[str, int], bool] | None = None) -> list[Notice]:
    """Unpack one payload; a malformed one is logged and yields nothing (never raises).

    `wanted(tenant, person)` picks the notices worth building: a hub skips the people with no
    open stream in its process before parsing their timestamps (with several API processes, most
    of a 500-notice batch is for another process's streams)."""
    try:
        raw: Any = json.loads(payload)
        if wanted is None:
            return [_notice(item) for item in raw]
        return [_notice(item) for item in raw if wanted(str(item["t"]), int(item["p"]))]
    except (ValueError, TypeError, KeyError):
        log.warning("ignoring a malformed realtime payload (%d bytes)", len(payload))
        return []


def _notice(item: dict[str, Any]) -> Notice:
    role = item["a"]
    return Notice(
        tenant_id=str(item["t"]),
        person_id=int(item["p"]),
        recipient_id=str(item["r"]),
        kind=str(item["k"]),
        category=str(item["c"]),
        priority=str(item["y"]),
        occurred_at=datetime.fromisoformat(str(item["o"])),
        audience_role_id=int(role) if role is not None else None,
    )
