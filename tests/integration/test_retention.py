"""Retention against real PostgreSQL: what ages out goes, bottom-up and bounded; what is still
in flight or awaiting replay stays; tokens and the operations feed are pruned on every tick.

Retention is deployment-wide (it has no tenant), so each test first sweeps to a clean slate and
then asserts on its own tenant's rows only.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

import herald
from herald.config import Settings
from herald.db import schema as s
from herald.maintenance import queries, retention
from herald.maintenance.service import run_tick
from tests import seed

AGED = 200  # days; the default retention is 180
FRESH = 10


@pytest.fixture
def rsettings(settings: Settings) -> Settings:
    return settings.model_copy(update={"retention_days": 180, "retention_batch_size": 1000})


@pytest.fixture(autouse=True)
async def clean_slate(engine: AsyncEngine, rsettings: Settings) -> None:
    """Take whatever earlier tests left aged, so this test's counts are its own."""
    await retention.run_retention(engine, rsettings, max_batches=None)


# -- seeding -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    id: int
    public_id: uuid.UUID
    event_id: int
    recipient_id: int


async def event(
    conn: AsyncConnection,
    tenant: str,
    *,
    age_days: float,
    created_age_days: float | None = None,
    finished: bool = True,
) -> int:
    occurred = func.now() - timedelta(days=age_days)
    values: dict[str, Any] = {
        "tenant_id": tenant,
        "kind": "announcement.posted",
        "category": "announcement",
        "priority": "normal",
        "audience": {"kind": "all_users"},
        "channels": ["in_app", "email"],
        "dedupe_key": uuid.uuid4().hex * 2,
        "occurred_at": occurred,
        "created_at": func.now() - timedelta(days=created_age_days or age_days),
    }
    if finished:
        values |= {
            "fanout_claimed_at": occurred,
            "fanout_claim_token": uuid.uuid4(),
            "fanout_completed_at": occurred,
            "recipient_count": 0,
        }
    return int(
        (
            await conn.execute(
                insert(s.notification_event).values(**values).returning(s.notification_event.c.id)
            )
        ).scalar_one()
    )


async def recipient(
    conn: AsyncConnection, tenant: str, event_id: int, person: seed.Person, age_days: float
) -> int:
    return int(
        (
            await conn.execute(
                insert(s.notification_recipient)
                .values(
                    tenant_id=tenant,
                    event_id=event_id,
                    user_id=person.id,
                    user_public_id_snapshot=person.public_id,
                    occurred_at=func.now() - timedelta(days=age_days),
                )
                .returning(s.notification_recipient.c.id)
            )
        ).scalar_one()
    )


STATUS_COLUMNS: dict[str, dict[str, Any]] = {
    "queued": {},
    "failed": {"failed_at": func.now(), "last_error": "EMAIL_TRANSPORT"},
    "processing": {},  # queued, its queue row claimed (below)
    "sent": {"sent_at": func.now()},
    "delivered": {"sent_at": func.now(), "delivered_at": func.now()},
    "dead": {"failed_at": func.now(), "dead_at": func.now(), "last_error": "EMAIL_TRANSPORT"},
    "cancelled": {},
    "skipped_preference": {"skipped_at": func.now()},
    "skipped_unconfigured": {"skipped_at": func.now()},
}


async def delivery(
    conn: AsyncConnection,
    tenant: str,
    event_id: int,
    recipient_id: int,
    *,
    channel: str = "email",
    status: str = "sent",
    attempts: int = 0,
) -> Delivery:
    row = (
        await conn.execute(
            insert(s.notification_delivery)
            .values(
                tenant_id=tenant,
                event_id=event_id,
                recipient_id=recipient_id,
                channel=channel,
                # `processing` is a queued delivery whose queue row holds a claim (db.queue).
                status="queued" if status == "processing" else status,
                attempts=attempts,
                destination_hint="p●●●@example.com",
                occurred_at=seed.recipient_month(recipient_id),
                **STATUS_COLUMNS[status],
            )
            .returning(s.notification_delivery.c.id, s.notification_delivery.c.public_id)
        )
    ).one()
    if status in ("queued", "processing"):
        claimed = {"claimed_at": func.now(), "lease_expires_at": func.now() + timedelta(minutes=1)}
        await conn.execute(
            insert(s.notification_delivery_queue).values(
                delivery_id=row.id,
                tenant_id=tenant,
                channel=channel,
                occurred_at=seed.recipient_month(recipient_id),
                **(claimed if status == "processing" else {}),
            )
        )
    for number in range(1, attempts + 1):
        await conn.execute(
            insert(s.notification_delivery_attempt).values(
                tenant_id=tenant,
                delivery_id=row.id,
                outcome="sent",
                attempt_number=number,
                occurred_at=seed.delivery_month(row.id),
            )
        )
    return Delivery(row.id, row.public_id, event_id, recipient_id)


