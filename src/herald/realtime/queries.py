"""SQL of the realtime stage: the NOTIFY that publishes, the LISTEN that receives, and the
liveness check of open streams."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy import and_, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import schema as s

# Every payload of a publish in one round trip; PostgreSQL delivers them when the statement's
# transaction commits (its own, short one: the fan-out batch has already committed). The payloads
# travel as ONE JSON array, not a text[]: psycopg dumps a text array element by element in Python,
# escaping each JSON payload with a regular expression — measured at half the fan-out's own
# Python time inside `herald worker` (docs/scaling-fanout.md) — while one string is dumped as is.
_NOTIFY = text(
    "SELECT pg_notify(:channel, payload) FROM json_array_elements_text(CAST(:payloads AS json)) "
    "AS payload"
)


async def notify(conn: AsyncConnection, channel: str, payloads: Sequence[str]) -> None:
    await conn.execute(_NOTIFY, {"channel": channel, "payloads": json.dumps(list(payloads))})


async def listen(conn: psycopg.AsyncConnection[Any], channel: str) -> None:
    """Subscribe a raw (autocommit) psycopg connection to `channel`."""
    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))


async def live_people_and_roles(
    conn: AsyncConnection, tenant_id: str, person_ids: Sequence[int], role_ids: Sequence[int]
) -> list[tuple[int, int | None]]:
    """(person id, a role id among `role_ids` the person holds, or None) for each of the tenant's
    `person_ids` that still exists and is not deleted: the open streams' liveness, one query per
    tenant per keep-alive interval. A person missing from the answer is gone."""
    p, pr = s.person, s.person_role
    rows = await conn.execute(
        select(p.c.id, pr.c.role_id)
        .select_from(
            p.outerjoin(
                pr, and_(pr.c.person_id == p.c.id, pr.c.role_id.in_(list(role_ids) or [-1]))
            )
        )
        .where(
            p.c.tenant_id == tenant_id,
            p.c.id.in_(list(person_ids)),
            p.c.deleted_at.is_(None),
        )
    )
    return [(int(person), None if role is None else int(role)) for person, role in rows]
