"""Cancellation: one compare-and-set that the fan-out claim can race, over the admin route
(`POST /v1/admin/events/{id}/cancel`) and the server-side one (`POST /v1/events/{id}/cancel`).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from httpx import AsyncClient
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.auth.service import create_api_key
from herald.config import Settings
from herald.db import schema as s
from herald.errors import EventAlreadyCancelled, EventFanoutStarted
from herald.fanout import service as fanout
from herald.fanout.worker import fan_out_next_event
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.sending import service as sending
from tests.integration.test_admin_history import (
    HISTORY_READ,
    HISTORY_UPDATE,
    admin_key_headers,
    operator_headers,
)
from tests.integration.test_fanout import event, run_to_completion, school, send_event

ADMIN = "/v1/admin/events"


async def recipients(engine: AsyncEngine, event_id: uuid.UUID) -> int:
    r, e = s.notification_recipient, s.notification_event
    async with engine.connect() as conn:
        return int(
            await conn.scalar(
                select(func.count())
                .select_from(r.join(e, e.c.id == r.c.event_id))
                .where(e.c.public_id == event_id)
            )
            or 0
        )


async def deliveries(engine: AsyncEngine, event_id: uuid.UUID) -> int:
    d, e = s.notification_delivery, s.notification_event
    async with engine.connect() as conn:
        return int(
            await conn.scalar(
                select(func.count())
                .select_from(d.join(e, e.c.id == d.c.event_id))
                .where(e.c.public_id == event_id)
            )
            or 0
        )


async def audits(engine: AsyncEngine, tenant: str) -> list[dict[str, Any]]:
    a = s.audit_record
    async with engine.connect() as conn:
        rows = await conn.execute(select(a).where(a.c.tenant_id == tenant).order_by(a.c.id))
        return [dict(row._mapping) for row in rows]


async def make_due(engine: AsyncEngine, event_id: uuid.UUID) -> None:
    e = s.notification_event
    async with engine.begin() as conn:
        await conn.execute(
            update(e)
            .where(e.c.public_id == event_id)
            .values(scheduled_for=datetime.now(UTC) - timedelta(seconds=1))
        )


async def test_cancelled_scheduled_event_is_never_sent(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-ADMIN-4, R-ADMIN-15: an operator cancels a scheduled event before it is due; the cancel is
    recorded with who did it and audited, and once the event falls due the fan-out never claims it:
    no recipient and no delivery is ever written."""
    await school(engine, tenant, students=2)
    event_id = await send_event(
        engine, tenant, scheduled_for=datetime.now(UTC) + timedelta(hours=2)
    )
    headers = await operator_headers(engine, settings, tenant, [HISTORY_UPDATE], code="registrar")
    answer = await client.post(f"{ADMIN}/{event_id}/cancel", headers=headers)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["id"], body["state"], body["kind"]) == (
        str(event_id),
        "cancelled",
        "announcement.posted",
    )
    row = await event(engine, event_id)
    assert row["cancelled_at"] is not None and row["cancelled_by"] == "op-registrar"
    assert datetime.fromisoformat(body["cancelledAt"]) == row["cancelled_at"]

    [audit] = await audits(engine, tenant)
    assert (audit["actor_kind"], audit["actor_id"], audit["action"]) == (
        "person",
        "op-registrar",
        "cancel",
    )
    assert (audit["entity_type"], audit["entity_id"]) == ("notification_event", str(event_id))
    assert audit["changes"]["cancelled_at"]["before"] is None
    assert audit["changes"]["cancelled_at"]["after"] is not None

    await make_due(engine, event_id)
    assert await run_to_completion(engine, tenant) == 0
    assert await recipients(engine, event_id) == 0 and await deliveries(engine, event_id) == 0
    row = await event(engine, event_id)
    assert row["fanout_claimed_at"] is None and row["fanout_completed_at"] is None

    # The events surface reports it as cancelled too.
    async with engine.connect() as conn:
        assert (await sending.get_event(conn, tenant, event_id))["state"] == "cancelled"