async def dead_letter(
    conn: AsyncConnection, tenant: str, target: Delivery, *, replayed: bool = False
) -> int:
    return int(
        (
            await conn.execute(
                insert(s.dead_letter)
                .values(
                    tenant_id=tenant,
                    queue_name="notification.email",
                    job_name="channel_send",
                    job_id=str(target.public_id),
                    payload_ref={
                        "notificationDeliveryPublicId": str(target.public_id),
                        "channel": "email",
                    },
                    attempts=5,
                    last_error="EMAIL_TRANSPORT",
                    replayed_at=func.now() if replayed else None,
                    replayed_by="person:ops" if replayed else None,
                )
                .returning(s.dead_letter.c.id)
            )
        ).scalar_one()
    )


async def full_event(
    engine: AsyncEngine,
    tenant: str,
    *,
    age_days: float,
    people: int = 3,
    statuses: tuple[str, ...] = ("delivered", "sent"),
    **event_kw: Any,
) -> list[Delivery]:
    """An event with `people` recipients, each with one delivery per status (in_app first)."""
    channels = ["in_app", "email", "sms", "push", "telegram"]
    made: list[Delivery] = []
    async with engine.begin() as conn:
        event_id = await event(conn, tenant, age_days=age_days, **event_kw)
        for _ in range(people):
            person = await seed.person(conn, tenant)
            rid = await recipient(conn, tenant, event_id, person, age_days)
            for channel, status in zip(channels, statuses, strict=False):
                made.append(
                    await delivery(
                        conn,
                        tenant,
                        event_id,
                        rid,
                        channel=channel,
                        status=status,
                        attempts=1 if status == "sent" else 0,
                    )
                )
    return made


@dataclass(frozen=True)
class Counts:
    events: int
    recipients: int
    deliveries: int
    attempts: int


async def counts(engine: AsyncEngine, tenant: str) -> Counts:
    async with engine.connect() as conn:

        async def n(table: Any) -> int:
            return int(
                (
                    await conn.execute(
                        select(func.count()).select_from(table).where(table.c.tenant_id == tenant)
                    )
                ).scalar_one()
            )

        return Counts(
            events=await n(s.notification_event),
            recipients=await n(s.notification_recipient),
            deliveries=await n(s.notification_delivery),
            attempts=await n(s.notification_delivery_attempt),
        )


async def event_exists(engine: AsyncEngine, event_id: int) -> bool:
    async with engine.connect() as conn:
        found = await conn.execute(
            select(s.notification_event.c.id).where(s.notification_event.c.id == event_id)
        )
        return found.first() is not None


# -- the write-time tables ---------------------------------------------------------------------


async def test_aged_finished_events_are_deleted_to_the_last_row(
    engine: AsyncEngine, tenant: str, rsettings: Settings
) -> None:
    """R-RETENTION-1, R-RETENTION-5, R-RETENTION-7: an aged event whose deliveries are all finished
    goes entirely — attempts, deliveries, recipients, then the event — and a fresh one stays."""
    await full_event(engine, tenant, age_days=AGED, statuses=("delivered", "sent", "dead"))
    await full_event(
        engine, tenant, age_days=AGED, statuses=("delivered", "skipped_preference", "cancelled")
    )
    fresh = await full_event(engine, tenant, age_days=FRESH)
    before = await counts(engine, tenant)
    assert before == Counts(events=3, recipients=9, deliveries=24, attempts=6)

    report = await retention.prune_events(engine, rsettings)

    assert await counts(engine, tenant) == Counts(events=1, recipients=3, deliveries=6, attempts=3)
    assert await event_exists(engine, fresh[0].event_id)
    assert report.deliveries >= 18 and report.recipients >= 6 and report.events >= 2
    assert report.attempts >= 3


async def test_age_is_occurred_at_not_created_at(
    engine: AsyncEngine, tenant: str, rsettings: Settings
) -> None:
    """R-RETENTION-8: a long-scheduled event (created long ago, occurring recently) is kept; an
    event that occurred long ago is deleted even if its row was written recently."""
    scheduled = await full_event(engine, tenant, age_days=FRESH, created_age_days=AGED + 100)
    backdated = await full_event(engine, tenant, age_days=AGED, created_age_days=1)

    await retention.prune_events(engine, rsettings)

    assert await event_exists(engine, scheduled[0].event_id)
    assert not await event_exists(engine, backdated[0].event_id)


