"""SQL of the preference stage: a fan-out batch's stored choices, in two statements (R-PREF-5).

Each statement binds the batch's person ids as ONE bigint[] parameter, so a batch of 500 costs
two round trips, never one per person or per channel. Person ids are global primary keys, so
the tenant is implied by the ids the (tenant-scoped) audience page produced.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import BigInteger, ColumnElement, Row, any_, cast, literal, select
from sqlalchemy.dialects.postgresql import ARRAY
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
