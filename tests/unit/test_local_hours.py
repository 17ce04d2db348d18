"""A person's own hour (issue 45): deliverAt's moment and quiet hours (herald.scheduling.clock).

Both use the reminders' rules — a local time the clock skips is read with the pre-jump offset, a
repeated one is its first instant — so the named instants below are checked against values
worked out by hand from the IANA rules for London (GMT/BST) and Kathmandu (+05:45, no DST), and
the property tests check any zone, window and instant.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from herald.scheduling import clock

LONDON = clock.zone("Europe/London")
KATHMANDU = clock.zone("Asia/Kathmandu")
NAMED = ["Europe/London", "Asia/Kathmandu", "America/New_York", "Australia/Lord_Howe", "UTC"]
# The named zones often, and any zone of the installed database.
ZONE_NAMES = st.one_of(st.sampled_from(NAMED), st.sampled_from(sorted(clock.iana_zones())))


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


@pytest.mark.parametrize(
    ("tz", "day", "at", "expected"),
    [
        # 09:00 in Kathmandu is 03:15 UTC every day of the year.
        (KATHMANDU, date(2026, 12, 8), time(9), utc(2026, 12, 8, 3, 15)),
        (KATHMANDU, date(2027, 7, 1), time(9), utc(2027, 7, 1, 3, 15)),
        # London: GMT in winter, BST in summer.
        (LONDON, date(2026, 12, 8), time(9), utc(2026, 12, 8, 9)),
        (LONDON, date(2027, 7, 1), time(9), utc(2027, 7, 1, 8)),
        # Spring forward 2027-03-28 01:00 GMT → 02:00 BST: 01:30 is skipped; the reminders' rule
        # reads it with the pre-jump offset (01:30 UTC, shown 02:30 BST).
        (LONDON, date(2027, 3, 28), time(1, 30), utc(2027, 3, 28, 1, 30)),
        # Fall back 2027-10-31 02:00 BST → 01:00 GMT: 01:30 is shown twice; the first instant.
        (LONDON, date(2027, 10, 31), time(1, 30), utc(2027, 10, 31, 0, 30)),
    ],
)
def test_deliver_at_with_a_date_is_the_reminders_instant(
    tz: clock.ZoneInfo, day: date, at: time, expected: datetime
) -> None:
    assert clock.local_moment(day, at, tz) == expected
    assert clock.local_moment(day, at, tz) == clock.occurrence_on(day, at, tz)


def test_deliver_at_without_a_date_is_the_next_one_at_or_after() -> None:
    after = utc(2026, 12, 8, 3, 15)  # 09:00 in Kathmandu exactly: that one, not tomorrow's
    assert clock.next_local_moment(after, time(9), KATHMANDU) == after
    assert clock.next_local_moment(after + timedelta(seconds=1), time(9), KATHMANDU) == utc(
        2026, 12, 9, 3, 15
    )
    # The same fan-out moment reaches London later the same morning.
    assert clock.next_local_moment(after, time(9), LONDON) == utc(2026, 12, 8, 9)


@pytest.mark.parametrize(
    ("tz", "moment", "start", "end", "expected"),
    [
        # 21:00–07:00 in Kathmandu: 23:00 local waits until 07:00 tomorrow (01:15 UTC).
        (KATHMANDU, utc(2026, 12, 8, 17, 15), time(21), time(7), utc(2026, 12, 9, 1, 15)),
        # 02:00 local (after midnight) waits until 07:00 the same day.
        (KATHMANDU, utc(2026, 12, 8, 20, 15), time(21), time(7), utc(2026, 12, 9, 1, 15)),
        # 07:00 local is the end: not quiet. 20:59 local is before the start.
        (KATHMANDU, utc(2026, 12, 9, 1, 15), time(21), time(7), None),
        (KATHMANDU, utc(2026, 12, 8, 15, 14), time(21), time(7), None),
        # A window inside one day (13:00–14:00 London, GMT).
        (LONDON, utc(2026, 12, 8, 13, 30), time(13), time(14), utc(2026, 12, 8, 14)),
        # Quiet 00:30–01:30 on the spring-forward night: 01:30 never shows; the end is read with
        # the pre-jump offset (01:30 UTC, shown 02:30 BST), as a reminder at 01:30 would fire.
        (LONDON, utc(2027, 3, 28, 0, 45), time(0, 30), time(1, 30), utc(2027, 3, 28, 1, 30)),
        # Quiet 00:00–01:30 on the fall-back night: it ends at the first 01:30 (00:30 UTC)...
        (LONDON, utc(2027, 10, 30, 23, 30), time(0), time(1, 30), utc(2027, 10, 31, 0, 30)),
        # ...and the second pass of 01:15 (01:15 UTC, GMT) is after that end: not quiet.
        (LONDON, utc(2027, 10, 31, 1, 15), time(0), time(1, 30), None),
    ],
)
def test_quiet_hours_end_by_the_reminders_rules(
    tz: clock.ZoneInfo, moment: datetime, start: time, end: time, expected: datetime | None
) -> None:
    assert clock.quiet_until(moment, tz, start, end) == expected


def test_quiet_hours_refuse_an_empty_window_and_a_naive_moment() -> None:
    with pytest.raises(ValueError):
        clock.quiet_until(utc(2026, 12, 8), LONDON, time(7), time(7))
    with pytest.raises(ValueError):
        clock.quiet_until(datetime(2026, 12, 8), LONDON, time(21), time(7))


times = st.builds(time, st.integers(0, 23), st.integers(0, 59))
moments = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2035, 12, 31), timezones=st.just(UTC)
)


@settings(max_examples=1500, deadline=None)
@given(zone=ZONE_NAMES, moment=moments, start=times, end=times)
def test_quiet_until_is_the_next_end_and_only_inside_the_window(
    zone: str, moment: datetime, start: time, end: time
) -> None:
    """Inside the window (by the wall clock) → an instant after the moment, within a day and an
    hour, at which the window is over (never held twice) and whose wall clock shows `end`
    unless the clock skipped it; outside → None (a moment in the repeated hour after the first
    end aside, which is outside by the reminders' rule)."""
    if start == end:
        return
    tz = clock.zone(zone)
    until = clock.quiet_until(moment, tz, start, end)
    shown = moment.astimezone(tz).time().replace(tzinfo=None)
    if not clock.in_quiet_hours(shown, start, end):
        assert until is None
        return
    if until is None:
        return  # the second pass of a repeated hour, after the window's first end
    assert moment < until <= moment + timedelta(days=1, hours=1)
    assert clock.quiet_until(until, tz, start, end) is None
    local = until.astimezone(tz)
    if not clock.is_skipped(local.date(), end, tz):
        assert local.time().replace(tzinfo=None) == end


@settings(max_examples=1000, deadline=None)
@given(zone=ZONE_NAMES, after=moments, at=times)
def test_next_local_moment_is_the_first_at_or_after(zone: str, after: datetime, at: time) -> None:
    """The next deliverAt moment is at or after the fan-out, within a day and an hour, is the
    reminders' instant for its local day, and no earlier day's instant lies in between."""
    tz = clock.zone(zone)
    found = clock.next_local_moment(after, at, tz)
    assert after <= found <= after + timedelta(days=1, hours=1)
    day = found.astimezone(tz).date()
    for candidate in (day, day - timedelta(days=1), day + timedelta(days=1)):
        if clock.occurrence_on(candidate, at, tz) == found:
            break
    else:
        raise AssertionError("the moment is no day's occurrence")
    earlier = clock.occurrence_on(day - timedelta(days=1), at, tz)
    assert not (after <= earlier < found)


@settings(max_examples=200, deadline=None)
@given(after=moments, at=times, dated=st.booleans())
def test_the_fan_out_gives_every_zone_its_own_moment(
    after: datetime, at: time, dated: bool
) -> None:
    """The fan-out's zone → moment table (herald.fanout.service.local_moments): one entry per
    IANA zone, each the clock's own rule for that zone — a Kathmandu and a London recipient of
    the same event get their own `at`."""
    from herald.fanout.service import local_moments

    day = after.date() + timedelta(days=2) if dated else None
    table = local_moments(at, day, after)
    assert set(table) == clock.iana_zones()
    floor = after.replace(second=0, microsecond=0)
    for name in (KATHMANDU.key, LONDON.key):
        tz = clock.zone(name)
        expected = (
            clock.local_moment(day, at, tz) if day else clock.next_local_moment(floor, at, tz)
        )
        assert table[name] == expected
        if not clock.is_skipped(expected.astimezone(tz).date(), at, tz):
            assert expected.astimezone(tz).time().replace(tzinfo=None) == at
