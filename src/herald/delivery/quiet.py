"""Quiet hours at the channel worker (issue 45 item 3; docs/preferences' "Quiet hours").

A person may keep quiet hours — a local start and end, wrapping past midnight when the end comes
first — on their wall clock (their preference's zone, else their directory zone, else
HERALD_DEFAULT_TIMEZONE). Every channel but the inbox honours them here, where a delivery is
claimed to be sent: a claimed row whose due time (its `next_attempt_at`) falls inside the hours
goes back on the queue, unclaimed and due at their end, in the claim's own transaction. It is not
sent, counts no attempt and reads `queued` ("waiting until …" in the trace).

Deciding at the claim rather than at the fan-out covers every way a row becomes due: the first
send, a `deliverAt` moment, and a retry whose backoff lands inside the hours (the reaper re-queues
it due at its backoff; its claim finds it quiet and holds it until the end). The decision reads the
row's due time, not the clock: a row released at the end of the hours is due exactly then, which
is outside them, so it is sent however late the worker reaches it; a row that was due before the
hours began and waited behind a backlog is sent, not held until morning.

The inbox is written at the fan-out and shows at once; unsuppressible kinds (one-time codes,
password resets — the registry's `unsuppressible`) ignore quiet hours. The window and the end are
computed with herald.scheduling.clock, the reminders' rules: an end the clock skips is its pre-jump
instant, an end it shows twice its first instant.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from herald.config import Settings
from herald.kinds import Registry
from herald.scheduling import clock


def person_zone(context: dict[str, Any], settings: Settings) -> ZoneInfo:
    """The quiet hours' zone: the preference's own, else the directory's, else the default."""
    for name in (context.get("quiet_hours_timezone"), context.get("person_timezone")):
        if name and clock.is_iana_zone(name):
            return clock.zone(name)
    return clock.zone(settings.default_timezone)


def held_until(context: dict[str, Any], registry: Registry, settings: Settings) -> datetime | None:
    """When the claimed row `context` may be sent, if its due time is inside quiet hours."""
    start, end, due = (
        context.get("quiet_hours_start"),
        context.get("quiet_hours_end"),
        context.get("due_at"),
    )
    if start is None or end is None or due is None or start == end:
        return None
    if context.get("channel") == "in_app":
        return None
    kind = registry.get(context.get("kind") or "")
    if kind is not None and kind.unsuppressible:
        return None
    return clock.quiet_until(due, person_zone(context, settings), start, end)
