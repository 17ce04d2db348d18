"""The scheduler's reminder cycle against real PostgreSQL: lease, firing, crash safety, misses.

Schedules are made due the way time would: a UTC schedule at the current minute, whose
`next_run_at` is set back to today's occurrence (already past, by less than a minute).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.admin.paging import Page
from herald.auth.service import Operator
from herald.channels.mock import MockProvider
from herald.config import Settings
from herald.db import schema as s
from herald.delivery.worker import deliver_batch
from herald.fanout.worker import fan_out_next_event
from herald.kinds import Registry
from herald.maintenance import retention
from herald.scheduling import service as lease
from herald.scheduling import worker as cycle
from herald.scheduling.reminders import queries as reminder_queries
from herald.scheduling.reminders import service as reminders
from herald.secrets.vault import build_vault
from herald.sending.service import build_occurrence_dedupe_key
from tests import seed

r, run, e = s.reminder_schedule, s.reminder_run, s.notification_event


def system(tenant: str) -> Operator:
    return Operator(
        tenant_id=tenant,
        actor_kind="api_key",
        actor_id="test",
        person_id=None,
        permissions=frozenset(),
        superadmin=True,
    )


async def db_now(engine: AsyncEngine) -> datetime:
    async with engine.connect() as conn:
        value: datetime = (await conn.execute(select(func.now()))).scalar_one()
    return value.astimezone(UTC)


async def due_schedule(
    engine: AsyncEngine,
    registry: Registry,
    tenant: str,
    *,
    days_back: int = 0,
    minutes_back: int = 0,
    **changes: Any,
) -> tuple[uuid.UUID, datetime]:
    """A daily UTC schedule whose occurrence `days_back` days and `minutes_back` minutes before
    the current minute is its (already due) next_run_at. Returns (public id, that occurrence)."""
    now = await db_now(engine)
    occurrence = now.replace(second=0, microsecond=0) - timedelta(minutes=minutes_back)
    payload: dict[str, Any] = {
        "name": "Daily",
        "kind": "reminder.notice",
        "variables": {"title": "Homework", "message": "Check the diary."},
        "audience": {"kind": "all_users"},
        "timezone": "UTC",
        "localTime": occurrence.strftime("%H:%M"),
        "weekdays": [1, 2, 3, 4, 5, 6, 7],
        **changes,
    }
    async with engine.begin() as conn:
        created = await reminders.create_reminder(conn, system(tenant), registry, payload)
        await conn.execute(
            update(r)
            .where(r.c.public_id == created.id)
            .values(next_run_at=occurrence - timedelta(days=days_back))
        )
    return created.id, occurrence


async def tick(engine: AsyncEngine, registry: Registry, settings: Settings) -> cycle.TickReport:
    return await cycle.run_tick(engine, registry, settings, holder=f"test-{uuid.uuid4().hex[:6]}")


async def fire_due(engine: AsyncEngine, registry: Registry, tenant: str) -> list[Any]:
    """Fire this tenant's due occurrences without the lease (the per-row claim alone)."""
    outcomes = []
    async with engine.connect() as conn:
        due = [d for d in await reminders.due_schedules(conn, limit=1000) if d.tenant_id == tenant]
    for item in due:
        async with engine.begin() as conn:
            outcomes.append(
                await reminders.fire_occurrence(
                    conn, registry, item, max_lateness=timedelta(minutes=60)
                )
            )
    return outcomes


async def events_of(engine: AsyncEngine, tenant: str) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(e).where(e.c.tenant_id == tenant).order_by(e.c.id))
        return [dict(row._mapping) for row in rows]


async def runs_of(engine: AsyncEngine, tenant: str) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(run).where(run.c.tenant_id == tenant).order_by(run.c.occurrence)
        )
        return [dict(row._mapping) for row in rows]


async def schedule(engine: AsyncEngine, public_id: uuid.UUID) -> dict[str, Any]:
    async with engine.connect() as conn:
        row = (await conn.execute(select(r).where(r.c.public_id == public_id))).one()
        return dict(row._mapping)


@pytest.fixture(autouse=True)
async def _release_global_lease(engine: AsyncEngine) -> None:
    """Tests share one database: start each with the reminder lease free."""
    async with engine.begin() as conn:
        await conn.execute(s.scheduler_lease.delete())


