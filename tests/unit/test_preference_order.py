"""The four-step preference order and the code defaults, without a database."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald import vocabulary
from herald.db import schema
from herald.kinds import Kind
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.preferences import service
from herald.preferences.service import CATEGORY_DEFAULTS, PreferenceSnapshot, category_default

PERSON = 7


def registered(name: str) -> Kind:
    kind = SAMPLE_REGISTRY.get(name)
    assert kind is not None
    return kind


ANNOUNCEMENT = registered("announcement.posted")
PASSWORD_RESET = registered("auth.password_reset")

# DESIGN.md §6, written out again by hand so a slip in either copy fails the test.
DESIGN_TABLE = {
    #                in_app email  push   sms    telegram slack teams whatsapp
    "security": (True, True, True, True, True, False, False, True),
    "account": (True, True, False, False, False, False, False, False),
    "announcement": (True, True, True, False, True, True, True, True),
    "academic": (True, True, True, False, True, True, True, True),
    "attendance": (True, True, True, False, True, True, True, True),
    "finance": (True, True, True, False, True, True, True, True),
    "events": (True, True, True, False, True, True, True, True),
    "transport": (True, False, True, False, True, False, False, True),
    "system": (True, True, False, False, False, True, True, False),
}
# Slack and Teams (issue 46) follow email, except for security and account (personal: a Slack or
# Teams destination may be a shared channel); WhatsApp follows Telegram (a kind reaches it only
# through a template the deployment mapped).
COLUMNS = ("in_app", "email", "push", "sms", "telegram", "slack", "teams", "whatsapp")


def kind_in(category: str, *, unsuppressible: bool = False) -> Kind:
    # dataclasses.replace skips registry validation on purpose: the resolver must cope with any
    # category, including one the defaults table does not know.
    return dataclasses.replace(ANNOUNCEMENT, category=category, unsuppressible=unsuppressible)


def snapshot(
    *, switch: bool | None = None, override: bool | None = None, category: str = "announcement"
) -> PreferenceSnapshot:
    channel = "email"
    return PreferenceSnapshot(
        channel_switches={} if switch is None else {(PERSON, channel): switch},
        category_overrides={} if override is None else {(PERSON, category, channel): override},
    )


# ---------------------------------------------------------------------------------------------
# Code defaults


def test_category_defaults_are_the_design_table() -> None:
    """R-PREF-10, R-PREF-13: the defaults live in code and equal DESIGN.md §6."""
    assert set(CATEGORY_DEFAULTS) == set(DESIGN_TABLE) == set(vocabulary.CATEGORIES)
    for category, row in DESIGN_TABLE.items():
        assert dict(CATEGORY_DEFAULTS[category]) == dict(zip(COLUMNS, row, strict=True))
        for channel, expected in zip(COLUMNS, row, strict=True):
            assert category_default(category, channel) is expected


def test_sms_is_off_by_default_except_for_security() -> None:
    """R-PREF-11: SMS is metered; only security defaults it on."""
    on = {c for c in vocabulary.CATEGORIES if category_default(c, "sms")}
    assert on == {"security"}


def test_a_category_or_channel_without_a_default_is_off_without_raising() -> None:
    """R-PREF-12, R-PREF-15: a missing default resolves to False (not sent), never an error."""
    assert category_default("marketing", "email") is False
    assert category_default("announcement", "carrier_pigeon") is False
    assert PreferenceSnapshot().allows(PERSON, kind_in("marketing"), "in_app") is False


def test_a_changed_default_reaches_everyone_without_a_stored_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R-PREF-14: defaults are read at resolution time, so a change reaches people who never
    chose — and only them."""
    chose = PERSON + 1
    snap = PreferenceSnapshot(category_overrides={(chose, "transport", "email"): False})
    transport = kind_in("transport")
    assert snap.allows(PERSON, transport, "email") is False
    changed = {**CATEGORY_DEFAULTS, "transport": {**CATEGORY_DEFAULTS["transport"], "email": True}}
    monkeypatch.setattr(service, "CATEGORY_DEFAULTS", changed)
    assert snap.allows(PERSON, transport, "email") is True
    assert snap.allows(chose, transport, "email") is False


# ---------------------------------------------------------------------------------------------
# The order


