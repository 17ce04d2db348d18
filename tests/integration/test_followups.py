"""Follow-ups: the library in the host's transaction, /v1/followups, and the sweep's claims.

Deadlines are crossed by nudging `arm_at` / `escalate_at` into the past (seed 004's DB-nudge
idiom), never by sleeping. The sweep covers every tenant of the shared test database, so each
test reads back only its own tenant's rows.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from httpx import AsyncClient
from pydantic import ValidationError
from sqlalchemy import Engine, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald import followups
from herald.config import Settings
from herald.db import schema as s
from herald.db import tenancy
from herald.errors import FollowupInvalid, FollowupNotFound
from herald.followups import service
from herald.followups import worker as sweeper
from herald.kinds import Registry
from tests import seed
from tests.integration.test_fanout import run_to_completion
from tests.integration.test_sending import api_key

f = s.followup
KINDS = {"kind": "attendance.event", "reminder_kind": "attendance.reminder"}
VARIABLES = {"studentName": "Asha Rai", "date": "2026-09-01", "eventType": "absent"}


def _audience(*ids: str) -> dict[str, Any]:
    return {"kind": "users", "userIds": list(ids)}


async def _arm(
    engine: AsyncEngine, tenant: str, key: str, *, grace: int = 600, delay: int = 3600, **extra: Any
) -> followups.Armed:
    async with engine.begin() as conn:
        return await followups.aarm(
            conn,
            tenant,
            key,
            audience=extra.pop("audience", _audience("guardian-1")),
            variables=extra.pop("variables", VARIABLES),
            grace_seconds=grace,
            reminder_delay_seconds=delay,
            **KINDS,
            **extra,
        )


async def _nudge(engine: AsyncEngine, tenant: str, key: str, column: str) -> None:
    """Move one deadline a second into the past."""
    async with engine.begin() as conn:
        await conn.execute(
            update(f)
            .where(f.c.tenant_id == tenant, f.c.key == key)
            .values({column: func.now() - func.make_interval(0, 0, 0, 0, 0, 0, 1)})
        )


async def _row(engine: AsyncEngine, tenant: str, key: str) -> dict[str, Any]:
    async with engine.connect() as conn:
        row = (
            (await conn.execute(select(f).where(f.c.tenant_id == tenant, f.c.key == key)))
            .mappings()
            .one()
        )
    return dict(row)


async def _events(engine: AsyncEngine, tenant: str) -> list[dict[str, Any]]:
    e = s.notification_event
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(e.c.public_id, e.c.kind, e.c.variables, e.c.audience)
            .where(e.c.tenant_id == tenant)
            .order_by(e.c.id)
        )
        return [dict(r._mapping) for r in rows]


async def _sweep(engine: AsyncEngine, registry: Registry) -> sweeper.SweepReport:
    return await sweeper.sweep(engine, registry)


def _mine(report: sweeper.SweepReport, tenant: str) -> list[service.Transition]:
    return [t for t in report.transitions if t.tenant_id == tenant]


# --- arming ------------------------------------------------------------------------------------


async def test_arm_sets_arm_at_from_the_grace_and_is_idempotent_on_key(
    engine: AsyncEngine, tenant: str
) -> None:
    """R-FOLLOW-1, R-FOLLOW-6, R-FOLLOW-7: arming stores `armed` with armAt = now + grace (the
    arming instant, whatever date the host's item carries); the same key again returns the
    existing row unchanged."""
    async with engine.begin() as conn:
        before = (await conn.execute(select(func.now()))).scalar_one()
        first = await followups.aarm(
            conn, tenant, "absence:1", audience=_audience("g"), variables={
                **VARIABLES, "date": "2019-01-01"},  # backdated item: same grace
            grace_seconds=900, reminder_delay_seconds=3600, **KINDS,
        )  # fmt: skip
    assert first.created and first.followup.state == "armed"
    assert first.followup.arm_at is not None
    assert (first.followup.arm_at - before).total_seconds() == pytest.approx(900, abs=1)
    again = await _arm(engine, tenant, "absence:1", grace=5)
    assert not again.created
    assert again.followup == first.followup
    row = await _row(engine, tenant, "absence:1")
    assert row["grace_seconds"] == 900
    assert all(row[c] is None for c in ("notified_at", "escalate_at", "reminded_at"))


async def test_arm_defaults_come_from_the_settings(
    engine: AsyncEngine, tenant: str, registry: Registry
) -> None:
    """R-FOLLOW-46, R-FOLLOW-47: without graceSeconds / reminderDelaySeconds the follow-up takes
    HERALD_FOLLOWUP_GRACE_MINUTES (15) and HERALD_FOLLOWUP_REMINDER_DELAY_MINUTES (60)."""
    data = service.parse_arm(
        {"key": "k", "kind": KINDS["kind"], "reminderKind": KINDS["reminder_kind"],
         "audience": _audience("g"), "variables": VARIABLES}
    )  # fmt: skip
    values = service.check_arm(tenant, registry, data, Settings())
    assert values["grace_seconds"] == 15 * 60
    assert values["reminder_delay_seconds"] == 60 * 60
    short = Settings(followup_grace_minutes=1, followup_reminder_delay_minutes=2)
    values = service.check_arm(tenant, registry, data, short)
    assert (values["grace_seconds"], values["reminder_delay_seconds"]) == (60, 120)


def test_sync_arm_commits_or_rolls_back_with_the_host(sync_engine: Engine, tenant: str) -> None:
    """R-FOLLOW-10: the sync library call runs in the host's transaction: rolled back with it,
    committed with it; acknowledge likewise."""

    class HostFailure(Exception):
        pass

    with pytest.raises(HostFailure), sync_engine.begin() as tx:
        followups.arm(tx, tenant, "a", audience=_audience("g"), variables=VARIABLES, **KINDS)
        raise HostFailure
    with sync_engine.begin() as tx, pytest.raises(FollowupNotFound):
        followups.acknowledge(tx, tenant, "a")
    with sync_engine.begin() as tx:
        armed = followups.arm(
            tx, tenant, "a", audience=_audience("g"), variables=VARIABLES, **KINDS
        )
    assert armed.created and armed.followup.state == "armed"
    with sync_engine.begin() as tx:
        assert followups.acknowledge(tx, tenant, "a").state == "acknowledged"
        assert followups.reopen(tx, tenant, "a").state == "armed"
        assert followups.cancel(tx, tenant, "a").state == "not_required"
    with sync_engine.connect() as conn:
        state = conn.execute(
            select(f.c.state).where(f.c.tenant_id == tenant, f.c.key == "a")
        ).scalar_one()
    assert state == "not_required"


async def test_arm_refuses_what_could_never_send(engine: AsyncEngine, tenant: str) -> None:
    """Bad input is refused before anything is written, naming the field."""
    cases: Sequence[tuple[dict[str, Any], str]] = (
        ({"kind": "no.such"}, "kind"),
        ({"reminder_kind": "auth.otp"}, "reminderKind"),
        ({"audience": {"kind": "nobody"}}, "audience"),
        ({"variables": {"studentName": "x"}}, "variables"),
        ({"grace_seconds": -1}, "graceSeconds"),
    )
    for change, field_name in cases:
        args: dict[str, Any] = {
            "audience": _audience("g"),
            "variables": VARIABLES,
            **KINDS,
            **change,
        }
        async with engine.begin() as conn:
            with pytest.raises(FollowupInvalid) as refused:
                await followups.aarm(conn, tenant, "bad", **args)
        assert refused.value.message.startswith(field_name), refused.value.message
    async with engine.connect() as conn:
        count = (
            await conn.execute(select(func.count()).where(f.c.tenant_id == tenant))
        ).scalar_one()
    assert count == 0


# --- the sweep ----------------------------------------------------------------------------------


async def test_notify_then_remind_once_then_never_again(
    engine: AsyncEngine, tenant: str, registry: Registry
) -> None:
    """R-FOLLOW-19, R-FOLLOW-20, R-FOLLOW-21, R-FOLLOW-23, R-FOLLOW-26, R-FOLLOW-27,
    R-FOLLOW-29, R-FOLLOW-34, R-FOLLOW-44, R-FOLLOW-47: due → notified with escalateAt =
    notifiedAt + delay and one attendance.event carrying the follow-up's variables; a second
    sweep sends nothing; at escalateAt → follow_up and one attendance.reminder; after that,
    nothing ever again."""
    await _arm(engine, tenant, "k", delay=3600)
    assert _mine(await _sweep(engine, registry), tenant) == []  # not due yet
    await _nudge(engine, tenant, "k", "arm_at")
    report = await _sweep(engine, registry)
    [notified] = _mine(report, tenant)
    assert notified.leg == "notify"
    row = await _row(engine, tenant, "k")
    assert row["state"] == "notified"
    assert (row["escalate_at"] - row["notified_at"]).total_seconds() == 3600
    assert _mine(await _sweep(engine, registry), tenant) == []  # R-FOLLOW-44
    [event] = await _events(engine, tenant)
    assert (event["kind"], event["variables"]) == ("attendance.event", VARIABLES)
    assert event["public_id"] == row["notify_event_id"] == notified.event_id

    await _nudge(engine, tenant, "k", "escalate_at")
    [reminded] = _mine(await _sweep(engine, registry), tenant)
    assert reminded.leg == "remind"
    row = await _row(engine, tenant, "k")
    assert row["state"] == "follow_up" and row["reminded_at"] is not None
    await _nudge(engine, tenant, "k", "escalate_at")
    await _nudge(engine, tenant, "k", "arm_at")
    assert _mine(await _sweep(engine, registry), tenant) == []  # R-FOLLOW-29: no third strike
    kinds = [e["kind"] for e in await _events(engine, tenant)]
    assert kinds == ["attendance.event", "attendance.reminder"]
    assert row["reminder_event_id"] == (await _events(engine, tenant))[1]["public_id"]


async def test_acknowledged_or_covered_follow_ups_never_send(
    engine: AsyncEngine, tenant: str, registry: Registry
) -> None:
    """R-FOLLOW-9, R-FOLLOW-11, R-FOLLOW-12, R-FOLLOW-13: acknowledged before armAt → no
    notify; acknowledged between the two sends → no reminder; covered at arming → born
    not_required and never claimed, however overdue."""
    await _arm(engine, tenant, "early")
    await _arm(engine, tenant, "between")
    covered = await _arm(engine, tenant, "covered", covered=True)
    assert covered.followup.state == "not_required" and covered.followup.arm_at is None
    async with engine.begin() as conn:
        await followups.aacknowledge(conn, tenant, "early")
    await _nudge(engine, tenant, "early", "arm_at")
    await _nudge(engine, tenant, "between", "arm_at")
    await _nudge(engine, tenant, "covered", "arm_at")
    [notified] = _mine(await _sweep(engine, registry), tenant)
    assert notified.key == "between"
    async with engine.begin() as conn:
        assert (await followups.aacknowledge(conn, tenant, "between")).state == "acknowledged"
    await _nudge(engine, tenant, "between", "escalate_at")
    assert _mine(await _sweep(engine, registry), tenant) == []
    assert [e["kind"] for e in await _events(engine, tenant)] == ["attendance.event"]
    assert (await _row(engine, tenant, "covered"))["state"] == "not_required"
    assert (await _row(engine, tenant, "early"))["state"] == "acknowledged"


async def test_reopen_notifies_and_reminds_again(
    engine: AsyncEngine, tenant: str, registry: Registry
) -> None:
    """R-FOLLOW-14: reopening an acknowledged follow-up clears its timing fields and re-arms it
    (armAt = now + grace); it is notified again and, still unacknowledged, reminded again — new
    events, not the first cycle's. Reopening an open one changes nothing."""
    await _arm(engine, tenant, "k", grace=60)
    await _nudge(engine, tenant, "k", "arm_at")
    await _sweep(engine, registry)
    async with engine.begin() as conn:
        same = await followups.areopen(conn, tenant, "k")  # still open: answered as it is
        assert same.state == "notified"
        await followups.aacknowledge(conn, tenant, "k")
    async with engine.begin() as conn:
        reopened = await followups.areopen(conn, tenant, "k")
        now = (await conn.execute(select(func.now()))).scalar_one()
    assert reopened.state == "armed"
    assert reopened.notified_at is None and reopened.escalate_at is None
    assert reopened.notify_event_id is None and reopened.reminder_event_id is None
    assert reopened.arm_at is not None
    assert (reopened.arm_at - now).total_seconds() == pytest.approx(60, abs=1)
    await _nudge(engine, tenant, "k", "arm_at")
    [again] = _mine(await _sweep(engine, registry), tenant)
    await _nudge(engine, tenant, "k", "escalate_at")
    [reminded] = _mine(await _sweep(engine, registry), tenant)
    assert (again.leg, again.cycle, reminded.leg, reminded.cycle) == ("notify", 2, "remind", 2)
    kinds = [e["kind"] for e in await _events(engine, tenant)]
    assert kinds == ["attendance.event", "attendance.event", "attendance.reminder"]


async def test_a_reopen_between_scan_and_claim_is_not_claimed(
    engine: AsyncEngine, tenant: str, registry: Registry
) -> None:
    """R-FOLLOW-22, R-FOLLOW-24, R-FOLLOW-25: the scan sees the follow-up due; before the claim,
    the host acknowledges and reopens it (armAt now in the future); the claim re-checks armAt in
    its one UPDATE, matches nothing, and nothing is sent."""
    await _arm(engine, tenant, "k", grace=600)
    await _nudge(engine, tenant, "k", "arm_at")
    async with engine.begin() as conn:
        await tenancy.enter_tenant(conn, tenant)
        [candidate] = await service.candidates(conn, tenant, "notify", after=None, limit=10)
    async with engine.begin() as conn:
        await followups.aacknowledge(conn, tenant, "k")
        await followups.areopen(conn, tenant, "k")
    async with engine.begin() as conn:
        await tenancy.enter_tenant(conn, tenant)
        assert await service.claim(conn, registry, tenant, candidate.id, "notify") is None
    row = await _row(engine, tenant, "k")
    assert row["state"] == "armed" and row["notified_at"] is None
    assert await _events(engine, tenant) == []


async def test_an_acknowledgement_racing_the_claim(
    engine: AsyncEngine, tenant: str, registry: Registry
) -> None:
    """R-FOLLOW-10, R-FOLLOW-43: a claim whose row is locked by an uncommitted acknowledgement
    waits, then re-checks its predicate and matches nothing; the other order (claim first) sends
    once and the acknowledgement stops only the reminder."""
    await _arm(engine, tenant, "k")
    await _nudge(engine, tenant, "k", "arm_at")
    async with engine.connect() as ack:
        await ack.begin()
        await followups.aacknowledge(ack, tenant, "k")

        async def claim() -> service.Transition | None:
            async with engine.begin() as conn:
                await tenancy.enter_tenant(conn, tenant)
                row = await _row(engine, tenant, "k")
                return await service.claim(conn, registry, tenant, row["id"], "notify")

        pending = asyncio.create_task(claim())
        await asyncio.sleep(0.3)
        assert not pending.done()  # waiting on the acknowledgement's row lock
        await ack.commit()
        assert await pending is None
    assert await _events(engine, tenant) == []


async def test_concurrent_sweepers_record_exactly_one_event_per_transition(
    engine: AsyncEngine, database_url: str, tenant: str, registry: Registry
) -> None:
    """R-FOLLOW-25, R-FOLLOW-35, R-FOLLOW-43: four sweepers at once over 60 due follow-ups that
    name the same recipient with the same variables → 60 notify events, one each, none
    doubled, no lease involved; then 60 reminders, one each."""
    from herald.db.engine import make_async_engine

    keys = [f"k{i}" for i in range(60)]
    async with engine.begin() as conn:
        for key in keys:
            await followups.aarm(
                conn, tenant, key, audience=_audience("g"), variables=VARIABLES,
                grace_seconds=0, reminder_delay_seconds=3600, **KINDS,
            )  # fmt: skip
    engines = [make_async_engine(database_url, pool_size=2) for _ in range(4)]
    try:
        reports = await asyncio.gather(*(sweeper.sweep(e, registry) for e in engines))
        notified = [t for r in reports for t in _mine(r, tenant)]
        assert sorted(t.key for t in notified) == sorted(keys)
        async with engine.begin() as conn:
            await conn.execute(
                update(f)
                .where(f.c.tenant_id == tenant)
                .values(escalate_at=func.now() - func.make_interval(0, 0, 0, 0, 0, 0, 1))
            )
        reports = await asyncio.gather(*(sweeper.sweep(e, registry) for e in engines))
        reminded = [t for r in reports for t in _mine(r, tenant)]
        assert sorted(t.key for t in reminded) == sorted(keys)
    finally:
        for e in engines:
            await e.dispose()
    events = await _events(engine, tenant)
    assert len(events) == 120
    assert (
        sorted(e["kind"] for e in events)
        == ["attendance.event"] * 60 + ["attendance.reminder"] * 60
    )
    async with engine.connect() as conn:
        ids = (
            await conn.execute(
                select(func.count(func.distinct(f.c.notify_event_id))).where(
                    f.c.tenant_id == tenant
                )
            )
        ).scalar_one()
    assert ids == 60


async def test_a_failure_on_one_follow_up_rolls_back_its_claim_and_the_sweep_goes_on(
    engine: AsyncEngine, tenant: str, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-FOLLOW-39, R-FOLLOW-40, R-FOLLOW-41, R-FOLLOW-42, and Herald's departure from
    R-FOLLOW-37: the process "dies" after the claim's UPDATE and before its commit (the event
    insert raises) → the claim and the event roll back together, the follow-up stays due and
    the sweep goes on with the others; the next sweep takes it, once."""
    for key in ("a", "b", "c"):
        await _arm(engine, tenant, key)
        await _nudge(engine, tenant, key, "arm_at")
    real = service.sending.record_occurrence
    target = (await _row(engine, tenant, "b"))["id"]

    async def crash_on_b(conn: Any, send_input: Any, **kwargs: Any) -> Any:
        if kwargs["occurrence_key"].startswith(f"followup:{target}:"):
            raise ConnectionResetError("the process died here")
        return await real(conn, send_input, **kwargs)

    monkeypatch.setattr(service.sending, "record_occurrence", crash_on_b)
    report = await _sweep(engine, registry)  # raises nothing
    assert sorted(t.key for t in _mine(report, tenant)) == ["a", "c"]
    assert report.errors >= 1
    row = await _row(engine, tenant, "b")
    assert row["state"] == "armed" and row["notified_at"] is None
    monkeypatch.setattr(service.sending, "record_occurrence", real)
    [b] = _mine(await _sweep(engine, registry), tenant)
    assert b.key == "b"
    assert len(await _events(engine, tenant)) == 3


async def test_a_sweep_that_cannot_reach_the_database_raises_nothing(registry: Registry) -> None:
    """R-FOLLOW-40: sweep() logs and returns whatever goes wrong."""
    from herald.db.engine import make_async_engine

    nowhere = make_async_engine("postgresql://postgres@127.0.0.1:1/nowhere", pool_size=1)
    try:
        report = await sweeper.sweep(nowhere, registry)
    finally:
        await nowhere.dispose()
    assert report.errors == 1 and report.transitions == []


async def test_recipients_are_people_only(
    engine: AsyncEngine, tenant: str, registry: Registry
) -> None:
    """R-FOLLOW-28, R-FOLLOW-30, R-FOLLOW-31, R-FOLLOW-32, R-FOLLOW-33: a follow-up names its
    recipients by person id; one without a person record gets nothing and breaks nothing for
    the others, who get an inbox item and an email each (the same people on every channel).
    With nobody at all, the claim stands and its event reaches no one."""
    async with engine.begin() as conn:
        guardian = await seed.person(conn, tenant, "guardian-1")
    await _arm(engine, tenant, "k", audience=_audience("guardian-1", "no-such-person"))
    await _arm(engine, tenant, "nobody", audience=_audience("no-such-person"))
    await _nudge(engine, tenant, "k", "arm_at")
    await _nudge(engine, tenant, "nobody", "arm_at")
    assert len(_mine(await _sweep(engine, registry), tenant)) == 2
    await run_to_completion(engine, tenant, registry)
    r, d, e = s.notification_recipient, s.notification_delivery, s.notification_event
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(e.c.public_id, r.c.user_id, d.c.channel)
                .select_from(e.outerjoin(r, r.c.event_id == e.c.id).outerjoin(
                    d, d.c.recipient_id == r.c.id))
                .where(e.c.tenant_id == tenant)
            )
        ).all()  # fmt: skip
    k, nobody = await _row(engine, tenant, "k"), await _row(engine, tenant, "nobody")
    assert nobody["state"] == "notified"
    assert {(row.user_id, row.channel) for row in rows if row.public_id == nobody["notify_event_id"]} == {(None, None)}  # fmt: skip
    reached = {(row.user_id, row.channel) for row in rows if row.public_id == k["notify_event_id"]}
    assert {user for user, _ in reached} == {guardian.id}
    assert {"in_app", "email"} <= {channel for _, channel in reached}


async def test_the_sweep_writes_no_audit_rows(
    engine: AsyncEngine, tenant: str, registry: Registry
) -> None:
    """R-FOLLOW-55: notifiedAt and remindedAt are the evidence; the sweeper is not a who."""
    await _arm(engine, tenant, "k", delay=0)
    await _nudge(engine, tenant, "k", "arm_at")
    await _sweep(engine, registry)
    await _sweep(engine, registry)  # delay 0: due for its reminder at the next sweep
    row = await _row(engine, tenant, "k")
    assert row["state"] == "follow_up"
    a = s.audit_record
    async with engine.connect() as conn:
        count = (
            await conn.execute(select(func.count()).where(a.c.tenant_id == tenant))
        ).scalar_one()
    assert count == 0


# --- the timer -----------------------------------------------------------------------------------


async def test_a_tick_that_finds_the_sweep_running_is_skipped(
    engine: AsyncEngine, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-FOLLOW-45: re-entrancy guard."""
    gate = asyncio.Event()

    async def slow_sweep(*args: Any, **kwargs: Any) -> sweeper.SweepReport:
        await gate.wait()
        return sweeper.SweepReport()

    monkeypatch.setattr(sweeper, "sweep", slow_sweep)
    one = sweeper.Sweeper(engine, registry)
    first = asyncio.create_task(one.sweep())
    await asyncio.sleep(0)
    assert await one.sweep() is None
    gate.set()
    assert await first is not None


async def test_interval_zero_registers_no_timer_and_positive_sweeps_at_start(
    engine: AsyncEngine, settings: Settings, tenant: str, registry: Registry
) -> None:
    """R-FOLLOW-42, R-FOLLOW-48, R-FOLLOW-49, R-FOLLOW-50, R-FOLLOW-53, R-FOLLOW-54: interval 0
    (and the test environment's default) returns at once; a positive interval sweeps at start,
    taking what fell due while nothing swept, and repeats until stopped. Unset outside the test
    environment: 60 s."""
    stop = asyncio.Event()
    zero = settings.model_copy(update={"followup_sweep_seconds": 0})
    await asyncio.wait_for(sweeper.run_sweeps(zero, engine, registry, stop), timeout=1)
    in_tests = settings.model_copy(update={"environment": "test"})
    assert in_tests.followup_sweep_interval == 0
    assert Settings().followup_sweep_interval == 60
    await _arm(engine, tenant, "k")
    await _nudge(engine, tenant, "k", "arm_at")
    every = settings.model_copy(update={"followup_sweep_seconds": 1})
    task = asyncio.create_task(sweeper.run_sweeps(every, engine, registry, stop))
    for _ in range(100):
        if (await _row(engine, tenant, "k"))["state"] == "notified":
            break
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, timeout=5)
    assert (await _row(engine, tenant, "k"))["state"] == "notified"


