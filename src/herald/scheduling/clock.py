"""Reminder occurrences: pure functions over the IANA time-zone database (`zoneinfo`).

An occurrence is the UTC instant at which the zone's wall clock shows the schedule's local time on
one of its ISO weekdays (R-REMIND-4). It is computed per local calendar day with `zoneinfo`, never
by adding 24 hours to the previous one, so a day of 23 or 25 hours, Lord Howe's 30-minute shift,
Kathmandu's +05:45 and a zone that changed its offset are all exact.

Clock changes (DESIGN.md §5.2):
- a local time the clock skips (spring forward) fires at the instant it would have shown had
  it not jumped: the wall time read with the offset in force before the jump (PEP 495 `fold=0`
  on a gap). London 2027-03-28 01:30 → 01:30 UTC, shown as 02:30 BST;
- a local time the clock shows twice (fall back) fires once, at its first instant (`fold=0`).
  London 2027-10-31 01:30 → 00:30 UTC.

A zone that skips a whole calendar day (Samoa, 2011-12-30) gives that day the same instant as
the next one; occurrences are kept strictly increasing, so it fires once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, available_timezones

LOCAL_TIME = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")
ISO_WEEKDAYS = range(1, 8)
# Days looked at for the next occurrence: a week, plus a day either side for zone offsets and
# one more for a skipped calendar day.
_SEARCH_DAYS = 10


# Files a system zoneinfo directory holds that are not zones of the IANA database.
_NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})


@lru_cache(maxsize=1)
def iana_zones() -> frozenset[str]:
    """Every zone name the installed IANA database knows (without the machine's `localtime`
    and the like, which name no place)."""
    return frozenset(
        name
        for name in available_timezones()
        if name not in _NOT_ZONES and not name.startswith(("posix/", "right/"))
    )


def is_iana_zone(name: str) -> bool:
    return name in iana_zones()


@lru_cache(maxsize=512)
def zone(name: str) -> ZoneInfo:
    """The zone called `name`; raises ValueError for anything that is not an IANA zone name
    (a path, `localtime`, `Mars/Olympus`)."""
    if not is_iana_zone(name):
        raise ValueError(f"{name!r} is not an IANA time zone")
    return ZoneInfo(name)


def parse_local_time(text: str) -> time:
    """`HH:MM`, 00:00 to 23:59, two digits each (R-REMIND-2); raises ValueError otherwise."""
    match = LOCAL_TIME.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a local time HH:MM from 00:00 to 23:59")
    return time(int(match.group(1)), int(match.group(2)))


def occurrence_on(day: date, at: time, tz: ZoneInfo) -> datetime:
    """The UTC instant of `at` on local `day` in `tz`, by the rules in the module docstring."""
    # fold=0 is the first of a repeated time and the pre-jump offset for a skipped one.
    local = datetime.combine(day, at, tzinfo=tz)
    return local.astimezone(UTC)


def is_skipped(day: date, at: time, tz: ZoneInfo) -> bool:
    """True when the zone's clock never shows `at` on `day` (a spring-forward gap)."""
    instant = occurrence_on(day, at, tz)
    shown = instant.astimezone(tz)
    return (shown.date(), shown.time()) != (day, at)


def next_occurrence(after: datetime, tz: ZoneInfo, at: time, weekdays: Sequence[int]) -> datetime:
    """The first occurrence strictly after `after` (an aware datetime)."""
    return next(occurrences_after(after, tz, at, weekdays))


def occurrences_after(
    after: datetime, tz: ZoneInfo, at: time, weekdays: Sequence[int]
) -> Iterator[datetime]:
    """Every occurrence strictly after `after`, in strictly increasing order (endless)."""
    if after.tzinfo is None:
        raise ValueError("`after` must be an aware datetime")
    days = frozenset(weekdays)
    if not days or not days <= set(ISO_WEEKDAYS):
        raise ValueError("weekdays must be ISO weekdays 1..7, at least one")
    # Start a day early: the local date of `after` may be ahead of the occurrence's day.
    day = after.astimezone(tz).date() - timedelta(days=1)
    last = after.astimezone(UTC)
    idle = 0
    while True:
        if day.isoweekday() in days:
            instant = occurrence_on(day, at, tz)
            if instant > last:
                yield instant
                last = instant
                idle = 0
        idle += 1
        if idle > _SEARCH_DAYS * 2:  # unreachable for any real zone; never loop forever
            raise RuntimeError(f"no occurrence found in {tz.key} after {after.isoformat()}")
        day += timedelta(days=1)


def occurrences(
    after: datetime, tz: ZoneInfo, at: time, weekdays: Sequence[int], count: int
) -> list[datetime]:
    """The next `count` occurrences strictly after `after`."""
    found: list[datetime] = []
    for instant in occurrences_after(after, tz, at, weekdays):
        found.append(instant)
        if len(found) >= count:
            break
    return found


def occurrences_through(
    start: datetime, end: datetime, tz: ZoneInfo, at: time, weekdays: Sequence[int], limit: int
) -> list[datetime]:
    """The occurrences in [start, end], oldest first, at most the `limit` latest of them
    (a scheduler back from a long outage looks at a bounded tail, never the whole gap)."""
    found: list[datetime] = []
    for instant in occurrences_after(start - timedelta(microseconds=1), tz, at, weekdays):
        if instant > end:
            break
        found.append(instant)
        if len(found) > limit:
            del found[0]
    return found


# ---------------------------------------------------------------------------------------------
# A person's own hour (issue 45): `deliverAt` and quiet hours, by the same rules as reminders.


def local_moment(day: date, at: time, tz: ZoneInfo) -> datetime:
    """`deliverAt` with a date: the instant `at` shows on local `day` in `tz` — the reminders'
    rule exactly (`occurrence_on`): a skipped time at the pre-jump offset, a repeated one at its
    first instant."""
    return occurrence_on(day, at, tz)


def next_local_moment(after: datetime, at: time, tz: ZoneInfo) -> datetime:
    """`deliverAt` without a date: the first instant at or after `after` at which `tz` shows
    `at` (by the reminders' rule, every day of the week)."""
    return next_occurrence(after - timedelta(microseconds=1), tz, at, ISO_WEEKDAYS)


def in_quiet_hours(shown: time, start: time, end: time) -> bool:
    """Whether a wall-clock time lies in [start, end); end before start wraps past midnight."""
    if start < end:
        return start <= shown < end
    return shown >= start or shown < end


def quiet_until(moment: datetime, tz: ZoneInfo, start: time, end: time) -> datetime | None:
    """None when `moment` is outside the quiet hours [start, end) of `tz`'s wall clock, else
    the instant they end: `end` on the local day the window closes, by the reminders' rule (a
    skipped end at the pre-jump offset; a repeated end at its first instant). A moment in the
    second pass of a repeated hour after that first instant is outside: the window has closed."""
    if moment.tzinfo is None:
        raise ValueError("`moment` must be an aware datetime")
    if start == end:
        raise ValueError("quiet hours need a start and an end that differ")
    local = moment.astimezone(tz)
    shown = local.time().replace(tzinfo=None)
    if not in_quiet_hours(shown, start, end):
        return None
    day = local.date()
    if start > end and shown >= start:
        day += timedelta(days=1)  # the window wraps: it ends tomorrow
    until = occurrence_on(day, end, tz)
    if until <= moment:
        return None
    return until
