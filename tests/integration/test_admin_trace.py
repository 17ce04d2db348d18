"""The trace over HTTP: "why didn't this parent get it?" for every reason the record can give.

Events are recorded with asend() and fanned out by the real fan-out worker (preferences stored
before, so the fan-out itself decides skipped_preference); later outcomes are set directly with
the columns their CHECKs require, attempt rows written as the recorder writes them.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from httpx import AsyncClient
from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald import vocabulary
from herald.config import Settings
from herald.db import schema as s
from tests import seed
from tests.integration.test_admin_history import (
    FAILURE_READ,
    HISTORY_READ,
    event_deliveries,
    fanned_out_event,
    operator_headers,
    set_status,
)
from tests.integration.test_fanout import school, send_event

EVENTS = "/v1/admin/events"
PEOPLE = "/v1/admin/people"


async def _person_id(engine: AsyncEngine, tenant: str, external_id: str) -> int:
    async with engine.connect() as conn:
        found = await conn.execute(
            select(s.person.c.id).where(
                s.person.c.tenant_id == tenant, s.person.c.external_id == external_id
            )
        )
        return int(found.scalar_one())


async def _prefer(
    engine: AsyncEngine,
    tenant: str,
    external_id: str,
    *,
    switches: dict[str, bool] | None = None,
    overrides: dict[tuple[str, str], bool] | None = None,
) -> None:
    person_id = await _person_id(engine, tenant, external_id)
    async with engine.begin() as conn:
        for channel, on in (switches or {}).items():
            await conn.execute(
                insert(s.notification_channel_preference).values(
                    tenant_id=tenant, person_id=person_id, channel=channel, enabled=on
                )
            )
        for (category, channel), on in (overrides or {}).items():
            await conn.execute(
                insert(s.notification_preference).values(
                    tenant_id=tenant,
                    person_id=person_id,
                    category=category,
                    channel=channel,
                    enabled=on,
                )
            )


async def _deliveries_of(
    engine: AsyncEngine, tenant: str, event_id: uuid.UUID, external_id: str
) -> dict[str, dict[str, Any]]:
    r, p = s.notification_recipient, s.person
    async with engine.connect() as conn:
        public_id = (
            await conn.execute(
                select(p.c.public_id).where(p.c.tenant_id == tenant, p.c.external_id == external_id)
            )
        ).scalar_one()
        recipient_ids = {
            row.id
            for row in await conn.execute(
                select(r.c.id).where(r.c.user_public_id_snapshot == public_id)
            )
        }
    return {
        row["channel"]: row
        for row in await event_deliveries(engine, event_id)
        if row["recipient_id"] in recipient_ids
    }


async def _attempt(
    engine: AsyncEngine, tenant: str, delivery_id: int, outcome: str, **extra: Any
) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            insert(s.notification_delivery_attempt).values(
                tenant_id=tenant,
                delivery_id=delivery_id,
                occurred_at=seed.delivery_month(delivery_id),
                outcome=outcome,
                attempt_number=extra.pop("attempt_number", 1),
                **extra,
            )
        )


def _by_channel(trace: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["channel"]: row for row in trace["deliveries"]}


async def _trace(
    client: AsyncClient, headers: dict[str, str], event_id: uuid.UUID, external_id: str
) -> dict[str, Any]:
    answer = await client.get(f"{EVENTS}/{event_id}/recipients/{external_id}", headers=headers)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def test_preference_rules_each_named(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """skipped_preference says which rule switched the channel off: the person's category
    setting, their global switch, or Herald's default — as their preferences stand now — and says
    when the preferences have changed since."""
    await school(engine, tenant, students=4)
    await _prefer(engine, tenant, "g0", overrides={("announcement", "email"): False})
    await _prefer(engine, tenant, "g1", switches={"email": False})
    await _prefer(engine, tenant, "g3", switches={"email": False})
    event_id = await fanned_out_event(engine, tenant, channels=["in_app", "email", "sms"])
    # g3 switches email back on afterwards: the trace must not pretend the rule still holds.
    async with engine.begin() as conn:
        await conn.execute(
            update(s.notification_channel_preference)
            .where(
                s.notification_channel_preference.c.person_id
                == await _person_id(engine, tenant, "g3")
            )
            .values(enabled=True)
        )
    headers = await operator_headers(engine, settings, tenant, [HISTORY_READ])

    g0 = await _trace(client, headers, event_id, "g0")
    assert g0["inAudience"] is True and g0["audienceReasonCode"] == "recipient"
    assert g0["readInInbox"] is False
    channels = _by_channel(g0)
    assert channels["in_app"]["status"] == "delivered"
    assert channels["in_app"]["reasonCode"] == "in_inbox"
    assert channels["email"]["status"] == "skipped_preference"
    assert channels["email"]["reasonCode"] == "preference_category_off"
    assert "email off for announcement" in channels["email"]["reason"]
    assert "as their preferences stand now" in channels["email"]["reason"]
    # SMS is off by default for announcements, and nobody switched it on.
    assert channels["sms"]["reasonCode"] == "preference_default_off"

    g1 = _by_channel(await _trace(client, headers, event_id, "g1"))
    assert g1["email"]["reasonCode"] == "preference_global_off"
    assert "for everything" in g1["email"]["reason"]

    g3 = _by_channel(await _trace(client, headers, event_id, "g3"))
    assert g3["email"]["status"] == "skipped_preference"
    assert g3["email"]["reasonCode"] == "preference_changed_since"

    g2 = _by_channel(await _trace(client, headers, event_id, "g2"))
    assert g2["email"]["status"] == "queued" and g2["email"]["reasonCode"] == "queued"


async def test_mock_provider_apart_from_unconfigured_and_provider_codes(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """skipped_unconfigured with a `skipped` attempt is the mock provider ("mock provider, not
    delivered"); without an attempt no provider was configured. A provider's error is given by
    its code only, never the detail; attempts come with their times; a read inbox copy says so."""
    await school(engine, tenant, students=4)
    event_id = await fanned_out_event(engine, tenant)
    mocked = (await _deliveries_of(engine, tenant, event_id, "g0"))["email"]
    await set_status(engine, mocked["id"], "skipped_unconfigured")
    await _attempt(engine, tenant, mocked["id"], "skipped")
    unconfigured = (await _deliveries_of(engine, tenant, event_id, "g1"))["email"]
    await set_status(engine, unconfigured["id"], "skipped_unconfigured")
    dead = (await _deliveries_of(engine, tenant, event_id, "g2"))["email"]
    await set_status(
        engine, dead["id"], "dead", attempts=2, last_error="EMAIL_REJECTED (mailbox p@x.org)"
    )
    await _attempt(
        engine,
        tenant,
        dead["id"],
        "failed",
        provider_status="550",
        error_code="EMAIL_REJECTED (mailbox p@x.org)",
        retry_delay_seconds=30,
    )
    await _attempt(
        engine, tenant, dead["id"], "dead", attempt_number=2, error_code="EMAIL_REJECTED"
    )
    nodest = (await _deliveries_of(engine, tenant, event_id, "g3"))["email"]
    await set_status(engine, nodest["id"], "skipped_no_destination")
    async with engine.begin() as conn:
        await conn.execute(
            update(s.notification_recipient)
            .where(s.notification_recipient.c.id == mocked["recipient_id"])
            .values(read_at=func.now())
        )
    headers = await operator_headers(engine, settings, tenant, [HISTORY_READ])

    g0 = await _trace(client, headers, event_id, "g0")
    assert g0["readInInbox"] is True and g0["readAt"] is not None
    email = _by_channel(g0)["email"]
    assert email["reasonCode"] == "mock_provider"
    assert email["reason"].startswith("Mock provider, not delivered")
    assert [a["outcome"] for a in email["attempts"]] == ["skipped"]

    email = _by_channel(await _trace(client, headers, event_id, "g1"))["email"]
    assert email["reasonCode"] == "provider_unconfigured"
    assert email["reason"].startswith("No provider configured for email")
    assert email["attempts"] == []

    g2 = await _trace(client, headers, event_id, "g2")
    email = _by_channel(g2)["email"]
    assert email["reasonCode"] == "provider_failed_gave_up"
    assert email["errorCode"] == "EMAIL_REJECTED"
    assert [(a["number"], a["outcome"], a["errorCode"]) for a in email["attempts"]] == [
        (1, "failed", "EMAIL_REJECTED"),
        (2, "dead", "EMAIL_REJECTED"),
    ]
    assert email["attempts"][0]["providerStatus"] == "550"
    assert email["attempts"][0]["at"]
    # The provider's detail carried an address: it never reaches the answer.
    answer = await client.get(f"{EVENTS}/{event_id}/recipients/g2", headers=headers)
    assert "p@x.org" not in answer.text and "mailbox" not in answer.text

    email = _by_channel(await _trace(client, headers, event_id, "g3"))["email"]
    assert email["reasonCode"] == "no_destination"
    assert "No email address" in email["reason"]

    # History says the same from the same evidence, without reading any person.
    listed = await client.get(
        f"{EVENTS}/{event_id}/deliveries",
        headers=headers,
        params={"channel": "email", "status": "skipped_unconfigured"},
    )
    reasons = {item["id"]: item for item in listed.json()["items"]}
    assert reasons[str(mocked["public_id"])]["reasonCode"] == "mock_provider"
    assert reasons[str(mocked["public_id"])]["reason"].startswith("Mock provider, not delivered")
    assert reasons[str(unconfigured["public_id"])]["reasonCode"] == "provider_unconfigured"


async def test_not_in_audience_reasons(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """Not matched by the specification, deleted, created after a broadcast's freeze, and an
    event not fanned out yet: each its own reason, and no deliveries."""
    await school(engine, tenant, students=2)
    async with engine.begin() as conn:
        guardian_role = (
            await conn.execute(
                select(s.role.c.id).where(s.role.c.tenant_id == tenant, s.role.c.code == "guardian")
            )
        ).scalar_one()
        gone = await seed.person(conn, tenant, "gone", roles=[guardian_role])
        await conn.execute(
            update(s.person).where(s.person.c.id == gone.id).values(deleted_at=func.now())
        )
    event_id = await fanned_out_event(engine, tenant)
    headers = await operator_headers(engine, settings, tenant, [HISTORY_READ])

    teacher = await _trace(client, headers, event_id, "t0")
    assert (teacher["inAudience"], teacher["audienceReasonCode"]) == (False, "not_matched")
    assert teacher["deliveries"] == [] and teacher["readInInbox"] is None

    deleted = await _trace(client, headers, event_id, "gone")
    assert deleted["audienceReasonCode"] == "deleted"

    # A person added after the broadcast's audience was frozen.
    async with engine.begin() as conn:
        late = await seed.person(conn, tenant, "late", roles=[guardian_role])
        created = (
            await conn.execute(select(s.person.c.created_at).where(s.person.c.id == late.id))
        ).scalar_one()
        await conn.execute(
            update(s.notification_event)
            .where(s.notification_event.c.public_id == event_id)
            .values(audience_frozen_at=created - timedelta(seconds=5))
        )
    frozen = await _trace(client, headers, event_id, "late")
    assert frozen["audienceReasonCode"] == "created_after_freeze"
    assert "frozen" in frozen["audienceReason"]

    pending = await send_event(engine, tenant, variables={"title": "Later", "message": "x"})
    waiting = await _trace(client, headers, pending, "g0")
    assert waiting["audienceReasonCode"] == "not_fanned_out"


async def test_not_found_and_other_tenant(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """404 for an unknown event or person, another tenant's, and for a caller without
    NotificationHistory_READ; each code declared in the OpenAPI."""
    await school(engine, tenant, students=1)
    event_id = await fanned_out_event(engine, tenant)
    headers = await operator_headers(engine, settings, tenant, [HISTORY_READ])
    other = f"{tenant}-other"
    async with engine.begin() as conn:
        await seed.person(conn, other, "stranger")
    other_headers = await operator_headers(engine, settings, other, list(vocabulary.PERMISSIONS))
    without = await operator_headers(engine, settings, tenant, [FAILURE_READ])

    cases = [
        (f"{EVENTS}/{uuid.uuid4()}/recipients/g0", headers, "NOTIFICATION_EVENT_NOT_FOUND"),
        (f"{EVENTS}/not-a-uuid/recipients/g0", headers, "NOTIFICATION_EVENT_NOT_FOUND"),
        (f"{EVENTS}/{event_id}/recipients/nobody", headers, "PERSON_NOT_FOUND"),
        (f"{EVENTS}/{event_id}/recipients/stranger", headers, "PERSON_NOT_FOUND"),
        (f"{EVENTS}/{event_id}/recipients/g0", other_headers, "NOTIFICATION_EVENT_NOT_FOUND"),
        (f"{EVENTS}/{event_id}/recipients/g0", without, "NOTIFICATION_EVENT_NOT_FOUND"),
        (f"{PEOPLE}/nobody/deliveries", headers, "PERSON_NOT_FOUND"),
        (f"{PEOPLE}/bad%00id/deliveries", headers, "PERSON_NOT_FOUND"),
        (f"{EVENTS}/{event_id}/recipients/{'x' * 300}", headers, "PERSON_NOT_FOUND"),
        (f"{PEOPLE}/g0/deliveries", other_headers, "PERSON_NOT_FOUND"),
        (f"{PEOPLE}/g0/deliveries", without, "PERSON_NOT_FOUND"),
    ]
    for path, who, code in cases:
        answer = await client.get(path, headers=who)
        assert answer.status_code == 404, (path, answer.text)
        assert answer.json()["error"]["code"] == code, path

    spec = (await client.get("/openapi.json")).json()
    for path in (
        "/v1/admin/events/{event_id}/recipients/{external_id}",
        "/v1/admin/people/{external_id}/deliveries",
    ):
        responses = spec["paths"][path]["get"]["responses"]
        assert "404" in responses and "200" in responses, path


async def test_person_deliveries_paged_filtered_newest_first(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """The person's deliveries newest first, paged without a gap or repeat, filterable by kind,
    channel and status, each with its reason; never a name, address or content."""
    await school(engine, tenant, students=1)
    await _prefer(engine, tenant, "g0", overrides={("announcement", "email"): False})
    first = await fanned_out_event(
        engine, tenant, variables={"title": "First words", "message": "Body one"}
    )
    second = await fanned_out_event(
        engine, tenant, variables={"title": "Second words", "message": "Body two"}
    )
    headers = await operator_headers(engine, settings, tenant, [HISTORY_READ])

    seen: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 1}
        if cursor:
            params["cursor"] = cursor
        answer = await client.get(f"{PEOPLE}/g0/deliveries", headers=headers, params=params)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        seen += page["items"]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert len(seen) == 4 and len({item["id"] for item in seen}) == 4
    assert [item["eventId"] for item in seen[:2]] == [str(second)] * 2
    assert [item["eventId"] for item in seen[2:]] == [str(first)] * 2
    queued = [item["queuedAt"] for item in seen]
    assert queued == sorted(queued, reverse=True)

    answer = await client.get(
        f"{PEOPLE}/g0/deliveries",
        headers=headers,
        params={"channel": "email", "status": "skipped_preference", "kind": "announcement.posted"},
    )
    items = answer.json()["items"]
    assert len(items) == 2
    assert {item["reasonCode"] for item in items} == {"preference_category_off"}
    none = await client.get(
        f"{PEOPLE}/g0/deliveries", headers=headers, params={"kind": "other.kind"}
    )
    assert none.json()["items"] == []
    bad = await client.get(f"{PEOPLE}/g0/deliveries", headers=headers, params={"status": "x"})
    assert bad.status_code in (400, 422)
    for text in ("First words", "Body one", "Parent 0", "g0@example.com"):
        assert text not in answer.text
