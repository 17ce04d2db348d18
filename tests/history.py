"""Months of finished deliveries behind a test's or a bench's own rows, generated server-side.

A queue or an inbox seeded into empty tables has every month partition but the current one
empty, and a statement that probes every month pays nothing for it there. These helpers make the
partitions a year of use leaves (as the maintenance tick creates them) and fill them with sent
email, so plans and benches meet the months a real database holds. Synchronous psycopg: the plan
tests and the benches seed that way.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, LiteralString

import psycopg
from psycopg import sql

from herald.db import partitions


def months_before_this(count: int, now: datetime | None = None) -> list[partitions.Month]:
    """The `count` whole months before the current one, oldest first."""
    first = partitions.Month.of(now or datetime.now(UTC))
    for _ in range(count):
        first = first.previous()
    return partitions.months_from(first, count)


def create_months(conn: psycopg.Connection[Any], months: Sequence[partitions.Month]) -> None:
    """The partitions of `months` (and the default) that do not exist yet, as the tick makes
    them (herald.db.partitions.plan, tenant policies included)."""
    existing = [
        row[0]
        for row in conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        )
    ]
    for statement in partitions.plan(existing, months, protect=True):
        conn.execute(statement)


def sent_email(
    conn: psycopg.Connection[Any],
    tenant: str,
    months: Sequence[partitions.Month],
    rows: int,
    *,
    day: int = 10,
    attempts: bool = False,
) -> None:
    """In each of `months` (created first where missing), one finished event `day` days into
    the month with `rows` recipients (no person behind them) and one sent email delivery each;
    with `attempts`, each delivery's attempt row too."""
    create_months(conn, months)
    for month in months:
        at = month.start + timedelta(days=day)
        event_id = conn.execute(
            "INSERT INTO notification_event (tenant_id, kind, category, priority, audience, "
            "channels, variables, dedupe_key, fanout_claimed_at, fanout_claim_token, "
            "fanout_completed_at, recipient_count, occurred_at, created_at) VALUES (%s, "
            "'announcement.posted', 'announcement', 'normal', '{\"kind\": \"all_users\"}', "
            "ARRAY['email'], '{}', %s, %s, gen_random_uuid(), %s, %s, %s, %s) RETURNING id",
            (tenant, uuid.uuid4().hex * 2, at, at, rows, at, at),
        ).fetchone()[0]  # type: ignore[index]
        conn.execute(
            "INSERT INTO notification_recipient (tenant_id, event_id, user_public_id_snapshot, "
            "occurred_at) SELECT %s, %s, gen_random_uuid(), %s FROM generate_series(1, %s)",
            (tenant, event_id, at, rows),
        )
        conn.execute(
            "INSERT INTO notification_delivery (tenant_id, event_id, recipient_id, channel, "
            "status, attempts, queued_at, next_attempt_at, sent_at, occurred_at) "
            "SELECT tenant_id, event_id, id, 'email', 'sent', 1, %s, %s, %s, occurred_at "
            "FROM notification_recipient WHERE event_id = %s AND occurred_at = %s",
            (at, at, at, event_id, at),
        )
        if attempts:
            conn.execute(
                "INSERT INTO notification_delivery_attempt (tenant_id, delivery_id, outcome, "
                "attempt_number, occurred_at) SELECT tenant_id, id, 'sent', 1, occurred_at "
                "FROM notification_delivery WHERE event_id = %s AND occurred_at = %s",
                (event_id, at),
            )


def heavy_person_events(
    conn: psycopg.Connection[Any],
    tenant: str,
    external_id: str,
    *,
    others: int,
    rows: int,
    channels: Sequence[str],
    spacing: timedelta,
    older_half: timedelta = timedelta(0),
    numbered_by: LiteralString = "id",
) -> int:
    """One heavy person (`external_id`) among `others` people of `tenant` ('other-1' …), and
    `rows` events in the temporary table `ev` (n, id, occurred_at), numbered from 1 by
    `numbered_by` and dropped at commit: the caller joins person to ev (`ev.n <=` how many each
    person gets) for the recipients and deliveries its reads need. Event g is g `spacing`s
    before now, every odd one `older_half` older still (months ago: the default partition).
    The person's id."""
    person_id = conn.execute(
        "INSERT INTO person (tenant_id, external_id) VALUES (%s, %s) RETURNING id",
        (tenant, external_id),
    ).fetchone()[0]  # type: ignore[index]
    conn.execute(
        "INSERT INTO person (tenant_id, external_id) "
        "SELECT %s, 'other-' || g FROM generate_series(1, %s) AS g",
        (tenant, others),
    )
    conn.execute(
        sql.SQL(
            """
            CREATE TEMP TABLE ev ON COMMIT DROP AS
            WITH ev AS (
                INSERT INTO notification_event
                    (tenant_id, kind, category, priority, audience, channels, dedupe_key,
                     occurred_at)
                SELECT %(tenant)s, 'announcement.posted', 'announcement', 'normal',
                       '{{"kind": "all_users"}}', %(channels)s::text[],
                       md5(%(tenant)s || g::text) || md5(g::text),
                       now() - g * %(spacing)s::interval
                           - CASE WHEN g %% 2 = 1 THEN %(older)s::interval ELSE interval '0' END
                FROM generate_series(1, %(rows)s) AS g
                RETURNING id, occurred_at
            )
            SELECT row_number() OVER (ORDER BY {order}) AS n, id, occurred_at FROM ev
            """
        ).format(order=sql.SQL(numbered_by)),
        {
            "tenant": tenant,
            "channels": list(channels),
            "spacing": spacing,
            "older": older_half,
            "rows": rows,
        },
    )
    return int(person_id)
