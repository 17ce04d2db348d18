"""The fan-out worker: recipients, deliveries, cursor, completion, claims, crash recovery."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event as sqlalchemy_event
from sqlalchemy import func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.config import Settings
from herald.db import schema as s
from herald.fanout import queries as fanout_queries
from herald.fanout import service as fanout
from herald.fanout.service import InAppNotice
from herald.fanout.worker import fan_out_next_event
from herald.kinds import Kind, Registry, Template
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.runtime.worker import ChannelWakes, run_worker
from herald.sending.service import SendInput, asend
from tests import seed
from tests.integration import fanout_reference

ANNOUNCE = {"title": "Sports day moved", "message": "It is now on Friday."}


async def school(engine: AsyncEngine, tenant: str, students: int = 3) -> dict[str, Any]:
    """A class with `students` pupils, each with one guardian; one teacher member."""
    async with engine.begin() as conn:
        guardian_role = await seed.role(conn, tenant, "guardian", "guardian")
        student_role = await seed.role(conn, tenant, "student", "student")
        teacher_role = await seed.role(conn, tenant, "teacher", "staff")
        group_id = await seed.group(conn, tenant, "class-7a")
        pupils, guardians = [], []
        for i in range(students):
            pupil = await seed.person(
                conn, tenant, f"s{i}", full_name=f"Pupil {i}", roles=[student_role]
            )
            parent = await seed.person(
                conn,
                tenant,
                f"g{i}",
                full_name=f"Parent {i}",
                roles=[guardian_role],
                locale="ne" if i == 0 else "en",
            )
            await seed.member(conn, tenant, group_id, pupil.id)
            await seed.guardian(conn, tenant, pupil.id, parent.id)
            pupils.append(pupil)
            guardians.append(parent)
        teacher = await seed.person(conn, tenant, "t0", full_name="Teacher", roles=[teacher_role])
        await seed.member(conn, tenant, group_id, teacher.id, role="teacher")
    return {
        "group_id": group_id,
        "pupils": pupils,
        "guardians": guardians,
        "teacher": teacher,
        "guardian_role": guardian_role,
    }


async def send_event(engine: AsyncEngine, tenant: str, **overrides: Any) -> uuid.UUID:
    values: dict[str, Any] = {
        "tenant_id": tenant,
        "kind": "announcement.posted",
        "audience": {"kind": "guardians_of_group", "groupIds": ["class-7a"]},
        "channels": ["in_app", "email"],
        "variables": ANNOUNCE,
    }
    values.update(overrides)
    async with engine.begin() as conn:
        result = await asend(conn, SendInput(**values), registry=SAMPLE_REGISTRY)
    assert result is not None
    return result.id


async def run_to_completion(
    engine: AsyncEngine, tenant: str, registry: Registry = SAMPLE_REGISTRY, batch_size: int = 500
) -> int:
    events = 0
    while await fan_out_next_event(engine, registry, batch_size=batch_size, tenant_id=tenant):
        events += 1
    return events


async def deliveries(engine: AsyncEngine, event_public_id: uuid.UUID) -> list[dict[str, Any]]:
    e, r, d, p = s.notification_event, s.notification_recipient, s.notification_delivery, s.person
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(
                p.c.external_id,
                r.c.audience_role_id,
                r.c.variables,
                d.c.channel,
                d.c.status,
                d.c.rendered_title,
                d.c.rendered_body,
                d.c.sent_at,
                d.c.skipped_at,
                d.c.queued_at,
                d.c.provider_target_id,
            )
            .select_from(
                e.join(r, r.c.event_id == e.c.id)
                .join(d, d.c.recipient_id == r.c.id)
                .outerjoin(p, p.c.id == r.c.user_id)
            )
            .where(e.c.public_id == event_public_id)
            .order_by(p.c.external_id, d.c.channel, d.c.id)
        )
        return [dict(row._mapping) for row in rows]


async def claimed_school_event(
    engine: AsyncEngine, tenant: str, students: int
) -> tuple[uuid.UUID, uuid.UUID, Any]:
    """A school of `students`, one event sent to it and claimed for fan-out: (event's public id,
    claim token, the claimed event)."""
    await school(engine, tenant, students=students)
    event_id = await send_event(engine, tenant)
    token = uuid.uuid4()
    async with engine.begin() as conn:
        claimed = await fanout.claim_next_event(conn, token, tenant_id=tenant)
    assert claimed is not None
    return event_id, token, claimed


async def event(engine: AsyncEngine, public_id: uuid.UUID) -> dict[str, Any]:
    async with engine.connect() as conn:
        return await seed.event_row(conn, public_id)


async def test_fan_out_guardians_of_a_class(engine: AsyncEngine, tenant: str) -> None:
    """R-FANOUT-1, R-FANOUT-2, R-FANOUT-11, R-FANOUT-12, R-CHAN-17, R-SCHEMA-27, R-AUD-11, R-AUD-15: one recipient per
    guardian, one delivery per channel; in_app delivered with its rendered content and no sent_at;
    email queued with queued_at; the teacher and pupils are not guardians and get nothing."""
    world = await school(engine, tenant)
    event_id = await send_event(engine, tenant)
    assert await run_to_completion(engine, tenant) == 1

    rows = await deliveries(engine, event_id)
    assert [(r["external_id"], r["channel"], r["status"]) for r in rows] == [
        (f"g{i}", ch, st)
        for i in range(3)
        for ch, st in (("email", "queued"), ("in_app", "delivered"))
    ]
    for row in rows:
        assert row["audience_role_id"] == world["guardian_role"]  # scoped to the guardian role
        assert row["variables"] == {"name": f"Parent {row['external_id'][1:]}"}
        assert row["sent_at"] is None and row["queued_at"] is not None
        if row["channel"] == "in_app":
            assert (row["rendered_title"], row["rendered_body"]) == (
                ANNOUNCE["title"],
                ANNOUNCE["message"],
            )
        else:
            assert row["rendered_title"] is None  # remote channels render at send time
    done = await event(engine, event_id)
    assert done["fanout_completed_at"] is not None and done["recipient_count"] == 3


async def test_preferences_suppress_with_a_row(engine: AsyncEngine, tenant: str) -> None:
    """R-FANOUT-11, R-PREF-2, R-PREF-3, R-PREF-11: a suppressed channel still gets a row, skipped_preference with
    skipped_at; SMS is off by default outside security."""
    world = await school(engine, tenant, students=1)
    async with engine.begin() as conn:
        await conn.execute(
            insert(s.notification_channel_preference).values(
                tenant_id=tenant, person_id=world["guardians"][0].id, channel="email", enabled=False
            )
        )
    event_id = await send_event(engine, tenant, channels=["in_app", "email", "sms"])
    await run_to_completion(engine, tenant)
    rows = {r["channel"]: r for r in await deliveries(engine, event_id)}
    assert (
        rows["email"]["status"] == "skipped_preference" and rows["email"]["skipped_at"] is not None
    )
    assert rows["sms"]["status"] == "skipped_preference"
    assert rows["in_app"]["status"] == "delivered"


async def test_zero_recipients_completes_with_warning(
    engine: AsyncEngine, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    """R-FANOUT-14, R-FANOUT-8: an empty class completes normally, count 0, logged at warn."""
    async with engine.begin() as conn:
        await seed.group(conn, tenant, "class-7a")
    event_id = await send_event(engine, tenant)
    with caplog.at_level(logging.WARNING, logger="herald.fanout.service"):
        await run_to_completion(engine, tenant)
    done = await event(engine, event_id)
    assert done["fanout_completed_at"] is not None and done["recipient_count"] == 0
    assert "zero recipients" in caplog.text


async def test_batches_advance_cursor_and_count(engine: AsyncEngine, tenant: str) -> None:
    """R-FANOUT-4, R-FANOUT-7, R-FANOUT-8, R-FANOUT-9, R-AUD-5: pages of two; the cursor advances with each
    committed page; the completion count is the COUNT of recipient rows."""
    event_id, token, claimed = await claimed_school_event(engine, tenant, 5)
    assert claimed.public_id == event_id
    cursors = []
    while True:
        async with engine.begin() as conn:
            outcome = await fanout.fan_out_batch(
                conn, claimed, token, registry=SAMPLE_REGISTRY, batch_size=2
            )
        row = await event(engine, event_id)
        cursors.append(row["fanout_cursor"])
        if outcome.completed:
            break
        assert row["fanout_completed_at"] is None and row["recipient_count"] is None
    assert cursors == sorted(cursors) and len(cursors) == 3
    assert row["recipient_count"] == 5


async def test_a_batch_is_planned_with_its_values_and_its_key_checks_are_not_replanned(
    engine: AsyncEngine, tenant: str
) -> None:
    """The batch statement's page is planned with its tenant and cursor every batch: it is never
    a prepared statement, however many batches one connection runs (psycopg prepares a
    statement from its sixth run, and the server could then settle on one generic plan). And
    the batch's transaction does not force custom plans: that setting also re-plans every saved
    plan the statement runs, the foreign-key check of each row it writes among them — half a
    batch's server time (docs/scaling-fanout.md, plans)."""
    event_id, token, claimed = await claimed_school_event(engine, tenant, 14)
    assert claimed.public_id == event_id
    batches = 0
    async with engine.connect() as conn:  # one connection, as the fan-out holds one per event
        while True:
            async with conn.begin():
                outcome = await fanout.fan_out_batch(
                    conn, claimed, token, registry=SAMPLE_REGISTRY, batch_size=2
                )
                batches += 1
                mode = (
                    await conn.execute(select(func.current_setting("plan_cache_mode")))
                ).scalar()
                assert mode == "auto", batches
                prepared = await conn.execute(
                    text(
                        "SELECT statement FROM pg_prepared_statements "
                        "WHERE statement LIKE '%INSERT INTO notification_delivery%' "
                        "AND statement NOT LIKE '%pg_prepared_statements%'"
                    )
                )
                assert prepared.all() == [], batches
            if outcome.completed:
                break
    assert batches >= 7
    assert (await event(engine, event_id))["recipient_count"] >= 14


