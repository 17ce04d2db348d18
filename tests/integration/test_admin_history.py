"""The admin history screen over HTTP: events, counts, deliveries, filters, paging, permissions,
and proof that history never reads a name, an address, variables or rendered content.

Events are recorded with asend() and fanned out by the real fan-out worker; delivery outcomes are
then set directly, each status with the columns its CHECKs require.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from httpx import AsyncClient
from sqlalchemy import event, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald import vocabulary
from herald.admin.history import service as history
from herald.admin.history.queries import EventFilters
from herald.auth.service import Operator, create_api_key, sign_token
from herald.config import Settings
from herald.db import schema as s
from herald.delivery import service as delivery
from tests import seed
from tests.integration.test_fanout import run_to_completion, school, send_event

BASE = "/v1/admin/events"
HISTORY_READ = "NotificationHistory_READ"
HISTORY_UPDATE = "NotificationHistory_UPDATE"
FAILURE_READ = "NotificationFailure_READ"
FAILURE_UPDATE = "NotificationFailure_UPDATE"

# Words that must never appear in a history statement (R-ADMIN-11, R-ADMIN-12, R-ADMIN-13). rendered_hash is allowed:
# it is a digest, and the issue lists it among the delivery fields.
FORBIDDEN_SQL = ("person", "variables", "rendered_title", "rendered_body", "destination_hint")


# ---------------------------------------------------------------------------------------------
# Shared helpers (imported by test_admin_dead_letters and test_cancel).


async def operator_headers(
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    permissions: Sequence[str],
    *,
    code: str | None = None,
    superadmin: bool = False,
    holds: bool = True,
) -> dict[str, str]:
    """A person holding (or, with holds=False, naming but not holding) a staff role with exactly
    `permissions`, and a token whose active role is that role."""
    code = code or f"clerk-{uuid.uuid4().hex[:6]}"
    async with engine.begin() as conn:
        role_id = int(
            (
                await conn.execute(
                    insert(s.role)
                    .values(
                        tenant_id=tenant,
                        code=code,
                        name=code,
                        scope_kind="staff",
                        permissions=list(permissions),
                        is_superadmin=superadmin,
                    )
                    .returning(s.role.c.id)
                )
            ).scalar_one()
        )
        person = await seed.person(
            conn, tenant, f"op-{code}", full_name="Operator Name", roles=[role_id] if holds else []
        )
    token = sign_token(settings, tenant_id=tenant, subject=person.external_id, role=code)
    return {"Authorization": f"Bearer {token}"}


async def admin_key_headers(engine: AsyncEngine, tenant: str) -> dict[str, str]:
    async with engine.begin() as conn:
        key = await create_api_key(conn, tenant_id=tenant, scopes=["admin"])
    return {"Authorization": f"Bearer {key}"}


def operator_for(tenant: str, *permissions: str, actor_id: str = "op-test") -> Operator:
    """An Operator value for calling the services directly."""
    return Operator(
        tenant_id=tenant,
        actor_kind="person",
        actor_id=actor_id,
        person_id=None,
        permissions=frozenset(permissions),
        superadmin=False,
    )


async def set_status(engine: AsyncEngine, delivery_id: int, status: str, **extra: Any) -> None:
    """Move a delivery to `status` with the timestamps its CHECKs require."""
    values: dict[str, Any] = {"status": status, **extra}
    if status in vocabulary.SKIPPED_STATUSES:
        values["skipped_at"] = func.now()
    if status in ("failed", "dead"):
        values["failed_at"] = func.now()
        values.setdefault("last_error", "EMAIL_REJECTED")
    if status == "dead":
        values["dead_at"] = func.now()
    if status in ("sent", "delivered"):
        values["sent_at"] = func.now()
    d = s.notification_delivery
    async with engine.begin() as conn:
        await conn.execute(update(d).where(d.c.id == delivery_id).values(**values))


async def event_deliveries(engine: AsyncEngine, event_public_id: uuid.UUID) -> list[dict[str, Any]]:
    d, e = s.notification_delivery, s.notification_event
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(d)
            .join(e, e.c.id == d.c.event_id)
            .where(e.c.public_id == event_public_id)
            .order_by(d.c.channel, d.c.id)
        )
        return [dict(r._mapping) for r in rows]


async def fanned_out_event(engine: AsyncEngine, tenant: str, **overrides: Any) -> uuid.UUID:
    event_id = await send_event(engine, tenant, **overrides)
    await run_to_completion(engine, tenant)
    return event_id


@contextmanager
def captured_sql(conn: AsyncConnection) -> Iterator[list[str]]:
    """Every statement `conn` sends to PostgreSQL while the block runs."""
    statements: list[str] = []

    def capture(*args: Any) -> None:
        statements.append(str(args[2]))

    sync = conn.sync_connection
    assert sync is not None
    event.listen(sync, "before_cursor_execute", capture)
    try:
        yield statements
    finally:
        event.remove(sync, "before_cursor_execute", capture)


# ---------------------------------------------------------------------------------------------
# Counts and states.


async def _school_event(engine: AsyncEngine, tenant: str, students: int = 4) -> uuid.UUID:
    await school(engine, tenant, students=students)
    return await fanned_out_event(engine, tenant)


async def test_list_counts_by_status(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-ADMIN-2, R-ADMIN-14, R-OBS-1, R-OBS-6: each event lists its delivery counts by status;
    failedDeliveryCount counts exactly failed and dead, never a skipped_* status, and the
    skipped_unconfigured count is its own figure."""
    event_id = await _school_event(engine, tenant)
    emails = [row for row in await event_deliveries(engine, event_id) if row["channel"] == "email"]
    assert len(emails) == 4
    await set_status(engine, emails[0]["id"], "failed")
    await set_status(engine, emails[1]["id"], "dead")
    await set_status(engine, emails[2]["id"], "skipped_unconfigured")
    await set_status(engine, emails[3]["id"], "skipped_no_destination")

    headers = await operator_headers(engine, settings, tenant, [HISTORY_READ])
    answer = await client.get(BASE, headers=headers)
    assert answer.status_code == 200, answer.text
    [item] = answer.json()["items"]
    assert item["id"] == str(event_id)
    assert (item["kind"], item["category"], item["priority"], item["state"]) == (
        "announcement.posted",
        "announcement",
        "normal",
        "completed",
    )
    assert item["recipientCount"] == 4
    assert item["deliveryCounts"] == {
        "delivered": 4,
        "failed": 1,
        "dead": 1,
        "skipped_unconfigured": 1,
        "skipped_no_destination": 1,
    }
    assert item["failedDeliveryCount"] == 2
    assert item["unconfiguredCount"] == 1
    assert answer.json()["nextCursor"] is None

    detail = await client.get(f"{BASE}/{event_id}", headers=headers)
    assert detail.status_code == 200 and detail.json() == item


