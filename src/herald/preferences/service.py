"""Preference resolution: may this person be sent this kind on this channel? (R-PREF-1)

The order is the design (DESIGN.md §6, seed §6.3):

1. Unsuppressible — read from the kind's registry entry only; nothing below can turn it off
   (R-PREF-4, R-PREF-6, R-PREF-7). No table column and no send() input can grant or remove it.
2. Per-category override (`notification_preference`) — the most specific thing the person said
   (R-PREF-8): someone who turned email off globally and then assignment email back on meant the
   second thing.
3. Global channel switch (`notification_channel_preference`) — "no email at all" (R-PREF-9). One
   row per channel, not per category, so a category added after the switch was saved is muted
   too (R-PREF-2). A stored row decides both ways, as the order says; the preferences API should
   therefore store a channel row only for a channel the person actually switched.
4. The category's code default (R-PREF-10): `CATEGORY_DEFAULTS`, code not rows (R-PREF-13), so a
   change to it reaches everyone with no stored row (R-PREF-14). A category or channel missing
   from the table resolves to False without raising (R-PREF-12, R-PREF-15).

`load_preferences` builds a `PreferenceSnapshot` for one fan-out batch in exactly two queries
(R-PREF-5). The snapshot is a plain value: nothing caches it, and the worker drops it with the
batch (R-PREF-16).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from sqlalchemy.ext.asyncio import AsyncConnection

from herald.kinds import Kind
from herald.preferences import queries


def _row(in_app: bool, email: bool, push: bool, sms: bool, telegram: bool) -> Mapping[str, bool]:
    return MappingProxyType(
        {"in_app": in_app, "email": email, "push": push, "sms": sms, "telegram": telegram}
    )


_USUAL = _row(in_app=True, email=True, push=True, sms=False, telegram=True)

# DESIGN.md §6. SMS is off everywhere except security: it is metered, and a school-wide "on"
# default is a bill nobody chose (R-PREF-11).
CATEGORY_DEFAULTS: Mapping[str, Mapping[str, bool]] = MappingProxyType(
    {
        "security": _row(in_app=True, email=True, push=True, sms=True, telegram=True),
        "account": _row(in_app=True, email=True, push=False, sms=False, telegram=False),
        "announcement": _USUAL,
        "academic": _USUAL,
        "attendance": _USUAL,
        "finance": _USUAL,
        "events": _USUAL,
        "transport": _row(in_app=True, email=False, push=True, sms=False, telegram=True),
        "system": _row(in_app=True, email=True, push=False, sms=False, telegram=False),
    }
)


def category_default(category: str, channel: str) -> bool:
    """The code default; a missing category or channel is off, never an error (R-PREF-12/15).

    Silently not sending is the safe failure; silently sending is the wrong one.
    """
    return CATEGORY_DEFAULTS.get(category, {}).get(channel, False)


@dataclass(frozen=True)
class PreferenceSnapshot:
    """One batch's stored choices. Absence of a row means "fall through to the next step"."""

    # (person_id, channel) → enabled: the global switch.
    channel_switches: Mapping[tuple[int, str], bool] = field(default_factory=dict)
    # (person_id, category, channel) → enabled: the per-category override.
    category_overrides: Mapping[tuple[int, str, str], bool] = field(default_factory=dict)

    def allows(self, person_id: int, kind: Kind, channel: str) -> bool:
        # 1. The registry entry, and only it (R-PREF-6, R-PREF-7).
        if kind.unsuppressible:
            return True
        # 2. The most specific thing the person said (R-PREF-8).
        override = self.category_overrides.get((person_id, kind.category, channel))
        if override is not None:
            return override
        # 3. "No email at all" (R-PREF-9, R-PREF-2).
        switch = self.channel_switches.get((person_id, channel))
        if switch is not None:
            return switch
        # 4. Code default (R-PREF-10).
        return category_default(kind.category, channel)


async def load_preferences(conn: AsyncConnection, person_ids: Sequence[int]) -> PreferenceSnapshot:
    """Exactly two queries whatever the batch size (R-PREF-5): one over
    notification_channel_preference, one over notification_preference, each with
    person_id = ANY(:ids). An empty batch needs no query and gets an empty snapshot.
    """
    ids = sorted(set(person_ids))
    if not ids:
        return PreferenceSnapshot()
    switches = await queries.select_channel_switches(conn, ids)
    overrides = await queries.select_category_overrides(conn, ids)
    return PreferenceSnapshot(
        channel_switches=MappingProxyType(
            {(row.person_id, row.channel): bool(row.enabled) for row in switches}
        ),
        category_overrides=MappingProxyType(
            {(row.person_id, row.category, row.channel): bool(row.enabled) for row in overrides}
        ),
    )