async def test_failed_batch_writes_nothing(
    engine: AsyncEngine, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-FANOUT-3, R-FANOUT-7: a batch that fails part-way rolls back its recipients and its cursor
    together; rerun, it writes everything exactly once."""
    await school(engine, tenant, students=2)
    event_id = await send_event(engine, tenant)

    async def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(fanout_queries, "complete_fanout", broken)
    with pytest.raises(RuntimeError):
        await fan_out_next_event(engine, SAMPLE_REGISTRY, batch_size=500, tenant_id=tenant)
    assert await deliveries(engine, event_id) == []
    row = await event(engine, event_id)
    assert (
        row["fanout_cursor"] == 0 and row["fanout_claimed_at"] is not None
    )  # claimed, not complete

    monkeypatch.undo()
    async with engine.begin() as conn:  # the reaper releases the stale claim (R-REAPER-7)
        assert row["id"] in await fanout.release_stale_claims(conn, older_than_seconds=0)
    await run_to_completion(engine, tenant)
    assert len(await deliveries(engine, event_id)) == 4
    assert (await event(engine, event_id))["recipient_count"] == 2


async def test_crash_between_batches_resumes_from_cursor(engine: AsyncEngine, tenant: str) -> None:
    """R-FANOUT-5, R-FANOUT-15, R-REAPER-7, R-FANOUT-10: a worker that dies after its first page
    leaves the event claimed and incomplete; once released, the next worker resumes at the cursor
    and nobody is written twice."""
    event_id, token, claimed = await claimed_school_event(engine, tenant, 4)
    async with engine.begin() as conn:
        first = await fanout.fan_out_batch(
            conn, claimed, token, registry=SAMPLE_REGISTRY, batch_size=3
        )
    assert first.recipients_written == 3 and not first.completed
    # The worker dies here. Nothing else claims the event while the claim is young...
    assert await run_to_completion(engine, tenant) == 0
    # ...and the reaper releases it only once it is stale (R-REAPER-8 then R-REAPER-7).
    async with engine.begin() as conn:
        assert claimed.id not in await fanout.release_stale_claims(conn, older_than_seconds=600)
        assert claimed.id in await fanout.release_stale_claims(conn, older_than_seconds=0)
    assert await run_to_completion(engine, tenant) == 1
    rows = await deliveries(engine, event_id)
    assert len(rows) == 8 and len({(r["external_id"], r["channel"]) for r in rows}) == 8
    assert (await event(engine, event_id))["recipient_count"] == 4

    # The dead worker wakes up: its claim is gone, so it writes nothing.
    async with engine.begin() as conn:
        late = await fanout.fan_out_batch(
            conn, claimed, token, registry=SAMPLE_REGISTRY, batch_size=3
        )
    assert late.lost_claim and late.recipients_written == 0


async def test_redelivered_page_is_idempotent(engine: AsyncEngine, tenant: str) -> None:
    """R-FANOUT-10: writing a page whose recipients already exist is a no-op, not a unique violation."""
    event_id, token, claimed = await claimed_school_event(engine, tenant, 2)
    async with engine.begin() as conn:
        await fanout.fan_out_batch(conn, claimed, token, registry=SAMPLE_REGISTRY, batch_size=10)
        # Rewind the cursor and completion as if the page were delivered again.
        await conn.execute(
            update(s.notification_event)
            .where(s.notification_event.c.id == claimed.id)
            .values(fanout_cursor=0, fanout_completed_at=None, recipient_count=None)
        )
    async with engine.begin() as conn:
        again = await fanout.fan_out_batch(
            conn, claimed, token, registry=SAMPLE_REGISTRY, batch_size=10
        )
    assert again.completed and again.recipients_written == 0 and again.recipient_count == 2
    assert len(await deliveries(engine, event_id)) == 4


async def test_scheduled_event_waits_until_due(engine: AsyncEngine, tenant: str) -> None:
    """R-PLAT-3, R-SCHEMA-15: a future scheduledFor is not claimed; once due it is."""
    await school(engine, tenant, students=1)
    event_id = await send_event(
        engine, tenant, scheduled_for=datetime.now(UTC) + timedelta(hours=1)
    )
    assert await run_to_completion(engine, tenant) == 0
    async with engine.begin() as conn:
        await conn.execute(
            update(s.notification_event)
            .where(s.notification_event.c.public_id == event_id)
            .values(scheduled_for=datetime.now(UTC) - timedelta(seconds=1))
        )
    assert await run_to_completion(engine, tenant) == 1


async def test_push_fans_out_per_token(engine: AsyncEngine, tenant: str) -> None:
    """R-FANOUT-6, R-SCHEMA-24, R-SCHEMA-25: one push delivery per active token; a person with no
    token gets one skipped_no_destination row; an invalidated token gets nothing."""
    world = await school(engine, tenant, students=2)
    g0, g1 = world["guardians"]
    async with engine.begin() as conn:
        a = await seed.push_token(conn, tenant, g0.id, "tok-a")
        b = await seed.push_token(conn, tenant, g0.id, "tok-b", platform="ios")
        dead = await seed.push_token(conn, tenant, g1.id, "tok-old")
        await conn.execute(
            update(s.notification_push_token)
            .where(s.notification_push_token.c.id == dead)
            .values(is_active=False, invalidated_at=func.now(), invalidation_reason="user_logout")
        )
    event_id = await send_event(engine, tenant, channels=["push"])
    await run_to_completion(engine, tenant)
    rows = [
        (r["external_id"], r["status"], r["provider_target_id"])
        for r in await deliveries(engine, event_id)
    ]
    assert rows == [
        ("g0", "queued", a),
        ("g0", "queued", b),
        ("g1", "skipped_no_destination", None),
    ]


async def test_suspended_person_recorded_gone(engine: AsyncEngine, tenant: str) -> None:
    """Decision 5: a suspended person is a recipient whose every delivery says skipped_recipient_gone."""
    world = await school(engine, tenant, students=1)
    async with engine.begin() as conn:
        await conn.execute(
            update(s.person)
            .where(s.person.c.id == world["guardians"][0].id)
            .values(status="suspended")
        )
    event_id = await send_event(engine, tenant)
    await run_to_completion(engine, tenant)
    assert {r["status"] for r in await deliveries(engine, event_id)} == {"skipped_recipient_gone"}


async def test_unrenderable_in_app_is_skipped_not_blank(engine: AsyncEngine, tenant: str) -> None:
    """R-RENDER-13, R-STATE-3, R-CENTRE-17: a builder that throws skips only that channel as
    skipped_no_template; the batch and the other channels go on; nothing blank is delivered."""

    def broken(values: Any) -> Template:
        raise KeyError("studentName")

    fragile = Kind(
        name="announcement.posted",
        category="announcement",
        channels=("in_app", "email"),
        variables={"title": "t", "message": "m"},
        templates={
            "in_app": {"en": broken},
            "email": {"en": Template(title="{{title}}", body="{{message}}")},
        },
    )
    registry = Registry([fragile])
    await school(engine, tenant, students=1)
    event_id = await send_event(engine, tenant)
    await run_to_completion(engine, tenant, registry=registry)
    rows = {r["channel"]: r for r in await deliveries(engine, event_id)}
    assert (
        rows["in_app"]["status"] == "skipped_no_template"
        and rows["in_app"]["rendered_body"] is None
    )
    assert rows["email"]["status"] == "queued"


async def test_in_app_uses_recipient_locale_and_override(engine: AsyncEngine, tenant: str) -> None:
    """R-RENDER-4, R-RENDER-17, R-FANOUT-13: a published override for (kind, in_app, locale) is read
    per batch and wins; a Nepali-locale guardian gets the ne wording."""
    await school(engine, tenant, students=2)
    async with engine.begin() as conn:
        await conn.execute(
            insert(s.notification_template).values(
                tenant_id=tenant,
                kind="announcement.posted",
                channel="in_app",
                locale="en",
                status="published",
                title="Notice: {{title}}",
                body="{{message}} — {{name}}",
                version=3,
            )
        )
    event_id = await send_event(engine, tenant, channels=["in_app"])
    await run_to_completion(engine, tenant)
    rows = {r["external_id"]: r for r in await deliveries(engine, event_id)}
    assert rows["g1"]["rendered_title"] == "Notice: Sports day moved"
    assert rows["g1"]["rendered_body"] == "It is now on Friday. — Parent 1"
    # g0 reads Nepali: the registry's ne wording stays; an en override does not replace it.
    assert rows["g0"]["rendered_title"] == "Sports day moved"
    assert rows["g0"]["rendered_body"] == "It is now on Friday."


async def test_worker_publishes_after_commit(
    engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-REALTIME-5, R-REALTIME-7, R-OPS-9, R-OPS-10, R-OPS-11: the running worker wakes on the send's NOTIFY, fans out,
    then publishes per in-app recipient without title or body; stop drains it cleanly."""
    await school(engine, tenant, students=2)
    published: list[InAppNotice] = []
    done = asyncio.Event()

    async def publish(notices: Sequence[InAppNotice]) -> None:
        # Called after commit: the rows it names are already visible to another connection.
        async with engine.connect() as conn:
            visible = (
                await conn.execute(
                    select(func.count())
                    .select_from(s.notification_recipient)
                    .where(
                        s.notification_recipient.c.public_id.in_(
                            [n.recipient_public_id for n in notices]
                        )
                    )
                )
            ).scalar_one()
        assert visible == len(notices)
        published.extend(notices)
        done.set()

    stop = asyncio.Event()
    worker = asyncio.create_task(
        run_worker(settings, engine, SAMPLE_REGISTRY, stop, publish=publish, tenant_id=tenant)
    )
    try:
        await send_event(engine, tenant)
        await asyncio.wait_for(done.wait(), timeout=20)
    finally:
        stop.set()
        await asyncio.wait_for(worker, timeout=20)
    assert len(published) == 2
    assert {n.kind for n in published} == {"announcement.posted"}
    assert not hasattr(published[0], "title") and not hasattr(published[0], "body")


async def test_a_worker_without_fanout_sends_and_leaves_events_to_the_fanout_process(
    engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """`herald worker --no-fanout` (the senders' process beside a `--no-channels` one): it works
    the delivery queue — the first event's queued emails are taken — while a due event stays
    unclaimed, with no recipients, for the fan-out process."""
    await school(engine, tenant, students=2)
    first = await send_event(engine, tenant)
    assert await run_to_completion(engine, tenant) == 1
    second = await send_event(engine, tenant, variables={**ANNOUNCE, "title": "Another notice"})
    assert second != first

    async def queued() -> int:
        rows = await deliveries(engine, first)
        return sum(1 for r in rows if r["channel"] == "email" and r["status"] == "queued")

    assert await queued() == 2
    stop = asyncio.Event()
    worker = asyncio.create_task(
        run_worker(
            settings,
            engine,
            SAMPLE_REGISTRY,
            stop,
            tenant_id=tenant,
            fanout=False,
            maintenance=False,
        )
    )
    try:
        for _ in range(400):
            if await queued() == 0:
                break
            await asyncio.sleep(0.05)
        assert await queued() == 0
        running = {t.get_name() for t in asyncio.all_tasks()}
        # Email runs three batch loops (delivery.worker.LOOPS_PER_CHANNEL; docs/scaling.md, the worker).
        assert {n for n in running if n.startswith("herald-email-")} == {
            "herald-email-0",
            "herald-email-1",
            "herald-email-2",
        }
        assert not running & {"herald-fanout", "herald-presence"}
    finally:
        stop.set()
        await asyncio.wait_for(worker, timeout=20)
    assert await deliveries(engine, second) == []
    row = await event(engine, second)
    assert row["fanout_attempts"] == 0 and row["fanout_completed_at"] is None


async def test_a_fanout_that_keeps_failing_is_given_up_not_retried_forever(
    engine: AsyncEngine, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-FANOUT-5, R-REAPER-7, R-PLAT-11: a fan-out that fails on every attempt is retried through the
    reaper, and on its last allowed attempt is marked failed with a dead letter — visible in the
    event's state — instead of being retried forever in silence. The reaper then leaves it alone."""
    from herald.fanout.worker import MAX_FANOUT_ATTEMPTS
    from herald.sending.service import get_event

    await school(engine, tenant, students=1)
    event_id = await send_event(engine, tenant)

    async def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug in a resolver")

    monkeypatch.setattr(fanout_queries, "complete_fanout", broken)
    for attempt in range(1, MAX_FANOUT_ATTEMPTS + 1):
        with pytest.raises(RuntimeError):
            await fan_out_next_event(engine, SAMPLE_REGISTRY, batch_size=50, tenant_id=tenant)
        row = await event(engine, event_id)
        assert row["fanout_attempts"] == attempt
        async with engine.begin() as conn:  # ten leases later, the reaper releases it
            released = await fanout.release_stale_claims(conn, older_than_seconds=0)
        assert (row["id"] in released) == (attempt < MAX_FANOUT_ATTEMPTS)

    row = await event(engine, event_id)
    assert row["fanout_failed_at"] is not None and row["fanout_completed_at"] is None
    assert await run_to_completion(engine, tenant) == 0  # nobody claims it again
    async with engine.connect() as conn:
        state = await get_event(conn, tenant, event_id)
        letters = (
            await conn.execute(select(s.dead_letter).where(s.dead_letter.c.tenant_id == tenant))
        ).all()
    assert state["state"] == "failed"
    assert len(letters) == 1
    assert letters[0].payload_ref == {"notificationEventPublicId": str(event_id)}
    assert letters[0].last_error == "FANOUT_FAILED (RuntimeError)"


async def test_set_based_batch_writes_what_the_row_by_row_path_writes(
    engine: AsyncEngine, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The set-based batch (fanout.pagewrite) decides every row as the row-by-row reference
    (tests/integration/fanout_reference.py) does:
    statuses (preference override beating a channel switch, a muted channel, a suspended person,
    push with two tokens and with none), in-app wording per locale (own, language, default,
    operator override with its version, a missing name rendered "there") and the content hash.
    The same event content is fanned out once each way and the rows compared person by person."""
    async with engine.begin() as conn:
        people = {
            "en": await seed.person(conn, tenant, "en", full_name="Asha {{title}} $1"),
            "ne": await seed.person(conn, tenant, "ne", locale="ne", full_name="Bina"),
            "ne-NP": await seed.person(conn, tenant, "ne-np", locale="ne-NP", full_name="Chandra"),
            "fr": await seed.person(conn, tenant, "fr", locale="fr", full_name="Dev"),
            "de": await seed.person(conn, tenant, "de", locale="de", full_name=None),
            "gone": await seed.person(conn, tenant, "gone", status="suspended"),
            "muted": await seed.person(conn, tenant, "muted"),
        }
        await seed.push_token(conn, tenant, people["en"].id, "tok-a")
        await seed.push_token(conn, tenant, people["en"].id, "tok-b")
        await seed.push_token(conn, tenant, people["muted"].id, "tok-c")
        # Email off everywhere but announcements back on (the override wins, R-PREF-8); push off.
        await conn.execute(
            insert(s.notification_channel_preference),
            [
                {
                    "tenant_id": tenant,
                    "person_id": people["ne"].id,
                    "channel": "email",
                    "enabled": False,
                },
                {
                    "tenant_id": tenant,
                    "person_id": people["muted"].id,
                    "channel": "push",
                    "enabled": False,
                },
                {
                    "tenant_id": tenant,
                    "person_id": people["muted"].id,
                    "channel": "in_app",
                    "enabled": False,
                },
            ],
        )
        await conn.execute(
            insert(s.notification_preference).values(
                tenant_id=tenant,
                person_id=people["ne"].id,
                category="announcement",
                channel="email",
                enabled=True,
            )
        )
        await conn.execute(
            insert(s.notification_template).values(
                tenant_id=tenant,
                kind="announcement.posted",
                channel="in_app",
                locale="fr",
                status="published",
                title="{{title}} (fr)",
                body="Bonjour {{name}}: {{message}}",
                version=3,
            )
        )

    async def fan_out(set_based: bool) -> dict[tuple[str, str, int | None], tuple[Any, ...]]:
        event_id = await send_event(
            engine,
            tenant,
            audience={"kind": "all_users"},
            channels=["in_app", "email", "push"],
            variables={"title": "Sports day", "message": "It is now on Friday."},
        )
        with monkeypatch.context() as patch:
            if not set_based:
                patch.setattr(fanout, "_write_page_set", fanout_reference.write_page)
            await run_to_completion(engine, tenant, batch_size=3)
        r, d, p = s.notification_recipient, s.notification_delivery, s.person
        e = s.notification_event
        async with engine.connect() as conn:
            rows = await conn.execute(
                select(
                    p.c.external_id,
                    d.c.channel,
                    d.c.provider_target_id,
                    d.c.status,
                    d.c.rendered_title,
                    d.c.rendered_body,
                    d.c.template_version,
                    d.c.rendered_hash,
                    d.c.delivered_at.is_not(None),
                    d.c.skipped_at.is_not(None),
                    r.c.variables,
                    r.c.locale,
                    # Each delivery carries its recipient's person (the admin history's key).
                    d.c.user_id == p.c.id,
                )
                .select_from(d.join(r, r.c.id == d.c.recipient_id).join(p, p.c.id == r.c.user_id))
                .join(e, e.c.id == d.c.event_id)
                .where(e.c.public_id == event_id)
            )
            return {(row[0], row[1], row[2]): tuple(row[3:]) for row in rows}

    by_rows = await fan_out(set_based=False)
    by_set = await fan_out(set_based=True)
    assert by_set == by_rows
    assert {row[-1] for row in by_set.values()} == {True}
    # And the decisions are the ones the rules give (not merely the same twice).
    en_in_app = by_set[("en", "in_app", None)]
    assert en_in_app[:3] == ("delivered", "Sports day", "It is now on Friday.")
    assert by_set[("fr", "in_app", None)][:4] == (
        "delivered",
        "Sports day (fr)",
        "Bonjour Dev: It is now on Friday.",
        3,
    )
    assert by_set[("ne", "email", None)][0] == "queued"  # the override beats the switch
    assert by_set[("gone", "email", None)][0] == "skipped_recipient_gone"
    assert by_set[("muted", "in_app", None)][0] == "skipped_preference"
    assert by_set[("muted", "push", None)][0] == "skipped_preference"
    assert by_set[("ne-np", "push", None)][0] == "skipped_no_destination"
    assert sum(1 for key in by_set if key[:2] == ("en", "push")) == 2
    assert len(by_set) == 7 * 3 + 1


async def test_an_in_app_builder_function_takes_the_set_based_batch(
    engine: AsyncEngine, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-FANOUT-12, R-RENDER-13: an in-app builder *function* is rendered once per locale with
    the name's placeholder, and the set-based batch writes what the row-by-row reference writes:
    the builder's wording with each recipient's name, and skipped_no_template for only the
    in-app rows of the locale whose builder raises."""

    def english(values: Any) -> Template:
        return Template(title="{{title}}", body="Hello {{name}}: " + values["message"])

    def nepali(values: Any) -> Template:
        raise KeyError("studentName")

    built = Kind(
        name="announcement.posted",
        category="announcement",
        channels=("in_app", "email"),
        variables={"title": "t", "message": "m"},
        templates={
            "in_app": {"en": english, "ne": nepali},
            "email": {"en": Template(title="{{title}}", body="{{message}}")},
        },
    )
    registry = Registry([built])
    await school(engine, tenant, students=2)  # g0 reads Nepali

    async def fan_out(reference: bool) -> list[dict[str, Any]]:
        event_id = await send_event(engine, tenant)
        with monkeypatch.context() as patch:
            if reference:
                patch.setattr(fanout, "_write_page_set", fanout_reference.write_page)
            await run_to_completion(engine, tenant, registry=registry)
        moments = ("sent_at", "skipped_at", "queued_at")
        return [
            {k: v for k, v in row.items() if k not in moments}
            for row in await deliveries(engine, event_id)
        ]

    by_rows = await fan_out(reference=True)
    by_set = await fan_out(reference=False)
    assert by_set == by_rows
    rows = {(r["external_id"], r["channel"]): r for r in by_set}
    assert rows[("g1", "in_app")]["status"] == "delivered"
    assert rows[("g1", "in_app")]["rendered_body"] == "Hello Parent 1: It is now on Friday."
    assert rows[("g0", "in_app")]["status"] == "skipped_no_template"
    assert rows[("g0", "in_app")]["rendered_body"] is None
    assert rows[("g0", "email")]["status"] == "queued"


def test_a_delivery_notify_wakes_the_channels_it_names() -> None:
    """The senders' wake-ups: a payload naming channels wakes only those (names this worker has
    no loop for are ignored); an empty payload, every other writer's, wakes every channel."""
    wakes = ChannelWakes(["email", "push", "sms"])

    def woken() -> set[str]:
        found = {c for c, e in wakes.events.items() if e.is_set()}
        for event in wakes.events.values():
            event.clear()
        return found

    wakes.notified("email")
    assert woken() == {"email"}
    wakes.notified("email,sms,telegram")
    assert woken() == {"email", "sms"}
    wakes.notified("")
    assert woken() == {"email", "push", "sms"}


async def test_a_fanout_batch_wakes_only_the_senders_of_the_channels_it_queued(
    engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """An email-only event wakes the email loops and no other channel's: with the poll far away,
    the SMS loops run no claim after their start-up one while the event's emails are sent (they
    used to wake on every batch's NOTIFY, each to claim nothing). The page write's NOTIFY names
    the channels of the rows it queued."""
    await school(engine, tenant, students=2)
    claims: list[str] = []

    def on_execute(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        # The delivery claim, either form (all tenants, or one): the only statement with both.
        if isinstance(params, dict) and {"channel", "lease_seconds"} <= params.keys():
            claims.append(params["channel"])

    sync_engine = engine.sync_engine
    sqlalchemy_event.listen(sync_engine, "before_cursor_execute", on_execute)
    quiet = settings.model_copy(
        update={"poll_interval_seconds": 60.0, "email_provider": "mock", "sms_provider": "mock"}
    )
    stop = asyncio.Event()
    worker = asyncio.create_task(
        run_worker(quiet, engine, SAMPLE_REGISTRY, stop, tenant_id=tenant, maintenance=False)
    )
    try:
        # Every loop claims at start-up, and again once the LISTEN connection opens (it wakes
        # every channel: nothing was heard while it was away). Wait until that has settled.
        settled = -1
        for _ in range(200):
            await asyncio.sleep(0.3)
            if len(claims) == settled and "sms" in claims and "email" in claims:
                break
            settled = len(claims)
        started = len(claims)
        assert "sms" in claims
        first = await send_event(engine, tenant)

        async def sent() -> int:
            # The mock provider's outcome is recorded skipped_unconfigured (re-driven once a
            # real provider is configured): the row was worked, which is what is waited for.
            rows = await deliveries(engine, first)
            return sum(
                1 for r in rows if r["channel"] == "email" and r["status"] == "skipped_unconfigured"
            )

        for _ in range(400):
            if await sent() == 2:
                break
            await asyncio.sleep(0.05)
        assert await sent() == 2
    finally:
        stop.set()
        await asyncio.wait_for(worker, timeout=20)
        sqlalchemy_event.remove(sync_engine, "before_cursor_execute", on_execute)
    # Only the email loops ran a claim for it; the SMS, push and Telegram loops slept on.
    assert set(claims[started:]) == {"email"}