async def test_only_skips_is_no_failure(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-OBS-1, R-OBS-6: an event whose remote deliveries were all skipped_unconfigured shows no
    failure at all."""
    event_id = await _school_event(engine, tenant, students=2)
    for row in await event_deliveries(engine, event_id):
        if row["channel"] == "email":
            await set_status(engine, row["id"], "skipped_unconfigured")
    headers = await operator_headers(engine, settings, tenant, [HISTORY_READ])
    [item] = (await client.get(BASE, headers=headers)).json()["items"]
    assert item["failedDeliveryCount"] == 0 and item["unconfiguredCount"] == 2


# ---------------------------------------------------------------------------------------------
# Nothing carrying a name, an address or a secret.


async def test_history_never_reads_names_or_content(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-ADMIN-11, R-ADMIN-12, R-ADMIN-13: the history statements themselves never select
    variables, rendered content or the destination hint, and never join person; the answers carry
    no name, address or variable value; the page's counts come from one grouped query, not one
    per event."""
    await school(engine, tenant, students=2)
    first = await fanned_out_event(
        engine, tenant, variables={"title": "Secret-ish title", "message": "Body words"}
    )
    await fanned_out_event(
        engine, tenant, variables={"title": "Second title", "message": "More words"}
    )
    for row in await event_deliveries(engine, first):
        if row["channel"] == "email":
            await set_status(engine, row["id"], "sent", destination_hint="p●●●@example.com")

    operator = operator_for(tenant, HISTORY_READ)
    page = history.PageParams(limit=20, after=None)
    async with engine.connect() as conn:
        with captured_sql(conn) as listed:
            result = await history.list_history(conn, operator, EventFilters(), page)
        with captured_sql(conn) as detailed:
            await history.get_history_event(conn, operator, str(first))
        with captured_sql(conn) as delivered:
            deliveries = await history.list_event_deliveries(conn, operator, str(first), page)
    assert len(result.items) == 2 and len(deliveries.items) == 4
    # One statement for the page, one grouped statement for all its counts.
    assert len(listed) == 2
    for statement in [*listed, *detailed, *delivered]:
        lowered = statement.lower()
        for word in FORBIDDEN_SQL:
            assert word not in lowered, (word, statement)

    headers = await operator_headers(engine, settings, tenant, [HISTORY_READ])
    answers = [
        await client.get(BASE, headers=headers),
        await client.get(f"{BASE}/{first}", headers=headers),
        await client.get(f"{BASE}/{first}/deliveries", headers=headers),
    ]
    for answer in answers:
        assert answer.status_code == 200, answer.text
        for leaked in (
            "Parent 0",
            "Pupil 0",
            "g0@example.com",
            "example.com",
            "Secret-ish title",
            "Body words",
            "Sports day",
            "class-7a",
            "destinationHint",
            "renderedTitle",
            "renderedBody",
            "variables",
        ):
            assert leaked not in answer.text, (leaked, answer.text)


# ---------------------------------------------------------------------------------------------
# Filters.


async def test_filters(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-ADMIN-2: history filters by kind, category, state and an occurred_at range, each state
    matching what GET /v1/events/{id} would call it."""
    await school(engine, tenant, students=1)
    e = s.notification_event
    long_ago = datetime.now(UTC).replace(microsecond=0) - timedelta(days=30)
    completed = await send_event(engine, tenant)
    # Spread occurred_at so the date range has something to cut: set before the fan-out, which
    # copies it to every row (an event's month cannot change once it has rows: herald.db.partitions).
    async with engine.begin() as conn:
        await conn.execute(update(e).where(e.c.public_id == completed).values(occurred_at=long_ago))
    await run_to_completion(engine, tenant)
    scheduled = await send_event(
        engine,
        tenant,
        kind="event.scheduled",
        variables={"title": "Meeting", "date": "2026-12-10"},
        scheduled_for=datetime.now(UTC) + timedelta(days=2),
    )
    cancelled = await send_event(
        engine, tenant, variables={"title": "Called off", "message": "No more."}
    )
    fanning = await send_event(
        engine,
        tenant,
        kind="fee.due",
        channels=["in_app"],
        variables={"amount": "NPR 1", "dueDate": "2026-12-15"},
    )
    pending = await send_event(
        engine,
        tenant,
        kind="fee.due",
        channels=["in_app"],
        variables={"amount": "NPR 2", "dueDate": "2026-12-15"},
    )
    async with engine.begin() as conn:
        await conn.execute(
            update(e).where(e.c.public_id == cancelled).values(cancelled_at=func.now())
        )
        await conn.execute(
            update(e)
            .where(e.c.public_id == fanning)
            .values(fanout_claimed_at=func.now(), fanout_claim_token=uuid.uuid4())
        )
    headers = await operator_headers(engine, settings, tenant, [HISTORY_READ])

    async def ids(**params: str) -> set[str]:
        answer = await client.get(BASE, headers=headers, params=params)
        assert answer.status_code == 200, answer.text
        return {item["id"] for item in answer.json()["items"]}

    everything = {str(x) for x in (completed, scheduled, cancelled, fanning, pending)}
    assert await ids() == everything
    assert await ids(status="completed") == {str(completed)}
    assert await ids(status="scheduled") == {str(scheduled)}
    assert await ids(status="cancelled") == {str(cancelled)}
    assert await ids(status="fanning_out") == {str(fanning)}
    assert await ids(status="pending") == {str(pending)}
    assert await ids(kind="fee.due") == {str(fanning), str(pending)}
    assert await ids(category="events") == {str(scheduled)}
    assert await ids(category="finance", status="pending") == {str(pending)}

    def iso(moment: datetime) -> str:
        return moment.isoformat()

    assert await ids(to=iso(long_ago + timedelta(days=1))) == {str(completed)}
    assert await ids(to=iso(long_ago)) == set()  # `to` is exclusive
    assert await ids(**{"from": iso(long_ago)}) == everything  # `from` is inclusive
    later = long_ago + timedelta(seconds=1)
    assert await ids(**{"from": iso(later)}) == everything - {str(completed)}
    assert await ids(**{"from": iso(long_ago - timedelta(days=1)), "to": iso(later)}) == {
        str(completed)
    }
    assert await ids(to=iso(long_ago).replace("+00:00", "Z")) == set()
    # Each listed state is the one the events surface reports.
    answer = await client.get(BASE, headers=headers)
    states = {item["id"]: item["state"] for item in answer.json()["items"]}
    assert states == {
        str(completed): "completed",
        str(scheduled): "scheduled",
        str(cancelled): "cancelled",
        str(fanning): "fanning_out",
        str(pending): "pending",
    }

    for bad in (
        {"from": "yesterday"},
        {"to": "2026-01-01T00:00:00"},
        {"from": "2026-02-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"},
    ):
        refused = await client.get(BASE, headers=headers, params=bad)
        assert refused.status_code == 400, (bad, refused.text)
        assert refused.json()["error"]["code"] == "VALIDATION_FAILED"
    # Values outside the published enums and bounds break the schema itself.
    for bad in ({"status": "sent"}, {"category": "gossip"}, {"kind": "x" * 201}):
        refused = await client.get(BASE, headers=headers, params=bad)
        assert refused.status_code == 422, (bad, refused.text)
        assert refused.json()["error"]["code"] == "REQUEST_MALFORMED"


# ---------------------------------------------------------------------------------------------
# Paging.


async def test_paging_is_keyset_with_id_tie_break(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-ADMIN-9, R-ADMIN-10: the list is paged by an opaque cursor, newest first with the id as
    the final tie-break, so five events sharing one timestamp page as 2+2+1 with no row dropped or
    repeated; pagination=false, a limit over 100 and a forged cursor are refused."""
    await school(engine, tenant, students=1)
    sent = [
        await send_event(engine, tenant, variables={"title": f"T{i}", "message": "m"})
        for i in range(5)
    ]
    e = s.notification_event
    same = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    async with engine.begin() as conn:
        await conn.execute(update(e).where(e.c.tenant_id == tenant).values(occurred_at=same))
        ordered = [
            str(row.public_id)
            for row in await conn.execute(
                select(e.c.public_id).where(e.c.tenant_id == tenant).order_by(e.c.id.desc())
            )
        ]
    assert set(ordered) == {str(x) for x in sent}
    headers = await operator_headers(engine, settings, tenant, [HISTORY_READ])
    seen: list[str] = []
    cursor: str | None = None
    sizes = []
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        answer = await client.get(BASE, headers=headers, params=params)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        sizes.append(len(body["items"]))
        seen.extend(item["id"] for item in body["items"])
        cursor = body["nextCursor"]
        if cursor is None:
            break
    assert sizes == [2, 2, 1]
    assert seen == ordered

    for params, code in (
        ({"pagination": "false"}, "PAGINATION_REQUIRED"),
        ({"limit": "101"}, "REQUEST_MALFORMED"),
        ({"limit": "0"}, "REQUEST_MALFORMED"),
        ({"cursor": "not-a-cursor"}, "CURSOR_INVALID"),
    ):
        refused = await client.get(BASE, headers=headers, params=params)
        status = 422 if code == "REQUEST_MALFORMED" else 400
        assert refused.status_code == status, params
        assert refused.json()["error"]["code"] == code, params
    refused = await client.get(
        f"{BASE}/{sent[0]}/deliveries", headers=headers, params={"pagination": "false"}
    )
    assert refused.json()["error"]["code"] == "PAGINATION_REQUIRED"
    assert (await client.get(BASE, headers=headers, params={"limit": "100"})).status_code == 200


# ---------------------------------------------------------------------------------------------
# Deliveries of one event.


async def test_deliveries_of_an_event(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-ADMIN-2, R-ADMIN-10, R-DLQ-14, R-OBS-5: an event's deliveries list each row's status,
    attempts, failure and lease-expiry counts separately, timestamps and error code, a replay
    pointing at its original by public id; paged in queue order; filterable by channel and
    status."""
    event_id = await _school_event(engine, tenant, students=2)
    rows = await event_deliveries(engine, event_id)
    email = [r for r in rows if r["channel"] == "email"]
    await set_status(
        engine,
        email[0]["id"],
        "dead",
        attempts=3,
        failure_count=2,
        lease_expiry_count=1,
        last_error="EMAIL_REJECTED",
        provider_message_id="pm-1",
    )
    async with engine.begin() as conn:
        letter = (
            await conn.execute(
                insert(s.dead_letter)
                .values(
                    tenant_id=tenant,
                    queue_name="notification.email",
                    job_name="channel_send",
                    job_id=str(email[0]["public_id"]),
                    payload_ref={
                        "notificationDeliveryPublicId": str(email[0]["public_id"]),
                        "channel": "email",
                    },
                    attempts=3,
                    last_error="EMAIL_REJECTED",
                )
                .returning(s.dead_letter.c.public_id)
            )
        ).scalar_one()
        replay_id = await delivery.replay_dead_letter(conn, tenant, letter, actor="op")

    headers = await operator_headers(engine, settings, tenant, [HISTORY_READ])
    answer = await client.get(f"{BASE}/{event_id}/deliveries", headers=headers)
    assert answer.status_code == 200, answer.text
    items = answer.json()["items"]
    assert len(items) == 5
    by_id = {item["id"]: item for item in items}
    dead = by_id[str(email[0]["public_id"])]
    assert (dead["status"], dead["attempts"], dead["failureCount"], dead["leaseExpiryCount"]) == (
        "dead",
        3,
        2,
        1,
    )
    assert dead["lastError"] == "EMAIL_REJECTED" and dead["providerMessageId"] == "pm-1"
    assert dead["failedAt"] is not None and dead["deadAt"] is not None
    assert dead["replayOfDeliveryId"] is None
    replay = by_id[str(replay_id)]
    assert replay["replayOfDeliveryId"] == str(email[0]["public_id"])
    assert replay["status"] == "queued"
    assert items[-1]["id"] == str(replay_id)  # queued last, listed last
    in_app = [item for item in items if item["channel"] == "in_app"]
    assert all(item["status"] == "delivered" and item["renderedHash"] for item in in_app)
    assert set(items[0]) == {
        "id", "channel", "status", "attempts", "failureCount", "leaseExpiryCount", "queuedAt",
        "sentAt", "deliveredAt", "failedAt", "skippedAt", "deadAt", "lastError", "provider",
        "providerMessageId", "templateVersion", "renderedHash", "replayOfDeliveryId",
        "reasonCode", "reason",
    }  # fmt: skip

    # Paging: 2 + 2 + 1 in the same order as the one-page answer.
    paged: list[str] = []
    cursor: str | None = None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        body = (
            await client.get(f"{BASE}/{event_id}/deliveries", headers=headers, params=params)
        ).json()
        paged.extend(item["id"] for item in body["items"])
        cursor = body["nextCursor"]
        if cursor is None:
            break
    assert paged == [item["id"] for item in items]

    filtered = await client.get(
        f"{BASE}/{event_id}/deliveries", headers=headers, params={"channel": "email"}
    )
    assert {item["channel"] for item in filtered.json()["items"]} == {"email"}
    assert len(filtered.json()["items"]) == 3
    dead_only = await client.get(
        f"{BASE}/{event_id}/deliveries", headers=headers, params={"status": "dead"}
    )
    assert [item["id"] for item in dead_only.json()["items"]] == [str(email[0]["public_id"])]
    for bad in ({"channel": "pigeon"}, {"status": "lost"}):
        refused = await client.get(f"{BASE}/{event_id}/deliveries", headers=headers, params=bad)
        assert refused.status_code == 422


# ---------------------------------------------------------------------------------------------
# Permissions.


async def test_permission_boundaries(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-ADMIN-2, R-SEC-4, R-SEC-7: without NotificationHistory_READ the list is empty and every
    id answers 404 exactly as an absent id does; a role the person no longer holds grants
    nothing; READ alone does not cancel; another tenant's event is 404 even with every
    permission; an admin-scope API key sees the tenant's history; no credential is 401."""
    event_id = await _school_event(engine, tenant, students=1)
    absent = uuid.uuid4()

    async def probe(headers: dict[str, str]) -> tuple[int, int, int, int, int]:
        listed = await client.get(BASE, headers=headers)
        assert listed.status_code == 200
        detail = await client.get(f"{BASE}/{event_id}", headers=headers)
        deliveries = await client.get(f"{BASE}/{event_id}/deliveries", headers=headers)
        missing = await client.get(f"{BASE}/{absent}", headers=headers)
        assert detail.json() == missing.json() or detail.status_code == 200
        return (
            len(listed.json()["items"]),
            detail.status_code,
            deliveries.status_code,
            missing.status_code,
            (await client.post(f"{BASE}/{absent}/cancel", headers=headers)).status_code,
        )

    # A clerk with every other permission but not history read.
    others = [p for p in vocabulary.PERMISSIONS if p != HISTORY_READ]
    clerk = await operator_headers(engine, settings, tenant, others)
    assert await probe(clerk) == (0, 404, 404, 404, 404)
    no_role = await operator_headers(engine, settings, tenant, [HISTORY_READ], holds=False)
    assert await probe(no_role) == (0, 404, 404, 404, 404)
    reader = await operator_headers(engine, settings, tenant, [HISTORY_READ])
    assert await probe(reader) == (1, 200, 200, 404, 404)
    # READ alone cannot cancel, and says "not found" rather than "forbidden".
    refused = await client.post(f"{BASE}/{event_id}/cancel", headers=reader)
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "NOTIFICATION_EVENT_NOT_FOUND"
    superadmin = await operator_headers(engine, settings, tenant, [], superadmin=True)
    assert (await probe(superadmin))[:3] == (1, 200, 200)
    key = await admin_key_headers(engine, tenant)
    assert (await probe(key))[:3] == (1, 200, 200)

    other_tenant = f"{tenant}-other"
    everything = await operator_headers(engine, settings, other_tenant, vocabulary.PERMISSIONS)
    assert await probe(everything) == (0, 404, 404, 404, 404)
    assert (await client.post(f"{BASE}/{event_id}/cancel", headers=everything)).status_code == 404

    assert (await client.get(BASE)).status_code == 401
    assert (await client.get(f"{BASE}/not-a-uuid", headers=reader)).status_code == 404
