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

`load_preferences` builds a `PreferenceSnapshot` for one batch of people in exactly two queries
(R-PREF-5). The snapshot is a plain value: nothing caches it, and its caller drops it with the
batch (R-PREF-16). The fan-out itself joins the same order in SQL (herald.fanout.pagewrite); the
snapshot is what the row-by-row reference it is compared with uses
(tests/integration/fanout_reference.py).

The consumer API (`read_preferences`, `save_preferences`) lives here too. It needs only the pure
defaults, the snapshot and the registry it is handed — no fan-out component (R-PLAT-15). Its
global switch is a MUTE: GET reports a channel as true unless the person stored a "false" row, and
PUT stores a channel row only for false. A stored true row would turn the channel on for every
category without an override, SMS included (step 3 beats the code default), so a client that
echoed GET's `"sms": true` back would have switched SMS on everywhere; with "true or absent means
no row" an echo of GET changes nothing. Switching one category's channel on stays possible with an
override.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.auth.service import Actor
from herald.errors import PreferenceInvalid, PreferenceVersionConflict, QuietHoursInvalid
from herald.kinds import Kind, Registry
from herald.preferences import queries
from herald.preferences.schemas import (
    CategoryPreferences,
    PreferenceOverride,
    PreferencesSaved,
    PreferencesUpdate,
    PreferencesView,
    QuietHours,
)
from herald.scheduling import clock


def _row(
    in_app: bool, email: bool, push: bool, sms: bool, telegram: bool, *, personal: bool = False
) -> Mapping[str, bool]:
    # Slack and Teams, the staff channels (issue 46), follow email: a person has a Slack id or a
    # Teams webhook only when their school set one, so that is the opt-in, and they carry what a
    # work inbox would. Except what is personal (security, account): a Slack or Teams
    # destination may be a channel other people read.
    chat = email and not personal
    # WhatsApp (issue 46) follows Telegram: a kind reaches it only where the deployment mapped
    # the kind to a template Meta approved (and bills), which is the deployment's opt-in; the
    # person switches it off per category like any other.
    return MappingProxyType(
        {
            "in_app": in_app,
            "email": email,
            "push": push,
            "sms": sms,
            "telegram": telegram,
            "slack": chat,
            "teams": chat,
            "whatsapp": telegram,
        }
    )


_USUAL = _row(in_app=True, email=True, push=True, sms=False, telegram=True)