@pytest.mark.parametrize("in_flight", ["queued", "processing", "failed"])
async def test_an_in_flight_delivery_keeps_its_whole_event(
    engine: AsyncEngine, tenant: str, rsettings: Settings, in_flight: str
) -> None:
    """R-RETENTION-3: an aged event with one queued, processing or failed delivery keeps that
    delivery and everything else of the event (R-RETENTION-7), while its aged, finished
    neighbour is deleted."""
    kept = await full_event(engine, tenant, age_days=AGED + 50, statuses=("delivered", "sent"))
    async with engine.begin() as conn:
        await delivery(
            conn, tenant, kept[0].event_id, kept[0].recipient_id, channel="sms", status=in_flight
        )
    gone = await full_event(engine, tenant, age_days=AGED)

    await retention.prune_events(engine, rsettings)

    assert await counts(engine, tenant) == Counts(events=1, recipients=3, deliveries=7, attempts=3)
    assert await event_exists(engine, kept[0].event_id)
    assert not await event_exists(engine, gone[0].event_id)


async def test_an_unreplayed_dead_letter_keeps_its_event(
    engine: AsyncEngine, tenant: str, rsettings: Settings
) -> None:
    """R-RETENTION-4: a delivery named by a dead letter with replayed_at NULL is never deleted
    (payload_ref is no foreign key), nor is its event; once replayed, it ages out like the rest.
    R-DLQ-18: the dead letters themselves are never deleted by age."""
    awaiting = await full_event(engine, tenant, age_days=AGED, statuses=("delivered", "dead"))
    replayed = await full_event(engine, tenant, age_days=AGED, statuses=("delivered", "dead"))
    async with engine.begin() as conn:
        letter_a = await dead_letter(conn, tenant, awaiting[1])
        letter_b = await dead_letter(conn, tenant, replayed[1], replayed=True)

    await retention.prune_events(engine, rsettings)

    async with engine.connect() as conn:
        delivery_ids = set(
            (
                await conn.execute(
                    select(s.notification_delivery.c.id).where(
                        s.notification_delivery.c.tenant_id == tenant
                    )
                )
            ).scalars()
        )
        letters = set(
            (
                await conn.execute(
                    select(s.dead_letter.c.id).where(s.dead_letter.c.tenant_id == tenant)
                )
            ).scalars()
        )
    assert delivery_ids == {d.id for d in awaiting}
    assert await event_exists(engine, awaiting[0].event_id)
    assert not await event_exists(engine, replayed[0].event_id)
    assert letters == {letter_a, letter_b}


async def test_an_unfinished_event_is_kept(
    engine: AsyncEngine, tenant: str, rsettings: Settings
) -> None:
    """R-RETENTION-7: an aged event whose fan-out has not completed (and was not cancelled) may
    still gain children, so it is not deleted; a cancelled one with no children is."""
    async with engine.begin() as conn:
        unfinished = await event(conn, tenant, age_days=AGED, finished=False)
        cancelled = await event(conn, tenant, age_days=AGED, finished=False)
        await conn.execute(
            s.notification_event.update()
            .where(s.notification_event.c.id == cancelled)
            .values(cancelled_at=func.now(), cancelled_by="api_key")
        )

    await retention.prune_events(engine, rsettings)

    assert await event_exists(engine, unfinished)
    assert not await event_exists(engine, cancelled)