def test_negative_settings_are_refused_naming_the_variable() -> None:
    """R-FOLLOW-51, R-FOLLOW-52: the three settings are optional integers; negatives are
    refused; short values (grace 1, delay 2, interval 10) are accepted."""
    for name in ("followup_sweep_seconds", "followup_grace_minutes",
                 "followup_reminder_delay_minutes"):  # fmt: skip
        with pytest.raises(ValidationError) as refused:
            Settings.model_validate({name: -1})
        assert name in str(refused.value)
    short = Settings.model_validate(
        {"followup_sweep_seconds": 10, "followup_grace_minutes": 1,
         "followup_reminder_delay_minutes": 2}
    )  # fmt: skip
    assert (short.followup_sweep_interval, short.followup_grace_minutes) == (10, 1)


# --- HTTP ----------------------------------------------------------------------------------------


async def test_http_arm_read_acknowledge_reopen_cancel(
    client: AsyncClient, engine: AsyncEngine, tenant: str
) -> None:
    """DESIGN §5.2: POST /v1/followups 201 then 200 with the row unchanged; GET shows the
    timing fields and both event ids; acknowledge, reopen, cancel; a bad field is a 400
    NOTIFICATION_FOLLOWUP_INVALID naming it; another tenant's key gets 404; a key without
    followups:write gets 403."""
    writer = await api_key(engine, tenant, ["followups:write", "events:read"])
    body = {
        "key": "absence:2026-09-01:stu-42",
        "kind": "attendance.event",
        "reminderKind": "attendance.reminder",
        "audience": {"kind": "guardians_of_users", "userIds": ["stu-42"]},
        "variables": VARIABLES,
        "graceSeconds": 120,
        "reminderDelaySeconds": 600,
    }
    created = await client.post("/v1/followups", json=body, headers=writer)
    assert created.status_code == 201, created.text
    assert created.json()["state"] == "armed" and created.json()["armAt"]
    again = await client.post("/v1/followups", json={**body, "graceSeconds": 5}, headers=writer)
    assert again.status_code == 200 and again.json() == created.json()
    url = f"/v1/followups/{body['key']}"
    read = await client.get(url, headers=writer)
    assert read.status_code == 200
    assert set(read.json()) >= {
        "key", "state", "armAt", "notifiedAt", "escalateAt", "remindedAt",
        "notifyEventId", "reminderEventId",
    }  # fmt: skip
    for action, state in (("acknowledge", "acknowledged"), ("reopen", "armed"),
                          ("cancel", "not_required")):  # fmt: skip
        answer = await client.post(f"{url}/{action}", headers=writer)
        assert (answer.status_code, answer.json()["state"]) == (200, state)
    covered = await client.post(
        "/v1/followups", json={**body, "key": "covered", "covered": True}, headers=writer
    )
    assert (covered.status_code, covered.json()["state"]) == (201, "not_required")

    bad = await client.post("/v1/followups", json={**body, "graceSeconds": -5}, headers=writer)
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "NOTIFICATION_FOLLOWUP_INVALID"
    assert bad.json()["error"]["message"].startswith("graceSeconds")
    unknown = await client.post("/v1/followups", json={**body, "kind": "x.y"}, headers=writer)
    assert unknown.json()["error"]["message"].startswith("kind")

    other = await api_key(engine, f"other-{uuid.uuid4().hex[:8]}", ["*"])
    for method, path in (("GET", url), ("POST", f"{url}/acknowledge"), ("POST", f"{url}/cancel")):
        answer = await client.request(method, path, headers=other)
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "NOTIFICATION_FOLLOWUP_NOT_FOUND"
    reader_only = await api_key(engine, tenant, ["events:write"])
    assert (await client.post("/v1/followups", json=body, headers=reader_only)).status_code == 403


