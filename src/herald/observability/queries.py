"""SQL behind /metrics: small counts that the partial indexes answer without scanning history."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import schema as s
from herald.db import sqlfile

SQL = sqlfile.load(Path(__file__).with_name("queries.sql"))


async def open_deliveries(conn: AsyncConnection) -> list[tuple[str, str, int]]:
    """(channel, status, count) of deliveries still in flight."""
    rows = await conn.execute(SQL["open_deliveries"])
    return [(channel, status, int(n)) for channel, status, n in rows]


async def unconfigured_deliveries(conn: AsyncConnection) -> list[tuple[str, int]]:
    d = s.notification_delivery
    rows = await conn.execute(
        select(d.c.channel, func.count())
        .where(d.c.status == "skipped_unconfigured")
        .group_by(d.c.channel)
    )
    return [(channel, int(n)) for channel, n in rows]


async def unreplayed_dead_letters(conn: AsyncConnection) -> list[tuple[str, int]]:
    dl = s.dead_letter
    rows = await conn.execute(
        select(dl.c.queue_name, func.count())
        .where(dl.c.replayed_at.is_(None))
        .group_by(dl.c.queue_name)
    )
    return [(queue, int(n)) for queue, n in rows]


async def fanout_backlog(conn: AsyncConnection) -> dict[str, Any]:
    e = s.notification_event
    due = (
        await conn.execute(
            select(func.count(), func.min(func.coalesce(e.c.scheduled_for, e.c.created_at))).where(
                e.c.fanout_claimed_at.is_(None),
                e.c.fanout_completed_at.is_(None),
                e.c.cancelled_at.is_(None),
                func.coalesce(e.c.scheduled_for, e.c.created_at) <= func.now(),
            )
        )
    ).one()
    running = (
        await conn.execute(
            select(func.count()).where(
                e.c.fanout_claimed_at.is_not(None), e.c.fanout_completed_at.is_(None)
            )
        )
    ).scalar_one()
    now = (await conn.execute(select(func.now()))).scalar_one()
    oldest = due[1]
    return {
        "due": int(due[0]),
        "running": int(running),
        "oldest_due_age_seconds": (now - oldest).total_seconds() if oldest is not None else 0.0,
    }


async def oldest_delivery_ages(conn: AsyncConnection) -> list[tuple[str, str, float]]:
    """(channel, status, seconds) — how long the oldest unfinished delivery of each channel and
    status has been in the queue (since `queued_at`). Queued rows count once due; failed rows
    (waiting for their retry) and processing rows (being sent) always. A provider that keeps
    failing makes this grow, retry after retry."""
    rows = await conn.execute(SQL["oldest_delivery_ages"])
    return [(channel, status, max(0.0, float(age or 0))) for channel, status, age in rows]


async def reminder_lag(conn: AsyncConnection) -> float:
    """Now minus the oldest reminder occurrence that is due and not yet fired (0: none due)."""
    r = s.reminder_schedule
    oldest = (
        await conn.execute(
            select(func.extract("epoch", func.now() - func.min(r.c.next_run_at))).where(
                r.c.enabled, r.c.next_run_at.is_not(None), r.c.next_run_at <= func.now()
            )
        )
    ).scalar_one()
    return max(0.0, float(oldest or 0))


async def escalation_lag(conn: AsyncConnection) -> float:
    """Now minus the oldest escalation step that is due and still pending (0: none due): the
    first entry of the partial due index (docs/escalation.md)."""
    st = s.notification_escalation_step
    oldest = (
        await conn.execute(
            select(func.extract("epoch", func.now() - func.min(st.c.due_at))).where(
                st.c.state == "pending", st.c.due_at <= func.now()
            )
        )
    ).scalar_one()
    return max(0.0, float(oldest or 0))


async def webhook_messages_waiting(conn: AsyncConnection) -> list[tuple[str, int]]:
    """(state, count) of webhook messages queued, retrying or processing."""
    rows = await conn.execute(SQL["webhook_messages_waiting"])
    return [(state, int(n)) for state, n in rows]


async def webhook_endpoint_health(conn: AsyncConnection) -> dict[str, float]:
    """Endpoints failing, healthy and disabled, and the oldest failing message's age."""
    row = (await conn.execute(SQL["webhook_endpoint_health"])).one()
    return {
        "failing": int(row.failing),
        "healthy": int(row.healthy),
        "disabled": int(row.disabled),
        "failing_seconds": max(0.0, float(row.failing_seconds or 0)),
    }


async def digest_groups(
    conn: AsyncConnection, windows: Mapping[str, int]
) -> list[tuple[str, int, int, float]]:
    """(channel, pending, due, overdue seconds) of the held digest groups."""
    if not windows:
        return []
    rows = await conn.execute(
        SQL["digest_groups"], {"kinds": list(windows), "windows": list(windows.values())}
    )
    return [
        (row.channel, int(row.pending), int(row.due), max(0.0, float(row.overdue_seconds or 0)))
        for row in rows
    ]
