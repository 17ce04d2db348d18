"""SQL of the preference stage.

Fan-out: a batch's stored choices, in two statements (R-PREF-5). Each binds the batch's person ids
as ONE bigint[] parameter, so a batch of 500 costs two round trips, never one per person or per
channel. Person ids are global primary keys, so the tenant is implied by the ids the
(tenant-scoped) audience page produced.

Preference API: one person's set, read in one statement and written behind a version
compare-and-set (R-PREFAPI-3, R-PREFAPI-8, R-PREFAPI-9). Every statement is keyed on the session
person and tenant, never on anything the body says (R-PREFAPI-11).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import time
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ColumnElement,
    Integer,
    Row,
    Text,
    Time,
    any_,
    cast,
    delete,
    func,
    insert,
    literal,
    null,
    select,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import schema as s


def _id_array(person_ids: Sequence[int]) -> ColumnElement[Any]:
    return cast(literal(list(person_ids), ARRAY(BigInteger)), ARRAY(BigInteger))


async def select_channel_switches(
    conn: AsyncConnection, person_ids: Sequence[int]
) -> Sequence[Row[Any, Any, Any]]:
    """(person_id, channel, enabled) global switches (notification_channel_preference)."""
    t = s.notification_channel_preference
    result = await conn.execute(
        select(t.c.person_id, t.c.channel, t.c.enabled).where(
            t.c.person_id == any_(_id_array(person_ids))
        )
    )
    return result.all()


async def select_category_overrides(
    conn: AsyncConnection, person_ids: Sequence[int]
) -> Sequence[Row[Any, Any, Any, Any]]:
    """(person_id, category, channel, enabled) per-category overrides (notification_preference)."""
    t = s.notification_preference
    result = await conn.execute(
        select(t.c.person_id, t.c.category, t.c.channel, t.c.enabled).where(
            t.c.person_id == any_(_id_array(person_ids))
        )
    )
    return result.all()


# ---------------------------------------------------------------------------------------------
# The preference API: one person's whole set.


@dataclass(frozen=True)
class StoredSet:
    """What one person saved. version 0: no set row (they never saved, R-SCHEMA-31)."""

    version: int
    # channel → enabled (notification_channel_preference).
    switches: Mapping[str, bool]
    # (category, channel) → enabled (notification_preference).
    overrides: Mapping[tuple[str, str], bool]
    # Quiet hours on the set row (migration 0033); None when the person set none.
    quiet_hours: StoredQuietHours | None = None


@dataclass(frozen=True)
class StoredQuietHours:
    start: time
    end: time
    # None: the person's own zone from the directory.
    zone: str | None


async def select_person_set(conn: AsyncConnection, tenant_id: str, person_id: int) -> StoredSet:
    """The set version and both kinds of rows in ONE statement, so a read that races a save sees
    either the whole old set or the whole new one, never a mix (one statement, one snapshot)."""
    st = s.notification_preference_set
    ch = s.notification_channel_preference
    pr = s.notification_preference
    no_text = cast(null(), Text)
    no_time = cast(null(), Time)
    version = select(
        literal("set").label("source"),
        no_text.label("category"),
        no_text.label("channel"),
        cast(null(), Boolean).label("enabled"),
        st.c.version.label("version"),
        st.c.quiet_hours_start.label("quiet_start"),
        st.c.quiet_hours_end.label("quiet_end"),
        st.c.quiet_hours_timezone.label("quiet_zone"),
    ).where(st.c.person_id == person_id, st.c.tenant_id == tenant_id)
    switches = select(
        literal("channel"),
        no_text,
        ch.c.channel,
        ch.c.enabled,
        cast(null(), Integer),
        no_time,
        no_time,
        no_text,
    ).where(ch.c.person_id == person_id, ch.c.tenant_id == tenant_id)
    overrides = select(
        literal("category"),
        pr.c.category,
        pr.c.channel,
        pr.c.enabled,
        cast(null(), Integer),
        no_time,
        no_time,
        no_text,
    ).where(pr.c.person_id == person_id, pr.c.tenant_id == tenant_id)
    rows = (await conn.execute(union_all(version, switches, overrides))).all()
    stored_version = 0
    channel_rows: dict[str, bool] = {}
    category_rows: dict[tuple[str, str], bool] = {}
    quiet: StoredQuietHours | None = None
    for row in rows:
        if row.source == "set":
            stored_version = int(row.version)
            if row.quiet_start is not None and row.quiet_end is not None:
                quiet = StoredQuietHours(row.quiet_start, row.quiet_end, row.quiet_zone)
        elif row.source == "channel":
            channel_rows[row.channel] = bool(row.enabled)
        else:
            category_rows[(row.category, row.channel)] = bool(row.enabled)
    return StoredSet(
        version=stored_version, switches=channel_rows, overrides=category_rows, quiet_hours=quiet
    )


async def insert_set(conn: AsyncConnection, tenant_id: str, person_id: int) -> int | None:
    """First save (the client read version 0): create the set row at version 1.

    None when a row already exists — someone saved since the client read — including one
    committed by a concurrent first save, which this statement waits for (R-PREFAPI-8).
    """
    st = s.notification_preference_set
    stmt = (
        pg_insert(st)
        .values(tenant_id=tenant_id, person_id=person_id, version=1)
        .on_conflict_do_nothing(index_elements=[st.c.person_id])
        .returning(st.c.version)
    )
    found = (await conn.execute(stmt)).scalar_one_or_none()
    return None if found is None else int(found)


async def advance_set(
    conn: AsyncConnection, tenant_id: str, person_id: int, expected: int
) -> int | None:
    """Later save: move the set from `expected` to `expected + 1`, or None when it is no longer
    at `expected` (R-PREFAPI-9). A concurrent saver blocks on the row lock and, once the first
    commits, re-reads the row, finds the version moved and matches nothing."""
    st = s.notification_preference_set
    stmt = (
        update(st)
        .where(st.c.person_id == person_id, st.c.tenant_id == tenant_id, st.c.version == expected)
        .values(version=st.c.version + 1, updated_at=func.now())
        .returning(st.c.version)
    )
    found = (await conn.execute(stmt)).scalar_one_or_none()
    return None if found is None else int(found)


async def replace_channel_switches(
    conn: AsyncConnection, tenant_id: str, person_id: int, switches: Mapping[str, bool]
) -> None:
    t = s.notification_channel_preference
    await conn.execute(delete(t).where(t.c.person_id == person_id, t.c.tenant_id == tenant_id))
    if switches:
        await conn.execute(
            insert(t),
            [
                {"tenant_id": tenant_id, "person_id": person_id, "channel": c, "enabled": e}
                for c, e in switches.items()
            ],
        )


async def replace_category_overrides(
    conn: AsyncConnection,
    tenant_id: str,
    person_id: int,
    overrides: Mapping[tuple[str, str], bool],
) -> None:
    t = s.notification_preference
    await conn.execute(delete(t).where(t.c.person_id == person_id, t.c.tenant_id == tenant_id))
    if overrides:
        await conn.execute(
            insert(t),
            [
                {
                    "tenant_id": tenant_id,
                    "person_id": person_id,
                    "category": category,
                    "channel": channel,
                    "enabled": enabled,
                }
                for (category, channel), enabled in overrides.items()
            ],
        )


async def set_quiet_hours(
    conn: AsyncConnection, tenant_id: str, person_id: int, quiet: StoredQuietHours | None
) -> None:
    """The set row's quiet hours, written after its version moved (the saver holds its lock)."""
    st = s.notification_preference_set
    await conn.execute(
        update(st)
        .where(st.c.person_id == person_id, st.c.tenant_id == tenant_id)
        .values(
            quiet_hours_start=None if quiet is None else quiet.start,
            quiet_hours_end=None if quiet is None else quiet.end,
            quiet_hours_timezone=None if quiet is None else quiet.zone,
        )
    )