# --- retention and erasure -----------------------------------------------------------------------


async def test_retention_prunes_resolved_follow_ups_only(
    engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """Resolved follow-ups untouched for retention_days go; armed and notified ones stay."""
    from herald.maintenance import retention

    await _arm(engine, tenant, "open")
    await _arm(engine, tenant, "done", covered=True)
    async with engine.begin() as conn:
        await conn.execute(
            update(f)
            .where(f.c.tenant_id == tenant)
            .values(
                updated_at=func.now() - func.make_interval(0, 0, 0, settings.retention_days + 1)
            )
        )
    await retention.prune_followups(engine, settings, max_batches=None)
    async with engine.connect() as conn:
        left = (await conn.execute(select(f.c.key).where(f.c.tenant_id == tenant))).scalars().all()
    assert left == ["open"]


async def test_erasing_a_person_removes_the_follow_ups_that_name_them(
    engine: AsyncEngine, tenant: str
) -> None:
    """R-ERASE: follow-ups whose audience names the erased person (directly or in a compound)
    go with them; the others stay."""
    from herald.directory import service as directory

    async with engine.begin() as conn:
        await seed.person(conn, tenant, "stu-1")
    await _arm(
        engine, tenant, "direct", audience={"kind": "guardians_of_users", "userIds": ["stu-1"]}
    )
    await _arm(engine, tenant, "compound", audience={
        "kind": "compound", "any": [{"kind": "users", "userIds": ["stu-1", "x"]}]})  # fmt: skip
    await _arm(engine, tenant, "other", audience=_audience("stu-2"))
    async with engine.begin() as conn:
        await directory.erase_person(conn, tenant, "stu-1")
    async with engine.connect() as conn:
        left = (await conn.execute(select(f.c.key).where(f.c.tenant_id == tenant))).scalars().all()
    assert left == ["other"]


# --- shape ---------------------------------------------------------------------------------------


async def test_states_and_the_two_candidate_indexes(engine: AsyncEngine) -> None:
    """R-FOLLOW-1, R-FOLLOW-2, R-FOLLOW-3, R-FOLLOW-4: the row carries the timing columns; the
    table has the (tenant_id, state, arm_at) and (tenant_id, state, escalate_at) indexes; all five
    states are in the published enum (and the CHECK) from the start; the three the sweeper moves
    between are all open, so its transitions never change openness."""
    from herald import vocabulary
    from herald.followups.schemas import FollowupOut

    async with engine.connect() as conn:
        indexes = {
            row.indexname: row.indexdef
            for row in await conn.execute(
                select(text("indexname"), text("indexdef"))
                .select_from(text("pg_indexes"))
                .where(text("tablename = 'followup'"))
            )
        }
    assert indexes["followup_notify_due_idx"].endswith("(tenant_id, state, arm_at)")
    assert indexes["followup_remind_due_idx"].endswith("(tenant_id, state, escalate_at)")
    published = FollowupOut.model_json_schema()["properties"]["state"]["enum"]
    assert published == ["armed", "notified", "follow_up", "acknowledged", "not_required"]
    assert set(vocabulary.FOLLOWUP_STATES) == set(published)
    assert set(vocabulary.FOLLOWUP_OPEN_STATES) == {"armed", "notified", "follow_up"}
    assert {c.name for c in f.columns} >= {
        "id", "tenant_id", "state", "arm_at", "notified_at", "escalate_at", "reminded_at",
    }  # fmt: skip
