"""Channel escalation per kind (issue 45, docs/escalation.md): the steps the fan-out writes and
the scheduler's one-statement decision (read → stopped, preference off → skipped, else one
delivery and its queue row, the step sent).

Time is moved by the DB-nudge idiom (seed 004, tests/integration/test_followups.py): a step's
`due_at` is moved into the past, never slept for. The decision covers every tenant of the shared
test database, so each test reads back only its own tenant's rows.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from httpx import AsyncClient
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from sqlalchemy import func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.config import Settings
from herald.db import schema as s
from herald.fanout.worker import fan_out_next_event
from herald.kinds import Escalation, EscalationStep, Kind, Registry, Template
from herald.kinds.sample import SAMPLE_REGISTRY, URGENT_ANNOUNCEMENT
from herald.scheduling.escalation import queries as escalation
from herald.scheduling.escalation import worker
from herald.sending.service import SendInput, asend
from tests import seed

step = s.notification_escalation_step
URGENT = {"title": "School closed", "message": "Heavy rain."}


async def _people(engine: AsyncEngine, tenant: str, count: int = 1) -> list[seed.Person]:
    """People who switched SMS on (it is off by default everywhere but security, R-PREF-11)."""
    async with engine.begin() as conn:
        people = [
            await seed.person(conn, tenant, f"p{i}", full_name=f"Parent {i}") for i in range(count)
        ]
        for p in people:
            await conn.execute(
                insert(s.notification_channel_preference).values(
                    tenant_id=tenant, person_id=p.id, channel="sms", enabled=True
                )
            )
        return people


async def _send(
    engine: AsyncEngine,
    tenant: str,
    people: list[seed.Person],
    *,
    registry: Registry = SAMPLE_REGISTRY,
    kind: str = "announcement.urgent",
    channels: tuple[str, ...] = ("in_app", "email", "sms"),
) -> uuid.UUID:
    async with engine.begin() as conn:
        result = await asend(
            conn,
            SendInput(
                tenant_id=tenant,
                kind=kind,
                audience={"kind": "users", "userIds": [p.external_id for p in people]},
                channels=list(channels),
                variables=URGENT,
            ),
            registry=registry,
        )
    assert result is not None
    while await fan_out_next_event(engine, registry, batch_size=500, tenant_id=tenant):
        pass
    return result.id


async def _steps(engine: AsyncEngine, tenant: str) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(step)
            .where(step.c.tenant_id == tenant)
            .order_by(step.c.person_id, step.c.step_index)
        )
        return [dict(r._mapping) for r in rows]


async def _deliveries(engine: AsyncEngine, tenant: str) -> list[tuple[int, str, str]]:
    d = s.notification_delivery
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(d.c.user_id, d.c.channel, d.c.status)
            .where(d.c.tenant_id == tenant)
            .order_by(d.c.user_id, d.c.channel)
        )
        return [tuple(r) for r in rows]  # type: ignore[misc]


async def _nudge(engine: AsyncEngine, tenant: str, index: int) -> None:
    """Move step `index`'s due time a second into the past (the test's clock)."""
    async with engine.begin() as conn:
        await conn.execute(
            update(step)
            .where(step.c.tenant_id == tenant, step.c.step_index == index)
            .values(due_at=func.now() - text("interval '1 second'"))
        )


async def _decide(engine: AsyncEngine) -> escalation.Decided:
    async with engine.begin() as conn:
        return await escalation.decide_due(conn, 1000)


async def _read(engine: AsyncEngine, tenant: str, person_id: int | None = None) -> None:
    r = s.notification_recipient
    where = [r.c.tenant_id == tenant]
    if person_id is not None:
        where.append(r.c.user_id == person_id)
    async with engine.begin() as conn:
        await conn.execute(update(r).where(*where).values(read_at=func.now()))


async def test_fan_out_writes_in_app_now_and_the_plan_as_pending_steps(
    engine: AsyncEngine, tenant: str
) -> None:
    """The in-app copy is delivered at fan-out; email and SMS are not deliveries yet but two
    pending steps due 30 minutes and 2h30 after the fan-out."""
    (person,) = await _people(engine, tenant)
    await _send(engine, tenant, [person])
    assert await _deliveries(engine, tenant) == [(person.id, "in_app", "delivered")]
    steps = await _steps(engine, tenant)
    assert [(x["step_index"], x["channel"], x["state"]) for x in steps] == [
        (1, "email", "pending"),
        (2, "sms", "pending"),
    ]
    gap = (steps[1]["due_at"] - steps[0]["due_at"]).total_seconds()
    first = (steps[0]["due_at"] - steps[0]["created_at"]).total_seconds()
    assert (first, gap) == (pytest.approx(1800, abs=5), 7200)
    # Nothing is due yet: the decision leaves them alone.
    await _decide(engine)
    assert {x["state"] for x in await _steps(engine, tenant)} == {"pending"}


async def test_a_deliver_at_event_starts_its_plan_at_the_persons_own_hour(
    engine: AsyncEngine, tenant: str
) -> None:
    """deliverAt holds the in-app copy until the person's own 09:00 (docs/sending-and-delivery.md);
    the plan counts from that moment, not from the fan-out: an email 30 minutes after the inbox
    copy appears, not 30 minutes after the event was recorded."""
    (person,) = await _people(engine, tenant)
    async with engine.begin() as conn:
        await conn.execute(
            update(s.person).where(s.person.c.id == person.id).values(timezone="Europe/London")
        )
        result = await asend(
            conn,
            SendInput(
                tenant_id=tenant,
                kind="announcement.urgent",
                audience={"kind": "users", "userIds": [person.external_id]},
                channels=["in_app", "email", "sms"],
                variables=URGENT,
                deliver_local_time="09:00",
            ),
            registry=SAMPLE_REGISTRY,
        )
    assert result is not None
    while await fan_out_next_event(engine, SAMPLE_REGISTRY, batch_size=500, tenant_id=tenant):
        pass
    d = s.notification_delivery
    async with engine.connect() as conn:
        held = (
            await conn.execute(
                select(d.c.status, d.c.next_attempt_at).where(
                    d.c.tenant_id == tenant, d.c.channel == "in_app"
                )
            )
        ).one()
    assert held.status == "queued"
    steps = await _steps(engine, tenant)
    offsets = [(x["due_at"] - held.next_attempt_at).total_seconds() for x in steps]
    assert offsets == [1800, 1800 + 7200]


async def test_read_in_app_before_the_email_step_sends_no_email(
    engine: AsyncEngine, tenant: str
) -> None:
    (person,) = await _people(engine, tenant)
    await _send(engine, tenant, [person])
    await _read(engine, tenant)
    await _nudge(engine, tenant, 1)
    await _decide(engine)
    steps = await _steps(engine, tenant)
    # Reading stops the whole remaining plan, the later step included.
    assert [(x["state"], x["reason"]) for x in steps] == [("stopped", "read"), ("stopped", "read")]
    await _nudge(engine, tenant, 2)
    await _decide(engine)
    assert await _deliveries(engine, tenant) == [(person.id, "in_app", "delivered")]


async def test_left_unread_gets_exactly_one_email_then_one_sms(
    engine: AsyncEngine, tenant: str
) -> None:
    (person,) = await _people(engine, tenant)
    await _send(engine, tenant, [person])
    await _nudge(engine, tenant, 1)
    await _decide(engine)
    await _decide(engine)  # a second tick finds nothing more to do
    assert await _deliveries(engine, tenant) == [
        (person.id, "email", "queued"),
        (person.id, "in_app", "delivered"),
    ]
    steps = await _steps(engine, tenant)
    assert [x["state"] for x in steps] == ["sent", "pending"]
    # The email's narrow queue row was written with it (the channel workers claim it).
    q = s.notification_delivery_queue
    async with engine.connect() as conn:
        queued = (
            (
                await conn.execute(
                    select(q.c.channel).where(q.c.delivery_id == steps[0]["delivery_id"])
                )
            )
            .scalars()
            .all()
        )
    assert queued == ["email"]
    await _nudge(engine, tenant, 2)
    await _decide(engine)
    await _decide(engine)
    assert await _deliveries(engine, tenant) == [
        (person.id, "email", "queued"),
        (person.id, "in_app", "delivered"),
        (person.id, "sms", "queued"),
    ]
    assert [x["state"] for x in await _steps(engine, tenant)] == ["sent", "sent"]


async def test_email_switched_off_skips_to_sms_with_the_reason(
    engine: AsyncEngine, tenant: str
) -> None:
    (person,) = await _people(engine, tenant)
    async with engine.begin() as conn:
        await conn.execute(
            insert(s.notification_channel_preference).values(
                tenant_id=tenant, person_id=person.id, channel="email", enabled=False
            )
        )
    await _send(engine, tenant, [person])
    await _nudge(engine, tenant, 1)
    await _decide(engine)
    steps = await _steps(engine, tenant)
    assert [(x["state"], x["reason"]) for x in steps] == [
        ("skipped", "preference"),
        ("pending", None),
    ]
    # The next step keeps its own due time (2h after the skipped step's due time).
    assert steps[1]["due_at"] > steps[0]["due_at"]
    await _nudge(engine, tenant, 2)
    await _decide(engine)
    assert await _deliveries(engine, tenant) == [
        (person.id, "in_app", "delivered"),
        (person.id, "sms", "queued"),
    ]


async def test_the_trace_shows_each_step_skipped_sent_waiting_and_stopped(
    engine: AsyncEngine, tenant: str, settings: Settings, client: AsyncClient
) -> None:
    from tests.integration.test_admin_history import HISTORY_READ, operator_headers

    skips, reads = await _people(engine, tenant, 2)
    async with engine.begin() as conn:
        await conn.execute(
            insert(s.notification_channel_preference).values(
                tenant_id=tenant, person_id=skips.id, channel="email", enabled=False
            )
        )
    event_id = await _send(engine, tenant, [skips, reads])
    headers = await operator_headers(engine, settings, tenant, [HISTORY_READ])

    async def trace(who: seed.Person) -> list[dict[str, Any]]:
        answer = await client.get(
            f"/v1/admin/events/{event_id}/recipients/{who.external_id}", headers=headers
        )
        assert answer.status_code == 200, answer.text
        steps: list[dict[str, Any]] = answer.json()["escalation"]
        return steps

    waiting = await trace(skips)
    assert [(x["channel"], x["state"], x["reasonCode"]) for x in waiting] == [
        ("email", "pending", "waiting"),
        ("sms", "pending", "waiting"),
    ]
    assert waiting[0]["dueAt"] < waiting[1]["dueAt"]
    await _read(engine, tenant, reads.id)
    assert [x["reasonCode"] for x in await trace(reads)] == ["stops_at_due_time"] * 2
    await _nudge(engine, tenant, 1)
    await _decide(engine)
    await _nudge(engine, tenant, 2)
    await _decide(engine)
    skipped = await trace(skips)
    assert [(x["state"], x["reasonCode"]) for x in skipped] == [
        ("skipped", "preference"),
        ("sent", "sent"),
    ]
    assert "preferences" in skipped[0]["reason"]
    assert skipped[1]["deliveryId"] is not None and skipped[1]["decidedAt"] is not None
    assert [(x["state"], x["reasonCode"]) for x in await trace(reads)] == [
        ("stopped", "read"),
        ("stopped", "read"),
    ]


async def test_the_console_trace_page_shows_the_steps(
    engine: AsyncEngine, tenant: str, settings: Settings, client: AsyncClient
) -> None:
    from tests.integration.test_admin_history import HISTORY_READ
    from tests.integration.test_console import assert_secure_page, operator_token, sign_in

    (person,) = await _people(engine, tenant)
    event_id = await _send(engine, tenant, [person])
    await _nudge(engine, tenant, 1)
    await _decide(engine)
    await sign_in(client, await operator_token(engine, settings, tenant, [HISTORY_READ]))
    page = await client.get(f"/console/events/{event_id}/people/{person.external_id}")
    assert page.status_code == 200
    assert_secure_page(page)
    assert "Escalation plan" in page.text
    assert 'data-step="1"' in page.text and 'data-step="2"' in page.text
    assert "Sent: the person had not read it" in page.text
    assert "Waiting: sent on this channel at its due time" in page.text


async def test_a_cancelled_event_stops_its_plan(engine: AsyncEngine, tenant: str) -> None:
    (person,) = await _people(engine, tenant)
    event_id = await _send(engine, tenant, [person])
    async with engine.begin() as conn:
        await conn.execute(
            update(s.notification_event)
            .where(s.notification_event.c.public_id == event_id)
            .values(cancelled_at=func.now(), cancelled_by="person:x")
        )
    await _nudge(engine, tenant, 1)
    await _decide(engine)
    assert {(x["state"], x["reason"]) for x in await _steps(engine, tenant)} == {
        ("stopped", "event_cancelled")
    }
    assert await _deliveries(engine, tenant) == [(person.id, "in_app", "delivered")]


async def test_a_later_step_waits_for_the_one_before_it(engine: AsyncEngine, tenant: str) -> None:
    """Both steps overdue (a scheduler back from an outage): one decision takes only the
    earliest pending step of a recipient, so a read between the two still stops the second."""
    (person,) = await _people(engine, tenant)
    await _send(engine, tenant, [person])
    await _nudge(engine, tenant, 1)
    await _nudge(engine, tenant, 2)
    async with engine.begin() as conn:
        await conn.execute(
            update(step).where(step.c.tenant_id == tenant, step.c.step_index == 1)
            .values(due_at=func.now() - text("interval '1 hour'"))
        )  # fmt: skip
    await _decide(engine)
    assert [x["state"] for x in await _steps(engine, tenant)] == ["sent", "pending"]
    await _read(engine, tenant)
    await _decide(engine)
    assert [(x["state"], x["reason"]) for x in await _steps(engine, tenant)] == [
        ("sent", None),
        ("stopped", "read"),
    ]


async def test_a_connection_killed_mid_decision_neither_skips_nor_doubles(
    engine: AsyncEngine, tenant: str
) -> None:
    """The decision runs, then its backend is terminated before COMMIT (a scheduler killed
    between check and write): nothing of it stays; the next decision sends exactly once."""
    (person,) = await _people(engine, tenant)
    await _send(engine, tenant, [person])
    await _nudge(engine, tenant, 1)
    victim = await engine.connect()
    try:
        transaction = await victim.begin()
        pid = (await victim.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        decided = await escalation.decide_due(victim, 1000)
        assert decided.sent >= 1
        async with engine.begin() as killer:
            await killer.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        with pytest.raises(Exception):  # noqa: B017 - the connection is gone, whatever the driver says
            await transaction.commit()
    finally:
        await victim.invalidate()
        await victim.close()
    assert [x["state"] for x in await _steps(engine, tenant)] == ["pending", "pending"]
    assert await _deliveries(engine, tenant) == [(person.id, "in_app", "delivered")]
    await _decide(engine)
    await _decide(engine)
    assert await _deliveries(engine, tenant) == [
        (person.id, "email", "queued"),
        (person.id, "in_app", "delivered"),
    ]


async def test_the_scheduler_tick_decides_under_its_lease(
    engine: AsyncEngine, tenant: str, settings: Settings
) -> None:
    (person,) = await _people(engine, tenant)
    await _send(engine, tenant, [person])
    await _nudge(engine, tenant, 1)
    async with engine.begin() as conn:
        await conn.execute(text("DELETE FROM scheduler_lease WHERE name = 'escalation'"))
    first = await worker.run_tick(engine, settings, "holder-a")
    other = await worker.run_tick(engine, settings, "holder-b")
    assert first.leader and first.sent >= 1
    assert not other.leader
    await worker.release(engine, "holder-a")
    assert [x["state"] for x in await _steps(engine, tenant)] == ["sent", "pending"]


async def test_reading_in_the_inbox_stops_the_plan_at_no_cost_to_mark_read(
    engine: AsyncEngine, tenant: str, settings: Settings, client: AsyncClient
) -> None:
    """The inbox's own mark-read route (herald.centre) is the read; the plan stops at the next
    step's due time. Mark-read costs zero extra statements: nothing on its path names the step
    table, and the scheduler's check (the claim's recipient probe) reads `read_at` itself."""
    from pathlib import Path

    import herald.centre
    from herald.auth.service import sign_token

    (person,) = await _people(engine, tenant)
    await _send(engine, tenant, [person])
    token = sign_token(settings, tenant_id=tenant, subject=person.external_id)
    headers = {"Authorization": f"Bearer {token}"}
    listed = await client.get("/v1/me/notifications", headers=headers)
    [item] = listed.json()["items"]
    read = await client.post(f"/v1/me/notifications/{item['id']}/read", headers=headers)
    assert read.status_code == 200, read.text
    await _nudge(engine, tenant, 1)
    await _decide(engine)
    assert [x["reason"] for x in await _steps(engine, tenant)] == ["read", "read"]
    assert await _deliveries(engine, tenant) == [(person.id, "in_app", "delivered")]
    centre = Path(herald.centre.__file__).parent
    for source in centre.glob("*.py"):
        assert "escalation" not in source.read_text(encoding="utf-8"), source.name


async def test_the_claim_reads_the_due_index_and_stops_at_its_limit(
    engine: AsyncEngine, tenant: str
) -> None:
    """The claim is a range scan of the partial due index (cost independent of how many steps
    are pending). Mark-read costs nothing extra: the read check is the scheduler's, at due time,
    one primary-key probe of the recipient."""
    async with engine.begin() as conn:
        await conn.execute(text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(
            (await conn.execute(text("EXPLAIN " + escalation.DECIDE_SQL), {"limit": 10})).scalars()
        )
    assert "notification_escalation_step_due_idx" in plan
    assert "Limit" in plan
    # The read check: the recipient by its primary key in its month, never a scan.
    assert "Index Scan using notification_recipient_pkey" in plan


async def test_erasing_a_person_deletes_their_steps(engine: AsyncEngine, tenant: str) -> None:
    """A pending step never sends to an erased person: erasure deletes the person's steps."""
    from herald.directory import service as directory

    kept, erased = await _people(engine, tenant, 2)
    await _send(engine, tenant, [kept, erased])
    async with engine.begin() as conn:
        await directory.erase_person(conn, tenant, erased.external_id)
    assert {x["person_id"] for x in await _steps(engine, tenant)} == {kept.id}