async def test_second_cancel_says_already_cancelled(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-ADMIN-16: a cancel that matches nothing because the event is already cancelled answers
    409 NOTIFICATION_ALREADY_CANCELLED, reason already_cancelled, and writes no second audit row;
    the first cancel's who and when are kept."""
    await school(engine, tenant, students=1)
    event_id = await send_event(
        engine, tenant, scheduled_for=datetime.now(UTC) + timedelta(hours=2)
    )
    first = await operator_headers(engine, settings, tenant, [HISTORY_UPDATE], code="first")
    second = await operator_headers(engine, settings, tenant, [HISTORY_UPDATE], code="second")
    assert (await client.post(f"{ADMIN}/{event_id}/cancel", headers=first)).status_code == 200
    before = await event(engine, event_id)
    again = await client.post(f"{ADMIN}/{event_id}/cancel", headers=second)
    assert again.status_code == 409
    error = again.json()["error"]
    assert error["code"] == "NOTIFICATION_ALREADY_CANCELLED"
    assert error["message"].startswith("already_cancelled")
    after = await event(engine, event_id)
    assert (after["cancelled_at"], after["cancelled_by"]) == (
        before["cancelled_at"],
        "op-first",
    )
    assert len(await audits(engine, tenant)) == 1


async def test_cancel_after_fanout_says_fanout_started(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-ADMIN-15, R-ADMIN-16: once the fan-out has claimed the event, completed it, or written
    pages before its claim was released, the cancel matches nothing and answers 409
    NOTIFICATION_FANOUT_STARTED, reason fanout_started; the event is left as it was."""
    await school(engine, tenant, students=2)
    headers = await operator_headers(engine, settings, tenant, [HISTORY_UPDATE])
    e = s.notification_event

    completed = await send_event(engine, tenant)
    await run_to_completion(engine, tenant)
    claimed = await send_event(engine, tenant, variables={"title": "Two", "message": "m"})
    released = await send_event(engine, tenant, variables={"title": "Three", "message": "m"})
    async with engine.begin() as conn:
        await conn.execute(
            update(e)
            .where(e.c.public_id == claimed)
            .values(fanout_claimed_at=func.now(), fanout_claim_token=uuid.uuid4())
        )
        # A claim the reaper released after the first page: unclaimed again, cursor moved on.
        await conn.execute(update(e).where(e.c.public_id == released).values(fanout_cursor=42))

    for event_id in (completed, claimed, released):
        before = await event(engine, event_id)
        answer = await client.post(f"{ADMIN}/{event_id}/cancel", headers=headers)
        assert answer.status_code == 409, answer.text
        error = answer.json()["error"]
        assert error["code"] == "NOTIFICATION_FANOUT_STARTED"
        assert error["message"].startswith("fanout_started")
        assert await event(engine, event_id) == before
    assert await audits(engine, tenant) == []

    missing = await client.post(f"{ADMIN}/{uuid.uuid4()}/cancel", headers=headers)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "NOTIFICATION_EVENT_NOT_FOUND"


async def test_server_side_cancel(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-ADMIN-4, R-ADMIN-16, R-SEC-7: the host cancels with an events:write key; GET
    /v1/events/{id} then reports `cancelled`; a second cancel is 409 already_cancelled; an
    events:read key is refused; another tenant's key gets 404 and changes nothing."""
    await school(engine, tenant, students=1)
    event_id = await send_event(engine, tenant, scheduled_for=datetime.now(UTC) + timedelta(days=1))
    async with engine.begin() as conn:
        writer = await create_api_key(conn, tenant_id=tenant, scopes=["events:write"])
        reader = await create_api_key(conn, tenant_id=tenant, scopes=["events:read"])
        stranger = await create_api_key(conn, tenant_id=f"{tenant}-x", scopes=["events:write"])

    def auth(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    url = f"/v1/events/{event_id}/cancel"
    assert (await client.post(url, headers=auth(reader))).status_code == 403
    foreign = await client.post(url, headers=auth(stranger))
    assert foreign.status_code == 404
    assert (await event(engine, event_id))["cancelled_at"] is None

    answer = await client.post(url, headers=auth(writer))
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == "cancelled"
    status = await client.get(f"/v1/events/{event_id}", headers=auth(reader))
    assert status.json()["state"] == "cancelled"
    assert (await event(engine, event_id))["cancelled_by"] == "api_key"

    again = await client.post(url, headers=auth(writer))
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "NOTIFICATION_ALREADY_CANCELLED"
    assert (await client.post("/v1/events/nope/cancel", headers=auth(writer))).status_code == 404


async def test_admin_key_cancel_is_audited_as_the_key(
    client: AsyncClient, engine: AsyncEngine, tenant: str
) -> None:
    """R-ADMIN-4, R-SEC-18: an admin-scope API key may cancel; the audit row names the key."""
    await school(engine, tenant, students=1)
    event_id = await send_event(engine, tenant, scheduled_for=datetime.now(UTC) + timedelta(days=1))
    headers = await admin_key_headers(engine, tenant)
    answer = await client.post(f"{ADMIN}/{event_id}/cancel", headers=headers)
    assert answer.status_code == 200, answer.text
    [audit] = await audits(engine, tenant)
    assert audit["actor_kind"] == "api_key" and audit["action"] == "cancel"
    assert (await event(engine, event_id))["cancelled_by"] == audit["actor_id"]


# ---------------------------------------------------------------------------------------------
# Racing the fan-out.


async def test_cancel_holding_the_row_makes_the_claim_skip_it(
    engine: AsyncEngine, tenant: str
) -> None:
    """R-ADMIN-15: while a cancel's transaction holds the event, the fan-out claim skips it
    (SKIP LOCKED) instead of claiming it; once the cancel commits the event is never claimed."""
    await school(engine, tenant, students=2)
    event_id = await send_event(engine, tenant)
    async with engine.begin() as conn:
        await sending.cancel_event(conn, tenant, event_id, actor="op")
        # The cancel is not committed yet: the claim must not take the row.
        assert not await fan_out_next_event(
            engine, SAMPLE_REGISTRY, batch_size=500, tenant_id=tenant
        )
    assert not await fan_out_next_event(engine, SAMPLE_REGISTRY, batch_size=500, tenant_id=tenant)
    assert await recipients(engine, event_id) == 0
    assert (await event(engine, event_id))["cancelled_at"] is not None


async def test_cancel_waiting_on_the_claim_loses_with_fanout_started(
    engine: AsyncEngine, tenant: str
) -> None:
    """R-ADMIN-15, R-ADMIN-16: a cancel that arrives while the fan-out's claim holds the row waits
    for it, re-checks its WHERE clause against the committed claim and matches nothing: it is
    refused as fanout_started, never a read-then-write that "succeeds" after the claim."""
    await school(engine, tenant, students=2)
    event_id = await send_event(engine, tenant)

    async def cancel(pid_box: list[int]) -> BaseException | None:
        async with engine.connect() as conn:
            pid_box.append(int(await conn.scalar(select(func.pg_backend_pid())) or 0))
            await conn.rollback()
            try:
                async with conn.begin():
                    await sending.cancel_event(conn, tenant, event_id, actor="op")
            except (EventFanoutStarted, EventAlreadyCancelled) as exc:
                return exc
        return None

    async with engine.connect() as claimer:
        await claimer.begin()
        claimed = await fanout.claim_next_event(claimer, uuid.uuid4(), tenant_id=tenant)
        assert claimed is not None and claimed.public_id == event_id
        pid: list[int] = []
        task = asyncio.create_task(cancel(pid))
        # Wait until the cancel is blocked on the claim's row lock (no clock involved).
        async with engine.connect() as observer:
            while True:
                await asyncio.sleep(0.01)
                assert not task.done(), task.result()
                if not pid:
                    continue
                blockers = await observer.scalar(
                    select(func.cardinality(func.pg_blocking_pids(pid[0])))
                )
                await observer.rollback()
                if blockers:
                    break
        await claimer.commit()
    outcome = await task
    assert isinstance(outcome, EventFanoutStarted)
    row = await event(engine, event_id)
    assert row["cancelled_at"] is None and row["fanout_claimed_at"] is not None


@pytest.mark.parametrize("via", ["service", "http"])
async def test_cancellation_racing_the_fanout(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    via: str,
) -> None:
    """R-ADMIN-15, R-ADMIN-16: a cancel and the fan-out worker, started together many times with
    a varying head start either way, always end one way or the other and never both or neither:
    either the cancel wins (the event cancelled, never claimed, no recipient) or the fan-out wins
    (409 fanout_started, the event completed with every recipient). The CHECK
    cancelled_before_fanout backs this in the schema; this proves the statements never hit it."""
    await school(engine, tenant, students=3)
    headers = await operator_headers(engine, settings, tenant, [HISTORY_UPDATE, HISTORY_READ])
    rounds = 20
    outcomes = {"cancelled": 0, "fanned_out": 0}
    for round_number in range(rounds):
        event_id = await send_event(
            engine, tenant, variables={"title": f"Round {round_number}", "message": "m"}
        )
        # Scheduling jitter only (nothing is asserted about time): alternate which side starts
        # first and by how much, so both interleavings are exercised.
        # An HTTP cancel authenticates first, so it gets the larger head start.
        head_start = (round_number % 5) / (1000 if via == "service" else 200)
        cancel_delay, fan_out_delay = (0.0, head_start) if round_number % 2 else (head_start, 0.0)

        async def cancel(event_id: uuid.UUID = event_id, delay: float = cancel_delay) -> str:
            await asyncio.sleep(delay)
            if via == "http":
                answer = await client.post(f"{ADMIN}/{event_id}/cancel", headers=headers)
                if answer.status_code == 200:
                    return "cancelled"
                assert answer.status_code == 409, answer.text
                return str(answer.json()["error"]["code"])
            try:
                async with engine.begin() as conn:
                    await sending.cancel_event(conn, tenant, event_id, actor="op")
            except (EventFanoutStarted, EventAlreadyCancelled) as exc:
                return exc.code
            return "cancelled"

        async def fan_out(delay: float = fan_out_delay) -> bool:
            await asyncio.sleep(delay)
            return await fan_out_next_event(engine, SAMPLE_REGISTRY, batch_size=2, tenant_id=tenant)

        result, fanned = await asyncio.gather(cancel(), fan_out())
        row = await event(engine, event_id)
        count = await recipients(engine, event_id)
        if result == "cancelled":
            assert not fanned
            assert row["cancelled_at"] is not None and row["fanout_claimed_at"] is None
            assert row["fanout_completed_at"] is None and count == 0
            outcomes["cancelled"] += 1
        else:
            assert result == "NOTIFICATION_FANOUT_STARTED"
            assert fanned
            assert row["cancelled_at"] is None and row["fanout_completed_at"] is not None
            assert count == 3 and row["recipient_count"] == 3
            outcomes["fanned_out"] += 1
    assert sum(outcomes.values()) == rounds
    # The history screen agrees with the rows.
    listed = (await client.get(ADMIN, headers=headers, params={"limit": "100"})).json()["items"]
    states = [item["state"] for item in listed]
    assert states.count("cancelled") == outcomes["cancelled"]
    assert states.count("completed") == outcomes["fanned_out"]