async def test_an_occurrence_becomes_one_event_and_advances_next_run_at(
    engine: AsyncEngine, registry: Registry, reminder_settings: Settings, tenant: str
) -> None:
    """R-REMIND-5, R-REMIND-6, R-REMIND-7, R-OPS-8: the due occurrence is recorded as exactly one
    event, deduplicated on schedule id + instant, a `fired` run, and next_run_at moves to the
    next occurrence; a second tick finds nothing due. The scheduler only writes the event."""
    public_id, occurrence = await due_schedule(engine, registry, tenant)
    report = await tick(engine, registry, reminder_settings)
    assert report.leader and report.fired >= 1
    [event] = await events_of(engine, tenant)
    assert event["kind"] == "reminder.notice"
    assert event["dedupe_key"] == build_occurrence_dedupe_key(
        f"reminder:{public_id}:{occurrence.strftime('%Y-%m-%dT%H:%M:%SZ')}"
    )
    assert event["fanout_claimed_at"] is None  # nothing fanned out, nothing sent by it
    [fired] = await runs_of(engine, tenant)
    assert (fired["state"], fired["occurrence"], fired["event_public_id"]) == (
        "fired",
        occurrence,
        event["public_id"],
    )
    assert (await schedule(engine, public_id))["next_run_at"] == occurrence + timedelta(days=1)
    await tick(engine, registry, reminder_settings)
    assert len(await events_of(engine, tenant)) == 1


async def test_the_occurrence_reaches_each_live_recipient_once(
    engine: AsyncEngine,
    registry: Registry,
    reminder_settings: Settings,
    settings: Settings,
    tenant: str,
) -> None:
    """R-REMIND-6, R-REMIND-14, R-TG-2: the fan-out turns the event into one inbox row per live
    person; a deleted person gets nothing; on Telegram a person without a chat, or whose chat
    refuses private writes, is skipped_no_destination."""
    async with engine.begin() as conn:
        alive = await seed.person(conn, tenant, "alive")
        blocked = await seed.person(conn, tenant, "blocked")
        gone = await seed.person(conn, tenant, "gone")
        await conn.execute(
            update(s.person).where(s.person.c.id == gone.id).values(deleted_at=func.now())
        )
        await conn.execute(
            update(s.person)
            .where(s.person.c.id == blocked.id)
            .values(telegram_chat_id="555", telegram_can_write=False)
        )
    await due_schedule(engine, registry, tenant, channels=["in_app", "telegram"])
    await tick(engine, registry, reminder_settings)
    await tick(engine, registry, reminder_settings)
    while await fan_out_next_event(engine, registry, batch_size=100, tenant_id=tenant):
        pass
    d, rcp = s.notification_delivery, s.notification_recipient
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(rcp.c.user_id, d.c.channel, d.c.status)
                .join(rcp, rcp.c.id == d.c.recipient_id)
                .where(d.c.tenant_id == tenant)
            )
        ).all()
    in_app = sorted(row.user_id for row in rows if row.channel == "in_app")
    assert in_app == sorted([alive.id, blocked.id])
    assert gone.id not in {row.user_id for row in rows}

    provider = MockProvider("telegram", settings)
    vault = build_vault(settings, engine)
    try:
        await deliver_batch(
            engine,
            "telegram",
            provider,
            registry=registry,
            vault=vault,
            settings=settings,
            tenant_id=tenant,
        )
    finally:
        await vault.aclose()
    async with engine.connect() as conn:
        telegram = (
            await conn.execute(
                select(d.c.status).where(d.c.tenant_id == tenant, d.c.channel == "telegram")
            )
        ).scalars()
        assert sorted(telegram) == ["skipped_no_destination", "skipped_no_destination"]
    assert list(provider.sent_messages) == []