async def test_retention_ages_out_decided_steps_and_keeps_pending_ones(
    engine: AsyncEngine, tenant: str, settings: Settings
) -> None:
    from herald.maintenance import retention

    (person,) = await _people(engine, tenant)
    await _send(engine, tenant, [person])
    await _nudge(engine, tenant, 1)
    await _decide(engine)
    async with engine.begin() as conn:
        await conn.execute(
            update(step)
            .where(step.c.tenant_id == tenant, step.c.state != "pending")
            .values(
                decided_at=func.now() - func.make_interval(0, 0, 0, settings.retention_days + 1)
            )
        )
    report = await retention.prune_escalation_steps(engine, settings, max_batches=None)
    assert report.escalation_steps >= 1
    assert [(x["step_index"], x["state"]) for x in await _steps(engine, tenant)] == [(2, "pending")]


# --- the property: whatever order ticks, reads and the clock come in -----------------------------


def _registry(delays: list[int], channels: list[str]) -> Registry:
    plan = Escalation(
        steps=tuple(EscalationStep(c, d) for c, d in zip(channels, delays, strict=True))
    )
    kind = Kind(
        name="announcement.urgent",
        category="announcement",
        channels=("in_app", *channels),
        dedupe="repeatable",
        escalation=plan,
        variables=URGENT_ANNOUNCEMENT.variables,
        templates={
            c: URGENT_ANNOUNCEMENT.templates.get(c) or {"en": Template(body="{{title}}")}
            for c in ("in_app", *channels)
        },
    )
    return Registry([kind])


ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.integers(min_value=1, max_value=4 * 3600)),
        st.tuples(st.just("tick"), st.just(0)),
        st.tuples(st.just("read"), st.just(0)),
    ),
    max_size=12,
)