@pytest.mark.parametrize(
    ("unsuppressible", "override", "switch", "default", "expected", "decided_by"),
    [
        (True, False, False, False, True, "R-PREF-6: unsuppressible beats every row"),
        (True, None, None, False, True, "R-PREF-6: unsuppressible beats a default"),
        (False, True, False, False, True, "R-PREF-8: override beats the global switch"),
        (False, False, True, True, False, "R-PREF-8: override beats switch and default"),
        (False, None, False, True, False, "R-PREF-9: global switch beats the default"),
        (False, None, True, False, True, "R-PREF-9: a stored global row decides both ways"),
        (False, None, None, True, True, "R-PREF-10: no rows, the default decides"),
        (False, None, None, False, False, "R-PREF-10: no rows, the default decides"),
    ],
)
def test_the_four_steps_in_order(
    unsuppressible: bool,
    override: bool | None,
    switch: bool | None,
    default: bool,
    expected: bool,
    decided_by: str,
) -> None:
    """R-PREF-1, R-PREF-6, R-PREF-8, R-PREF-9, R-PREF-10: each step decides ahead of the next."""
    category = "announcement" if default else "transport"  # email default: on / off
    assert category_default(category, "email") is default
    snap = snapshot(switch=switch, override=override, category=category)
    kind = kind_in(category, unsuppressible=unsuppressible)
    assert snap.allows(PERSON, kind, "email") is expected, decided_by


@given(
    unsuppressible=st.booleans(),
    override=st.none() | st.booleans(),
    switch=st.none() | st.booleans(),
    category=st.sampled_from((*vocabulary.CATEGORIES, "unknown")),
    channel=st.sampled_from(vocabulary.CHANNELS),
    other_rows=st.booleans(),
)
def test_allows_matches_the_reference_order(
    unsuppressible: bool,
    override: bool | None,
    switch: bool | None,
    category: str,
    channel: str,
    other_rows: bool,
) -> None:
    """R-PREF-1: allows() equals the four-step order for every combination; rows of other
    people, categories and channels never leak in."""
    switches: dict[tuple[int, str], bool] = {}
    overrides: dict[tuple[int, str, str], bool] = {}
    if switch is not None:
        switches[(PERSON, channel)] = switch
    if override is not None:
        overrides[(PERSON, category, channel)] = override
    if other_rows:
        for c in vocabulary.CHANNELS:
            switches.setdefault((PERSON + 1, c), not category_default(category, c))
            overrides.setdefault((PERSON + 1, category, c), False)
        other_channel = next(c for c in vocabulary.CHANNELS if c != channel)
        switches.setdefault((PERSON, other_channel), False)
        overrides.setdefault((PERSON, "security", other_channel), False)
    kind = kind_in(category, unsuppressible=unsuppressible)

    if unsuppressible:
        expected = True
    elif override is not None:
        expected = override
    elif switch is not None:
        expected = switch
    else:
        expected = category_default(category, channel)

    snap = PreferenceSnapshot(channel_switches=switches, category_overrides=overrides)
    assert snap.allows(PERSON, kind, channel) is expected


def test_a_global_mute_covers_categories_with_no_row() -> None:
    """R-PREF-2: one row per channel mutes every category, including ones added after it."""
    snap = PreferenceSnapshot(channel_switches={(PERSON, "email"): False})
    for category in (*vocabulary.CATEGORIES, "added_in_june"):
        assert snap.allows(PERSON, kind_in(category), "email") is False


def test_unsuppressibility_comes_from_the_registry_only() -> None:
    """R-PREF-4, R-PREF-7: the registry's auth.password_reset ignores every stored 'off'; the
    same category without the registry flag obeys them."""
    assert PASSWORD_RESET.unsuppressible
    everything_off = PreferenceSnapshot(
        channel_switches={(PERSON, c): False for c in vocabulary.CHANNELS},
        category_overrides={(PERSON, "security", c): False for c in vocabulary.CHANNELS},
    )
    assert everything_off.allows(PERSON, PASSWORD_RESET, "email") is True
    ordinary = dataclasses.replace(PASSWORD_RESET, unsuppressible=False)
    assert everything_off.allows(PERSON, ordinary, "email") is False


def test_preference_tables_cannot_express_unsuppressibility_or_a_sentinel() -> None:
    """R-SCHEMA-35: no column marks or overrides unsuppressibility; R-SCHEMA-32/33: the global
    switch is per channel with no category (so no '__all__' sentinel)."""
    for table in (schema.notification_channel_preference, schema.notification_preference):
        for column in table.c:
            assert not any(w in column.name for w in ("suppress", "lock", "bypass", "force"))
    assert "category" not in schema.notification_channel_preference.c
    assert set(schema.notification_channel_preference.primary_key.columns.keys()) == {
        "person_id",
        "channel",
    }