async def test_two_schedulers_one_lease_one_fires(
    engine: AsyncEngine, registry: Registry, reminder_settings: Settings, tenant: str
) -> None:
    """R-OPS-13: of two schedulers ticking at once only the lease holder fires; the other
    takes over once the holder's lease has expired (a killed leader)."""
    await due_schedule(engine, registry, tenant)
    first, second = await asyncio.gather(
        cycle.run_tick(engine, registry, reminder_settings, "holder-a"),
        cycle.run_tick(engine, registry, reminder_settings, "holder-b"),
    )
    assert sorted([first.leader, second.leader]) == [False, True]
    assert len(await events_of(engine, tenant)) == 1
    loser = "holder-b" if first.leader else "holder-a"
    winner = "holder-a" if first.leader else "holder-b"
    async with engine.begin() as conn:
        assert not await lease.hold_lease(conn, loser, 15)
        assert await lease.hold_lease(conn, winner, 15)  # a renewal
        # The winner dies: its lease runs out.
        await conn.execute(
            update(s.scheduler_lease).values(expires_at=func.now() - timedelta(seconds=1))
        )
    async with engine.begin() as conn:
        assert await lease.hold_lease(conn, loser, 15)
        assert not await lease.hold_lease(conn, winner, 15)
    async with engine.begin() as conn:
        assert await lease.release_lease(conn, loser)
        assert await lease.hold_lease(conn, winner, 15)


