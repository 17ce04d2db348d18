"""Reminder occurrences across clock changes, computed with zoneinfo (herald.scheduling.clock).

Named instants are checked against values worked out by hand from the 2027 IANA rules; the
property test checks every occurrence for any zone, time, weekdays and starting instant.
"""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from herald.scheduling import clock

ALL_DAYS = (1, 2, 3, 4, 5, 6, 7)


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def first(zone: str, at: str, after: datetime, weekdays: tuple[int, ...] = ALL_DAYS) -> datetime:
    return clock.next_occurrence(
        after, clock.zone(zone), clock.parse_local_time(at), list(weekdays)
    )


@pytest.mark.parametrize(
    ("zone", "at", "after", "expected"),
    [
        # London spring forward 2027-03-28 01:00 GMT → 02:00 BST: 01:30 is skipped and fires at
        # 01:30 UTC (shown 02:30 BST); the day before and after are GMT and BST.
        ("Europe/London", "01:30", utc(2027, 3, 27, 12), utc(2027, 3, 28, 1, 30)),
        ("Europe/London", "01:30", utc(2027, 3, 26, 12), utc(2027, 3, 27, 1, 30)),
        ("Europe/London", "01:30", utc(2027, 3, 28, 12), utc(2027, 3, 29, 0, 30)),
        # London fall back 2027-10-31 02:00 BST → 01:00 GMT: 01:30 happens twice; the first.
        ("Europe/London", "01:30", utc(2027, 10, 30, 12), utc(2027, 10, 31, 0, 30)),
        ("Europe/London", "01:30", utc(2027, 10, 31, 0, 30), utc(2027, 11, 1, 1, 30)),
        ("Europe/London", "07:30", utc(2027, 3, 28, 0), utc(2027, 3, 28, 6, 30)),
        # New York: spring forward 2027-03-14 02:00 EST → 03:00 EDT; fall back 2027-11-07.
        ("America/New_York", "02:30", utc(2027, 3, 13, 12), utc(2027, 3, 14, 7, 30)),
        ("America/New_York", "09:00", utc(2027, 3, 13, 15), utc(2027, 3, 14, 13, 0)),
        ("America/New_York", "01:30", utc(2027, 11, 6, 12), utc(2027, 11, 7, 5, 30)),
        ("America/New_York", "01:30", utc(2027, 11, 7, 5, 30), utc(2027, 11, 8, 6, 30)),
        # Lord Howe: +10:30 ↔ +11, a 30-minute shift. Back 2027-04-04 02:00 → 01:30 (01:45 is
        # shown twice: first at +11); forward 2027-10-03 02:00 → 02:30 (02:15 is skipped and
        # fires as 02:15 at +10:30).
        ("Australia/Lord_Howe", "01:45", utc(2027, 4, 3, 0), utc(2027, 4, 3, 14, 45)),
        ("Australia/Lord_Howe", "01:45", utc(2027, 4, 3, 14, 45), utc(2027, 4, 4, 15, 15)),
        ("Australia/Lord_Howe", "02:15", utc(2027, 10, 2, 0), utc(2027, 10, 2, 15, 45)),
        ("Australia/Lord_Howe", "02:15", utc(2027, 10, 2, 15, 45), utc(2027, 10, 3, 15, 15)),
        # Kathmandu: +05:45 all year.
        ("Asia/Kathmandu", "07:30", utc(2027, 3, 27, 0), utc(2027, 3, 27, 1, 45)),
        ("Asia/Kathmandu", "00:10", utc(2027, 10, 30, 12), utc(2027, 10, 30, 18, 25)),
        # UTC: no change ever.
        ("UTC", "01:30", utc(2027, 3, 27, 12), utc(2027, 3, 28, 1, 30)),
        ("UTC", "01:30", utc(2027, 10, 30, 12), utc(2027, 10, 31, 1, 30)),
    ],
)
def test_named_instants_across_the_2027_clock_changes(
    zone: str, at: str, after: datetime, expected: datetime
) -> None:
    """R-REMIND-4, R-REMIND-1: the next real UTC minute that shows the local time, exact across
    daylight-saving changes, a 30-minute shift and a +05:45 zone (DESIGN.md §5.2 rules)."""
    assert first(zone, at, after) == expected


def test_skipped_and_repeated_times_follow_the_design_rule() -> None:
    """R-REMIND-4: London 2027-03-28 01:30 → 01:30 UTC (shown 02:30 BST); 2027-10-31 01:30 →
    00:30 UTC, once."""
    london = clock.zone("Europe/London")
    spring = clock.occurrence_on(date(2027, 3, 28), time(1, 30), london)
    assert spring == utc(2027, 3, 28, 1, 30)
    assert spring.astimezone(london).strftime("%H:%M %Z") == "02:30 BST"
    assert clock.is_skipped(date(2027, 3, 28), time(1, 30), london)
    autumn = clock.occurrences(utc(2027, 10, 30, 12), london, time(1, 30), list(ALL_DAYS), count=3)
    assert autumn == [utc(2027, 10, 31, 0, 30), utc(2027, 11, 1, 1, 30), utc(2027, 11, 2, 1, 30)]