@hsettings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    channels=st.permutations(["email", "sms", "telegram"]).flatmap(
        lambda p: st.integers(min_value=1, max_value=3).map(lambda n: list(p[:n]))
    ),
    delays=st.lists(st.integers(min_value=1, max_value=3 * 3600), min_size=3, max_size=3),
    actions=ACTIONS,
)
async def test_at_most_one_delivery_per_step_and_none_after_a_read(
    engine: AsyncEngine, channels: list[str], delays: list[int], actions: list[tuple[str, int]]
) -> None:
    tenant = f"prop-{uuid.uuid4().hex[:10]}"
    registry = _registry(delays[: len(channels)], channels)
    (person,) = await _people(engine, tenant)
    await _send(engine, tenant, [person], registry=registry, channels=("in_app", *channels))
    offsets = [sum(delays[: i + 1]) for i in range(len(channels))]
    clock = 0  # seconds since the fan-out, as the steps' due times see it
    read_at: int | None = None
    # Three closing ticks: a decision takes one step of a recipient, so a plan of three that
    # is wholly due by the end is wholly decided.
    for action, amount in [*actions, ("tick", 0), ("tick", 0), ("tick", 0)]:
        if action == "advance":
            clock += amount
            async with engine.begin() as conn:
                await conn.execute(
                    update(step)
                    .where(step.c.tenant_id == tenant, step.c.state == "pending")
                    .values(due_at=step.c.due_at - func.make_interval(0, 0, 0, 0, 0, 0, amount))
                )
        elif action == "read" and read_at is None:
            read_at = clock
            await _read(engine, tenant)
        elif action == "tick":
            before = await _deliveries(engine, tenant)
            await _decide(engine)
            after = await _deliveries(engine, tenant)
            if read_at is not None:
                assert after == before, "a delivery after the read"
    sent = [(c, st_) for _, c, st_ in await _deliveries(engine, tenant) if c != "in_app"]
    # At most one delivery per step.
    assert len(sent) == len({c for c, _ in sent})
    steps = await _steps(engine, tenant)
    for row, offset in zip(steps, offsets, strict=True):
        if row["state"] == "sent":
            assert offset <= clock, "sent before its due time"
    # Unread to the end: exactly the steps due by then were sent.
    if read_at is None:
        assert [row["state"] == "sent" for row in steps] == [o <= clock for o in offsets]
    else:
        assert all(row["state"] in ("sent", "stopped", "pending") for row in steps)
