"""SQL of the realtime stage: the NOTIFY that publishes and the LISTEN that receives."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.types import Text

# Every payload of a publish in one round trip; PostgreSQL delivers them when the transaction
# commits (its own, short one: the fan-out batch has already committed).
_NOTIFY = text("SELECT pg_notify(:channel, payload) FROM unnest(:payloads) AS payload").bindparams(
    bindparam("payloads", type_=ARRAY(Text()))
)


async def notify(conn: AsyncConnection, channel: str, payloads: Sequence[str]) -> None:
    await conn.execute(_NOTIFY, {"channel": channel, "payloads": list(payloads)})


async def listen(conn: psycopg.AsyncConnection[Any], channel: str) -> None:
    """Subscribe a raw (autocommit) psycopg connection to `channel`."""
    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