def test_weekdays_are_iso_and_never_a_24_hour_step() -> None:
    """R-REMIND-3, R-REMIND-4: Monday-to-Friday 07:30 London over the March change is 07:30
    local each day, so the UTC instant moves by an hour across the weekend."""
    found = clock.occurrences(
        utc(2027, 3, 25, 12), clock.zone("Europe/London"), time(7, 30), [1, 2, 3, 4, 5], count=3
    )
    # Thu 25th is past; Fri 26th (GMT), then Mon 29th and Tue 30th (BST).
    assert found == [utc(2027, 3, 26, 7, 30), utc(2027, 3, 29, 6, 30), utc(2027, 3, 30, 6, 30)]
    assert [f.astimezone(ZoneInfo("Europe/London")).isoweekday() for f in found] == [5, 1, 2]


def test_a_skipped_calendar_day_fires_once() -> None:
    """R-REMIND-4: Samoa skipped 2011-12-30; its occurrence and the next day's are one instant,
    so the schedule fires once, and occurrences still strictly increase."""
    apia = clock.zone("Pacific/Apia")
    found = clock.occurrences(utc(2011, 12, 28), apia, time(9, 0), list(ALL_DAYS), count=4)
    assert found == sorted(set(found))
    shown = [f.astimezone(apia).date() for f in found]
    assert date(2011, 12, 30) not in shown
    assert date(2011, 12, 31) in shown


@pytest.mark.parametrize(
    "bad", ["24:00", "7:5", "07:5", "7:05", "12:60", "", "07:30:00", "０７:３０", " 07:30"]
)
def test_local_time_is_strict_hh_mm(bad: str) -> None:
    """R-REMIND-2: only HH:MM from 00:00 to 23:59."""
    with pytest.raises(ValueError):
        clock.parse_local_time(bad)


@pytest.mark.parametrize("bad", ["Mars/Olympus", "", "localtime", "../etc/passwd", "utc+1"])
def test_zone_must_be_an_iana_name(bad: str) -> None:
    """R-REMIND-1: anything but an IANA zone name is refused."""
    with pytest.raises(ValueError):
        clock.zone(bad)


ZONES = [
    "Europe/London",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "UTC",
    "America/Santiago",
    "Pacific/Chatham",
    "Asia/Tehran",
    "America/St_Johns",
    "Africa/Casablanca",
    "Pacific/Apia",
    "Europe/Dublin",
]


def _explained(instant: datetime, tz: ZoneInfo, at: time, weekdays: set[int]) -> bool:
    """The occurrence shows the local time on a chosen weekday, or it is the documented shift of
    a skipped one (the wall time read with the pre-jump offset, on a chosen weekday)."""
    shown = instant.astimezone(tz)
    if shown.time() == at and shown.isoweekday() in weekdays and shown.fold == 0:
        return True
    for back in (0, 1):
        day = shown.date() - timedelta(days=back)
        if (
            day.isoweekday() in weekdays
            and clock.is_skipped(day, at, tz)
            and clock.occurrence_on(day, at, tz) == instant
        ):
            return True
    return False


@settings(max_examples=300, deadline=None)
@given(
    zone_name=st.sampled_from(ZONES),
    hour=st.integers(0, 23),
    minute=st.sampled_from([0, 1, 15, 29, 30, 45, 59]),
    weekdays=st.sets(st.integers(1, 7), min_size=1),
    start=st.datetimes(
        min_value=datetime(2020, 1, 1), max_value=datetime(2035, 12, 31), timezones=st.just(UTC)
    ),
)
def test_every_occurrence_shows_the_requested_time(
    zone_name: str, hour: int, minute: int, weekdays: set[int], start: datetime
) -> None:
    """R-REMIND-4, R-REMIND-5: every computed occurrence shows the requested local time and
    weekday, or is the documented shift of a skipped one; occurrences strictly increase; and
    none is missed — every day in between with that weekday is accounted for."""
    tz = clock.zone(zone_name)
    at = time(hour, minute)
    found = clock.occurrences(start, tz, at, sorted(weekdays), count=12)
    assert len(found) == 12
    assert found[0] > start
    assert all(a < b for a, b in itertools.pairwise(found))
    for instant in found:
        assert _explained(instant, tz, at, weekdays), (instant, instant.astimezone(tz))
    # Nothing skipped: each chosen local day between the first and the last has an occurrence
    # (or shares its instant with the next day's, as on a skipped calendar day).
    day = found[0].astimezone(tz).date()
    expected = {
        clock.occurrence_on(day + timedelta(days=n), at, tz)
        for n in range(0, (found[-1].astimezone(tz).date() - day).days + 1)
        if (day + timedelta(days=n)).isoweekday() in weekdays
    }
    assert {i for i in expected if found[0] <= i <= found[-1]} == set(found)