# DESIGN.md §6. SMS is off everywhere except security: it is metered, and a school-wide "on"
# default is a bill nobody chose (R-PREF-11).
CATEGORY_DEFAULTS: Mapping[str, Mapping[str, bool]] = MappingProxyType(
    {
        "security": _row(
            in_app=True, email=True, push=True, sms=True, telegram=True, personal=True
        ),
        "account": _row(
            in_app=True, email=True, push=False, sms=False, telegram=False, personal=True
        ),
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
        return self.allows_category(person_id, kind.category, channel)

    def allows_category(self, person_id: int, category: str, channel: str) -> bool:
        """Steps 2-4: the decision for a suppressible kind of `category`."""
        # 2. The most specific thing the person said (R-PREF-8).
        override = self.category_overrides.get((person_id, category, channel))
        if override is not None:
            return override
        # 3. "No email at all" (R-PREF-9, R-PREF-2).
        switch = self.channel_switches.get((person_id, channel))
        if switch is not None:
            return switch
        # 4. Code default (R-PREF-10).
        return category_default(category, channel)


async def load_preferences(conn: AsyncConnection, person_ids: Sequence[int]) -> PreferenceSnapshot:
    """Exactly two queries whatever the batch size (R-PREF-5): one over
    notification_channel_preference, one over notification_preference, each with
    person_id = ANY(:ids). An empty batch needs no query and gets an empty snapshot.

    No src caller: the fan-out joins preferences in its batch statement; the row-by-row
    reference (tests/integration/fanout_reference.py) and the resolver's tests use this.
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


# ---------------------------------------------------------------------------------------------
# The consumer preference API (GET/PUT /v1/me/preferences).


def locked_categories(registry: Registry) -> frozenset[str]:
    """Categories in which EVERY registered kind is unsuppressible (R-PREFAPI-4).

    Computed from the registry entries, not from UNSUPPRESSIBLE_CATEGORIES, which lists where an
    unsuppressible kind may live, not where one does (R-PREFAPI-5): a category with a suppressible
    kind, or with no kind at all, has switches that work, so it is not locked.
    """
    locked = set()
    for category in vocabulary.CATEGORIES:
        kinds = registry.kinds_in(category)
        if kinds and all(kind.unsuppressible for kind in kinds):
            locked.add(category)
    return frozenset(locked)


async def read_preferences(
    conn: AsyncConnection, actor: Actor, registry: Registry
) -> PreferencesView:
    """The caller's switches and every category × channel cell's effective value.

    A person who never saved reads version 0, and nothing is written (R-PREFAPI-1, R-SCHEMA-31).
    """
    stored = await queries.select_person_set(conn, actor.tenant_id, actor.person_id)
    person = actor.person_id
    snapshot = PreferenceSnapshot(
        channel_switches={(person, channel): on for channel, on in stored.switches.items()},
        category_overrides={
            (person, category, channel): on for (category, channel), on in stored.overrides.items()
        },
    )
    locked = locked_categories(registry)
    return PreferencesView(
        version=stored.version,
        # Only a stored "false" is a mute; see the module docstring.
        channels={channel: stored.switches.get(channel, True) for channel in vocabulary.CHANNELS},
        categories=[
            CategoryPreferences(
                category=category,
                locked=category in locked,
                channels={
                    # A locked category's kinds are sent whatever is stored (R-PREF-6).
                    channel: category in locked
                    or snapshot.allows_category(person, category, channel)
                    for channel in vocabulary.CHANNELS
                },
            )
            for category in vocabulary.CATEGORIES
        ],
        overrides=[
            PreferenceOverride(category=category, channel=channel, enabled=on)
            for (category, channel), on in sorted(
                stored.overrides.items(), key=lambda cell: _cell_order(*cell[0])
            )
            # A locked category's cells have no effect (R-PREF-6), so none is explicit there.
            if category in vocabulary.CATEGORIES
            and channel in vocabulary.CHANNELS
            and category not in locked
        ],
        quiet_hours=_quiet_view(stored.quiet_hours),
    )


def _quiet_view(stored: queries.StoredQuietHours | None) -> QuietHours | None:
    if stored is None:
        return None
    return QuietHours(
        start=stored.start.strftime("%H:%M"), end=stored.end.strftime("%H:%M"), timezone=stored.zone
    )


def parse_quiet_hours(given: QuietHours | None) -> queries.StoredQuietHours | None:
    """The body's quiet hours as stored, or QuietHoursInvalid (422) before anything is written:
    malformed times, a start equal to its end (no window, or a whole day: say which by leaving
    them out or switching channels off), an unknown zone."""
    if given is None:
        return None
    try:
        start = clock.parse_local_time(given.start)
        end = clock.parse_local_time(given.end)
    except ValueError as exc:
        raise QuietHoursInvalid(f"quiet hours: {exc}") from None
    if start == end:
        raise QuietHoursInvalid("quiet hours: start and end must differ")
    if given.timezone is not None and not clock.is_iana_zone(given.timezone):
        raise QuietHoursInvalid(
            f"quiet hours: {given.timezone[:64]!r} is not an IANA time zone (like Asia/Kathmandu)"
        )
    return queries.StoredQuietHours(start=start, end=end, zone=given.timezone)


def _cell_order(category: str, channel: str) -> tuple[int, int]:
    """The matrix's own order: categories, then channels, as the vocabulary lists them."""

    def index(names: tuple[str, ...], name: str) -> int:
        return names.index(name) if name in names else len(names)

    return index(vocabulary.CATEGORIES, category), index(vocabulary.CHANNELS, channel)


def _unknown(names: set[str], known: tuple[str, ...]) -> str:
    shown = ", ".join(repr(name[:40]) for name in sorted(names)[:5])
    return f"{shown}; known: {', '.join(known)}"


def _rows_to_store(
    update: PreferencesUpdate, registry: Registry
) -> tuple[dict[str, bool], dict[tuple[str, str], bool]]:
    """Validate the body and reduce it to the rows that express it; refuses before any write."""
    unknown_channels = {c for c in update.channels if c not in vocabulary.CHANNELS}
    unknown_channels |= {
        o.channel for o in update.overrides if o.channel not in vocabulary.CHANNELS
    }
    if unknown_channels:
        raise PreferenceInvalid(
            f"unknown channel(s) {_unknown(unknown_channels, vocabulary.CHANNELS)}"
        )
    unknown_categories = {
        o.category for o in update.overrides if o.category not in vocabulary.CATEGORIES
    }
    if unknown_categories:
        raise PreferenceInvalid(
            f"unknown categor(y/ies) {_unknown(unknown_categories, vocabulary.CATEGORIES)}"
        )
    # A global row only for a mute: "true" would switch the channel on for every category
    # without an override, SMS included (see the module docstring).
    switches = {channel: False for channel, on in update.channels.items() if not on}
    locked = locked_categories(registry)
    overrides: dict[tuple[str, str], bool] = {}
    for override in update.overrides:
        # A locked category's cells are switches with no effect: never stored (R-PREFAPI-6).
        if override.category in locked:
            continue
        # One row per (category, channel); the last entry wins (R-PREFAPI-7).
        overrides[(override.category, override.channel)] = override.enabled
    return switches, overrides


async def save_preferences(
    conn: AsyncConnection, actor: Actor, registry: Registry, update: PreferencesUpdate
) -> PreferencesSaved:
    """Replace the caller's whole set, gated on the version they read (R-PREFAPI-3).

    The compare-and-set on notification_preference_set comes FIRST: it takes the row lock that
    serialises savers, and a loser fails on it before touching a preference row. A 0 inserts the
    set row at 1 (R-PREFAPI-2, R-PREFAPI-8); n moves it to n + 1 (R-PREFAPI-9); matching nothing is
    a 409. Everything runs in the caller's one transaction, so a 409 persists nothing
    (R-PREFAPI-10). Keyed on the session person only (R-PREFAPI-11).
    """
    switches, overrides = _rows_to_store(update, registry)
    quiet = parse_quiet_hours(update.quiet_hours)
    tenant_id, person_id = actor.tenant_id, actor.person_id
    if update.version == 0:
        version = await queries.insert_set(conn, tenant_id, person_id)
    else:
        version = await queries.advance_set(conn, tenant_id, person_id, update.version)
    if version is None:
        raise PreferenceVersionConflict()
    await queries.replace_channel_switches(conn, tenant_id, person_id, switches)
    await queries.replace_category_overrides(conn, tenant_id, person_id, overrides)
    if "quiet_hours" in update.model_fields_set:
        # Left out: kept as stored (a client written before quiet hours existed never clears
        # them); null: none.
        await queries.set_quiet_hours(conn, tenant_id, person_id, quiet)
    return PreferencesSaved(version=version)