async def test_concurrent_claims_of_one_occurrence_record_one_event(
    engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-REMIND-6, R-REMIND-5: even without the lease (a paused leader waking up), two
    schedulers claiming the same occurrence at once record one event: the row lock and the
    compare-and-set on next_run_at let exactly one through."""
    await due_schedule(engine, registry, tenant)
    async with engine.connect() as conn:
        [due] = [
            d for d in await reminders.due_schedules(conn, limit=1000) if d.tenant_id == tenant
        ]

    async def claim() -> Any:
        async with engine.begin() as conn:
            outcome = await reminders.fire_occurrence(
                conn, registry, due, max_lateness=timedelta(hours=1)
            )
            await asyncio.sleep(0.05)  # hold the lock while the other tries
            return outcome

    outcomes = await asyncio.gather(*(claim() for _ in range(4)))
    assert sum(o is not None for o in outcomes) == 1
    assert len(await events_of(engine, tenant)) == 1
    assert len(await runs_of(engine, tenant)) == 1


class Crash(Exception):
    pass


@pytest.mark.parametrize("step", ["insert_runs", "advance"])
async def test_a_crash_between_steps_neither_loses_nor_doubles(
    engine: AsyncEngine,
    registry: Registry,
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
    step: str,
) -> None:
    """R-REMIND-5, R-REMIND-6: claim, event and advance are one transaction; a crash after the
    event insert leaves no event and the occurrence still due, and the retry fires it once."""
    public_id, occurrence = await due_schedule(engine, registry, tenant)
    real = getattr(reminder_queries, step)

    async def crash(*args: Any, **kwargs: Any) -> Any:
        raise Crash()

    monkeypatch.setattr(reminder_queries, step, crash)
    with pytest.raises(Crash):
        await fire_due(engine, registry, tenant)
    assert await events_of(engine, tenant) == []
    assert await runs_of(engine, tenant) == []
    assert (await schedule(engine, public_id))["next_run_at"] == occurrence

    monkeypatch.setattr(reminder_queries, step, real)
    await fire_due(engine, registry, tenant)
    await fire_due(engine, registry, tenant)
    assert len(await events_of(engine, tenant)) == 1
    assert [x["state"] for x in await runs_of(engine, tenant)] == ["fired"]


async def test_a_replayed_occurrence_folds_into_its_event(
    engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-REMIND-6, R-TG-2: an occurrence processed a second time (next_run_at put back to it)
    finds its event by the dedupe key: no second event, no second run."""
    public_id, occurrence = await due_schedule(engine, registry, tenant)
    [first] = await fire_due(engine, registry, tenant)
    async with engine.begin() as conn:
        await conn.execute(
            update(r).where(r.c.public_id == public_id).values(next_run_at=occurrence)
        )
    [again] = await fire_due(engine, registry, tenant)
    assert again.event_id == first.event_id
    assert len(await events_of(engine, tenant)) == 1
    assert len(await runs_of(engine, tenant)) == 1


async def test_after_an_outage_only_the_latest_fires_and_older_are_missed(
    engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-REMIND-5: a scheduler that was down three days fires today's occurrence once (it is
    within HERALD_REMINDER_MAX_LATENESS_MINUTES) and records the three before it as missed."""
    public_id, occurrence = await due_schedule(engine, registry, tenant, days_back=3)
    [outcome] = await fire_due(engine, registry, tenant)
    assert outcome.state == "fired" and len(outcome.missed) == 3
    runs = await runs_of(engine, tenant)
    assert [(x["state"], x["occurrence"]) for x in runs] == [
        ("missed", occurrence - timedelta(days=3)),
        ("missed", occurrence - timedelta(days=2)),
        ("missed", occurrence - timedelta(days=1)),
        ("fired", occurrence),
    ]
    assert len(await events_of(engine, tenant)) == 1
    assert (await schedule(engine, public_id))["next_run_at"] == occurrence + timedelta(days=1)


async def test_too_late_is_missed_not_fired(
    engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-REMIND-5: an occurrence later than the allowed lateness (two hours, against one) is
    recorded missed and nothing is sent; the next one is tomorrow's."""
    public_id, occurrence = await due_schedule(engine, registry, tenant, minutes_back=120)
    [outcome] = await fire_due(engine, registry, tenant)
    assert outcome.state == "missed" and outcome.event_id is None
    assert await events_of(engine, tenant) == []
    assert [x["state"] for x in await runs_of(engine, tenant)] == ["missed"]
    assert (await schedule(engine, public_id))["next_run_at"] == occurrence + timedelta(days=1)


async def test_a_schedule_the_registry_no_longer_accepts_fails_and_moves_on(
    engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-OPS-5: a stored schedule whose kind left the registry records a `failed` run with the
    code and advances, instead of blocking the cycle on an occurrence that can never fire."""
    public_id, _ = await due_schedule(engine, registry, tenant)
    async with engine.begin() as conn:
        await conn.execute(update(r).where(r.c.public_id == public_id).values(kind="gone.kind"))
    [outcome] = await fire_due(engine, registry, tenant)
    assert (outcome.state, outcome.error_code) == ("failed", "NOTIFICATION_TEMPLATE_NOT_FOUND")
    assert await events_of(engine, tenant) == []


async def test_flag_off_fires_nothing(
    engine: AsyncEngine, registry: Registry, settings: Settings, tenant: str
) -> None:
    """R-REMIND-16: with HERALD_FEATURE_REMINDERS off the scheduler neither takes the lease nor
    fires; the schedule stays due for when it is switched on."""
    public_id, occurrence = await due_schedule(engine, registry, tenant)
    report = await tick(engine, registry, settings)
    assert not report.leader and report.fired == 0
    assert await events_of(engine, tenant) == []
    assert (await schedule(engine, public_id))["next_run_at"] == occurrence


async def test_disabled_schedules_are_not_due(
    engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-REMIND-18: a disabled schedule has no next_run_at (a CHECK keeps it so) and is never
    claimed."""
    async with engine.begin() as conn:
        created = await reminders.create_reminder(
            conn,
            system(tenant),
            registry,
            {
                "name": "Off",
                "kind": "reminder.notice",
                "variables": {"title": "t", "message": "m"},
                "audience": {"kind": "all_users"},
                "timezone": "UTC",
                "localTime": "00:00",
                "weekdays": [1],
                "enabled": False,
            },
        )
    assert created.next_run_at is None
    with pytest.raises(IntegrityError):
        async with engine.begin() as conn:
            await conn.execute(
                update(r).where(r.c.public_id == created.id).values(next_run_at=func.now())
            )
    async with engine.connect() as conn:
        due = [d for d in await reminders.due_schedules(conn, limit=1000) if d.tenant_id == tenant]
    assert due == []


async def test_runs_are_listed_and_aged_out_by_retention(
    engine: AsyncEngine,
    registry: Registry,
    reminder_settings: Settings,
    tenant: str,
) -> None:
    """R-REMIND-18, R-RETENTION-9: runs are readable through the service newest first, and
    retention deletes runs older than the retention window, keeping the schedule."""
    public_id, _ = await due_schedule(engine, registry, tenant, days_back=1)
    await fire_due(engine, registry, tenant)
    async with engine.connect() as conn:
        page = await reminders.list_runs(conn, system(tenant), str(public_id), Page(10, None))
    assert [item.state for item in page.items] == ["fired", "missed"]
    async with engine.begin() as conn:
        await conn.execute(
            update(run)
            .where(run.c.tenant_id == tenant, run.c.state == "missed")
            .values(created_at=func.now() - timedelta(days=reminder_settings.retention_days + 1))
        )
    report = await retention.prune_reminder_runs(engine, reminder_settings, max_batches=None)
    assert report.reminder_runs >= 1
    assert [x["state"] for x in await runs_of(engine, tenant)] == ["fired"]
    assert (await schedule(engine, public_id))["id"]