async def test_each_level_is_bounded_and_a_partial_event_survives(
    engine: AsyncEngine, tenant: str, rsettings: Settings
) -> None:
    """R-RETENTION-5, R-RETENTION-6, R-RETENTION-7: with a batch of 10, one statement deletes 10
    deliveries and no more; the partly emptied event, its recipients and the rest of its
    deliveries survive until later ticks finish the job."""
    made = await full_event(engine, tenant, age_days=AGED, people=8, statuses=("delivered", "sent"))
    small = rsettings.model_copy(update={"retention_batch_size": 10})
    seen: list[tuple[str, int]] = []

    await retention.prune_events(
        engine, small, max_batches=1, on_statement=lambda level, rows, _: seen.append((level, rows))
    )

    assert seen == [("deliveries", 10), ("recipients", 0), ("events", 0)]
    assert await counts(engine, tenant) == Counts(events=1, recipients=8, deliveries=6, attempts=3)

    seen.clear()
    await retention.prune_events(
        engine,
        small,
        max_batches=None,
        on_statement=lambda level, rows, _: seen.append((level, rows)),
    )
    assert not await event_exists(engine, made[0].event_id)
    assert max(rows for _, rows in seen) <= 10
    # Every round is one statement per level, bottom-up.
    levels = [level for level, _ in seen]
    assert levels == ["deliveries", "recipients", "events"] * (len(levels) // 3)


async def test_no_level_deletes_a_parent_that_still_has_children(
    engine: AsyncEngine, tenant: str, rsettings: Settings
) -> None:
    """R-RETENTION-5: the recipient and event statements never take children with them by a
    cascade: while deliveries remain they delete nothing at all."""
    await full_event(engine, tenant, age_days=AGED)
    before = await counts(engine, tenant)
    async with engine.begin() as conn:
        aged = datetime.now(UTC) - timedelta(days=180)
        recipients = await queries.delete_aged_recipients(conn, before=aged, limit=1000)
        events = await queries.delete_aged_events(conn, before=aged, limit=1000)
    assert (recipients, events) == (0, 0)
    assert await counts(engine, tenant) == before


def test_every_retention_delete_is_bounded_by_a_subquery() -> None:
    """R-RETENTION-6: each retention DELETE takes its rows from `IN (SELECT … LIMIT :limit …)`
    (PostgreSQL has no DELETE … LIMIT)."""
    names = [
        "delete_aged_deliveries",
        "delete_aged_recipients",
        "delete_aged_events",
        "delete_invalidated_push_tokens",
        "delete_aged_feed_notifications",
        "delete_finished_operational_emails",
    ]
    for name in names:
        sql = " ".join(str(queries.SQL[name]).split())
        assert re.search(r"IN \(\s*SELECT", sql), name
        assert "LIMIT :limit" in sql, name
        assert "created_at <" not in sql or name == "delete_finished_operational_emails", name


# -- the independent retentions -----------------------------------------------------------------


async def push_token(
    conn: AsyncConnection, tenant: str, person_id: int, *, invalidated_days_ago: float | None
) -> int:
    values: dict[str, Any] = {
        "tenant_id": tenant,
        "person_id": person_id,
        "token": uuid.uuid4().hex,
        "platform": "android",
    }
    if invalidated_days_ago is not None:
        values |= {
            "is_active": False,
            "invalidated_at": func.now() - timedelta(days=invalidated_days_ago),
            "invalidation_reason": "replaced",
        }
    return int(
        (
            await conn.execute(
                insert(s.notification_push_token)
                .values(**values)
                .returning(s.notification_push_token.c.id)
            )
        ).scalar_one()
    )


async def feed_row(conn: AsyncConnection, tenant: str, age_days: float) -> int:
    return int(
        (
            await conn.execute(
                insert(s.feed_notification)
                .values(
                    tenant_id=tenant,
                    kind="delivery.dead",
                    title="A delivery died",
                    permission_code="NotificationFailure_READ",
                    occurred_at=func.now() - timedelta(days=age_days),
                )
                .returning(s.feed_notification.c.id)
            )
        ).scalar_one()
    )


async def ids(engine: AsyncEngine, table: Any, tenant: str) -> set[int]:
    async with engine.connect() as conn:
        return set(
            (await conn.execute(select(table.c.id).where(table.c.tenant_id == tenant))).scalars()
        )


async def test_tokens_and_feed_are_pruned_on_a_tick_with_no_aged_event(
    engine: AsyncEngine, tenant: str, rsettings: Settings
) -> None:
    """R-RETENTION-9, R-RETENTION-10, R-RETENTION-11, R-RETENTION-1: on a tick that finds no aged
    event, invalidated tokens past their window and feed rows past theirs still go (with their
    read receipts); live tokens, recently invalidated ones and recent feed rows stay."""
    await full_event(engine, tenant, age_days=FRESH)
    async with engine.begin() as conn:
        person = await seed.person(conn, tenant)
        stale = await push_token(conn, tenant, person.id, invalidated_days_ago=45)
        recent = await push_token(conn, tenant, person.id, invalidated_days_ago=5)
        live = await push_token(conn, tenant, person.id, invalidated_days_ago=None)
        old_feed = await feed_row(conn, tenant, 120)
        new_feed = await feed_row(conn, tenant, 3)
        for feed_id in (old_feed, new_feed):
            await conn.execute(
                insert(s.feed_notification_read).values(notification_id=feed_id, user_id=person.id)
            )

    tick = await run_tick(engine, rsettings, backfill_channels=[])

    assert tick.failures == []
    assert await ids(engine, s.notification_push_token, tenant) == {recent, live}
    assert stale not in await ids(engine, s.notification_push_token, tenant)
    assert await ids(engine, s.feed_notification, tenant) == {new_feed}
    async with engine.connect() as conn:
        receipts = set(
            (
                await conn.execute(
                    select(s.feed_notification_read.c.notification_id).where(
                        s.feed_notification_read.c.user_id == person.id
                    )
                )
            ).scalars()
        )
    assert receipts == {new_feed}
    assert (await counts(engine, tenant)).events == 1


async def test_a_failing_event_sweep_does_not_stop_the_other_retentions(
    engine: AsyncEngine, tenant: str, rsettings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-RETENTION-9, R-OPS-5: the event levels raising is logged and recorded; tokens and the
    feed are still pruned in the same tick."""

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(retention, "prune_events", broken)
    async with engine.begin() as conn:
        person = await seed.person(conn, tenant)
        stale = await push_token(conn, tenant, person.id, invalidated_days_ago=45)
        old_feed = await feed_row(conn, tenant, 120)

    tick = await run_tick(engine, rsettings, backfill_channels=[])

    assert tick.failures == ["retention_events"]
    assert stale not in await ids(engine, s.notification_push_token, tenant)
    assert old_feed not in await ids(engine, s.feed_notification, tenant)


async def test_finished_operational_emails_age_out_and_dead_ones_stay(
    engine: AsyncEngine, tenant: str, rsettings: Settings
) -> None:
    """R-RETENTION-1, R-DLQ-18: sent and skipped operational emails older than the window are
    deleted; a dead one (its dead letter names it) and a recent one stay."""
    made: dict[str, int] = {}
    async with engine.begin() as conn:
        for name, status, age in [
            ("old_sent", "sent", AGED),
            ("old_skipped", "skipped", AGED),
            ("old_dead", "dead", AGED),
            ("new_sent", "sent", FRESH),
        ]:
            made[name] = int(
                (
                    await conn.execute(
                        insert(s.operational_email)
                        .values(
                            tenant_id=tenant,
                            event_type="delivery.dead",
                            subject="s",
                            body_text="t",
                            body_html="h",
                            status=status,
                            created_at=func.now() - timedelta(days=age),
                        )
                        .returning(s.operational_email.c.id)
                    )
                ).scalar_one()
            )

    await retention.prune_operational_emails(engine, rsettings)

    assert await ids(engine, s.operational_email, tenant) == {made["old_dead"], made["new_sent"]}


def test_only_the_retention_sweep_deletes_feed_rows() -> None:
    """R-RETENTION-2: no code path other than the retention statement deletes from the feed's
    notification table."""
    src = Path(herald.__file__).resolve().parent
    pattern = re.compile(
        r"DELETE\s+FROM\s+feed_notification\b(?!_read)|delete\(\s*(?:s\.|schema\.)?feed_notification\b(?!_read)",
        re.IGNORECASE,
    )
    found = sorted(
        str(path.relative_to(src))
        for path in src.rglob("*")
        if path.suffix in (".py", ".sql")
        and "migrations" not in path.parts
        and pattern.search(path.read_text(encoding="utf-8"))
    )
    assert found == ["maintenance/queries.sql"]


# -- R-OPS-6 -------------------------------------------------------------------------------------


def test_a_retention_window_inside_the_backfill_window_refuses_to_start() -> None:
    """R-OPS-6: retention that is not longer than the backfill window would delete the backlog
    backfill exists to send, so that pair is refused when the settings load."""
    with pytest.raises(ValidationError, match="HERALD_RETENTION_DAYS"):
        Settings(retention_days=2, backfill_max_age_hours=72)
    with pytest.raises(ValidationError, match="HERALD_BACKFILL_MAX_AGE_HOURS"):
        Settings(retention_days=3, backfill_max_age_hours=72)  # equal is not longer
    assert Settings(retention_days=4, backfill_max_age_hours=72).retention_days == 4
    assert Settings().retention_days * 24 > Settings().backfill_max_age_hours


def test_retention_settings_are_bounded() -> None:
    """R-OPS-14: out-of-range retention values are refused."""
    for bad in (
        {"retention_days": 0},
        {"retention_days": 4000},
        {"retention_batch_size": 0},
        {"retention_batch_size": 50_000},
        {"push_token_retention_days": 0},
        {"feed_retention_days": 0},
        {"credit_check_timezone": "Mars/Olympus"},
    ):
        with pytest.raises(ValidationError):
            Settings(**bad)
