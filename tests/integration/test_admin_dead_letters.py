"""The admin dead-letter screen over HTTP: the channel allowlist, the channel filter, replay as
the acting operator, refusals, permissions and paging.

Dead letters are either produced by the real delivery pipeline (a scripted provider that refuses
the send) or inserted directly with a reference-only payload_ref, as the CHECKs require.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from httpx import AsyncClient
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from herald import vocabulary
from herald.channels.base import ProviderOutcome
from herald.config import Settings
from herald.db import schema as s
from herald.secrets.vault import Vault
from tests.integration.test_admin_history import (
    FAILURE_READ,
    FAILURE_UPDATE,
    HISTORY_READ,
    admin_key_headers,
    operator_headers,
)
from tests.integration.test_delivery import ScriptedProvider, deliver, email_delivery

BASE = "/v1/admin/dead-letters"
FAILURE_RESTORE = "NotificationFailure_RESTORE"


@pytest.fixture
def delivery_settings(settings: Settings, tmp_path: Any) -> Settings:
    return settings.model_copy(update={"max_attempts": 3, "data_dir": tmp_path})


async def insert_letter(
    engine: AsyncEngine,
    tenant: str,
    queue_name: str,
    *,
    job_name: str = "channel_send",
    failed_at: datetime | None = None,
    payload_ref: dict[str, str] | None = None,
) -> uuid.UUID:
    channel = queue_name.removeprefix("notification.")
    values: dict[str, Any] = {
        "tenant_id": tenant,
        "queue_name": queue_name,
        "job_name": job_name,
        "job_id": str(uuid.uuid4()),
        "payload_ref": payload_ref
        or {"notificationDeliveryPublicId": str(uuid.uuid4()), "channel": channel},
        "attempts": 5,
        "last_error": "PROVIDER_REJECTED",
    }
    if failed_at is not None:
        values["failed_at"] = failed_at
    async with engine.begin() as conn:
        return uuid.UUID(
            str(
                (
                    await conn.execute(
                        insert(s.dead_letter).values(**values).returning(s.dead_letter.c.public_id)
                    )
                ).scalar_one()
            )
        )


async def letter_row(engine: AsyncEngine, public_id: uuid.UUID) -> dict[str, Any]:
    async with engine.connect() as conn:
        row = (
            await conn.execute(select(s.dead_letter).where(s.dead_letter.c.public_id == public_id))
        ).one()
        return dict(row._mapping)


async def outsiders(engine: AsyncEngine, tenant: str) -> list[uuid.UUID]:
    """Dead letters that are not Herald's channel sends, each a different way."""
    return [
        # Another work type altogether (the seed's example: a database restore).
        await insert_letter(
            engine, tenant, "maintenance.restore", job_name="restore", payload_ref={"job": "r1"}
        ),
        # Operational email: Herald's own, but not a channel delivery.
        await insert_letter(
            engine,
            tenant,
            "notification.operational",
            job_name="operational_email",
            payload_ref={"aggregateType": "feedback", "eventType": "feedback.submitted"},
        ),
        # A queue name inside the allowlist running a different job.
        await insert_letter(engine, tenant, "notification.email", job_name="digest_build"),
        # A channel outside the allowlist (in-app never goes through a provider).
        await insert_letter(engine, tenant, "notification.in_app"),
    ]


async def test_list_shows_only_channel_dead_letters(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-DLQ-8, R-DLQ-10, R-ADMIN-3: the list shows only dead letters of the channel work types,
    whatever else the table holds; `channel` narrows it to one of them and can never widen it —
    a channel outside the allowlist lists nothing and an unknown one is refused."""
    inside = {
        channel: await insert_letter(engine, tenant, f"notification.{channel}")
        for channel in ("email", "sms", "push", "telegram")
    }
    await outsiders(engine, tenant)
    headers = await operator_headers(engine, settings, tenant, [FAILURE_READ])

    answer = await client.get(BASE, headers=headers)
    assert answer.status_code == 200, answer.text
    items = answer.json()["items"]
    assert {item["id"] for item in items} == {str(x) for x in inside.values()}
    email = next(item for item in items if item["id"] == str(inside["email"]))
    assert set(email) == {
        "id", "queueName", "channel", "jobId", "attempts", "lastError", "failedAt",
        "replayedAt", "replayedBy", "deliveryId", "replayDeliveryId",
    }  # fmt: skip
    assert (email["queueName"], email["channel"], email["attempts"], email["lastError"]) == (
        "notification.email",
        "email",
        5,
        "PROVIDER_REJECTED",
    )
    assert email["deliveryId"] is not None and email["replayedAt"] is None

    for channel, letter in inside.items():
        narrowed = await client.get(BASE, headers=headers, params={"channel": channel})
        assert [item["id"] for item in narrowed.json()["items"]] == [str(letter)]
    # in_app is a channel, but not an allowlisted one: the filter narrows to nothing.
    in_app = await client.get(BASE, headers=headers, params={"channel": "in_app"})
    assert in_app.status_code == 200 and in_app.json()["items"] == []
    for widening in ("restore", "maintenance.restore", "email' OR '1'='1", "operational"):
        refused = await client.get(BASE, headers=headers, params={"channel": widening})
        assert refused.status_code == 422, widening
        assert refused.json()["error"]["code"] == "REQUEST_MALFORMED"

    # An admin-scope key (a superadmin) sees exactly the same allowlisted set.
    superadmin = await client.get(BASE, headers=await admin_key_headers(engine, tenant))
    assert {item["id"] for item in superadmin.json()["items"]} == {str(x) for x in inside.values()}


async def test_replay_from_the_screen(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    vault: Vault,
    delivery_settings: Settings,
) -> None:
    """R-ADMIN-3, R-DLQ-4, R-DLQ-5, R-DLQ-12, R-DLQ-13, R-DLQ-14, R-DLQ-16: a delivery dies in
    the real pipeline; an operator replays its dead letter from the screen: 201 with the new
    delivery, which points at the original; the original keeps its evidence; the dead letter
    records who replayed it and the replay is audited; a second replay is 409."""
    original = await email_delivery(engine, tenant)
    refusing = ScriptedProvider("email", ProviderOutcome.failure("EMAIL_REJECTED", retryable=False))
    await deliver(engine, refusing, vault, delivery_settings, tenant)()
    headers = await operator_headers(
        engine, settings, tenant, [FAILURE_READ, FAILURE_UPDATE], code="support"
    )
    [listed] = (await client.get(BASE, headers=headers)).json()["items"]
    assert listed["deliveryId"] == str(original["public_id"]) and listed["channel"] == "email"

    answer = await client.post(f"{BASE}/{listed['id']}/replay", headers=headers)
    assert answer.status_code == 201, answer.text
    new_id = answer.json()["deliveryId"]

    d = s.notification_delivery
    async with engine.connect() as conn:
        rows = [
            dict(r._mapping)
            for r in await conn.execute(
                select(d).where(d.c.tenant_id == tenant, d.c.channel == "email").order_by(d.c.id)
            )
        ]
    dead, replay = rows
    assert str(replay["public_id"]) == new_id and replay["status"] == "queued"
    assert replay["replay_of_delivery_id"] == dead["id"]
    assert dead["status"] == "dead" and dead["last_error"] == "EMAIL_REJECTED"
    assert dead["failed_at"] is not None

    letter = await letter_row(engine, uuid.UUID(listed["id"]))
    assert letter["replayed_by"] == "op-support" and letter["replayed_at"] is not None
    [after] = (await client.get(BASE, headers=headers)).json()["items"]
    assert after["replayedBy"] == "op-support" and after["replayDeliveryId"] == new_id
    assert after["replayedAt"] is not None

    a = s.audit_record
    async with engine.connect() as conn:
        [audit] = [
            dict(r._mapping) for r in await conn.execute(select(a).where(a.c.tenant_id == tenant))
        ]
    assert (audit["action"], audit["entity_type"], audit["entity_id"]) == (
        "replay",
        "dead_letter",
        listed["id"],
    )
    assert (audit["actor_kind"], audit["actor_id"]) == ("person", "op-support")
    assert audit["changes"]["replay_delivery_id"]["after"] == new_id

    again = await client.post(f"{BASE}/{listed['id']}/replay", headers=headers)
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "DEAD_LETTER_ALREADY_REPLAYED"
    async with engine.connect() as conn:
        count = len((await conn.execute(select(d.c.id).where(d.c.tenant_id == tenant))).all())
    assert count == 2  # the dead original and its one replay; the refused replay added none
    async with engine.connect() as conn:
        audits = (await conn.execute(select(a.c.id).where(a.c.tenant_id == tenant))).all()
    assert len(audits) == 1


async def test_replay_outside_the_allowlist_is_409(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-DLQ-9, R-DLQ-11: a dead letter outside the allowlist is not listed, but addressing it by
    id is refused with 409 — it exists, so a 404 would lie — and nothing about it changes."""
    headers = await operator_headers(engine, settings, tenant, [FAILURE_READ, FAILURE_UPDATE])
    for outsider in await outsiders(engine, tenant):
        answer = await client.post(f"{BASE}/{outsider}/replay", headers=headers)
        assert answer.status_code == 409, answer.text
        assert answer.json()["error"]["code"] == "DEAD_LETTER_NOT_REPLAYABLE"
        row = await letter_row(engine, outsider)
        assert row["replayed_at"] is None and row["replayed_by"] is None
    assert (await client.get(BASE, headers=headers)).json()["items"] == []


async def test_permission_boundaries(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-DLQ-8, R-SEC-4, R-SEC-7: without NotificationFailure_READ the list is empty; replay needs
    NotificationFailure_UPDATE (RESTORE is not it) and answers 404 without it, exactly as for an
    absent id; another tenant's dead letter is 404 even with every permission; nothing is
    replayed by any refused request."""
    letter = await insert_letter(engine, tenant, "notification.sms")
    outsider = (await outsiders(engine, tenant))[0]

    async def replay_status(headers: dict[str, str], target: uuid.UUID) -> int:
        return (await client.post(f"{BASE}/{target}/replay", headers=headers)).status_code

    others = [p for p in vocabulary.PERMISSIONS if not p.startswith("NotificationFailure_")]
    clerk = await operator_headers(engine, settings, tenant, [*others, FAILURE_RESTORE])
    assert (await client.get(BASE, headers=clerk)).json()["items"] == []
    assert await replay_status(clerk, letter) == 404
    assert await replay_status(clerk, outsider) == 404  # no permission: not even a 409
    absent = await client.post(f"{BASE}/{uuid.uuid4()}/replay", headers=clerk)
    refused = await client.post(f"{BASE}/{letter}/replay", headers=clerk)
    assert refused.json() == absent.json()

    reader = await operator_headers(engine, settings, tenant, [FAILURE_READ, HISTORY_READ])
    assert len((await client.get(BASE, headers=reader)).json()["items"]) == 1
    assert await replay_status(reader, letter) == 404

    not_held = await operator_headers(
        engine, settings, tenant, [FAILURE_READ, FAILURE_UPDATE], holds=False
    )
    assert (await client.get(BASE, headers=not_held)).json()["items"] == []
    assert await replay_status(not_held, letter) == 404

    stranger = await operator_headers(
        engine, settings, f"{tenant}-other", list(vocabulary.PERMISSIONS)
    )
    assert (await client.get(BASE, headers=stranger)).json()["items"] == []
    assert await replay_status(stranger, letter) == 404
    assert await replay_status(stranger, outsider) == 404

    row = await letter_row(engine, letter)
    assert row["replayed_at"] is None
    updater = await operator_headers(engine, settings, tenant, [FAILURE_UPDATE])
    # UPDATE without READ may still replay by id; the list stays empty for it.
    assert (await client.get(BASE, headers=updater)).json()["items"] == []
    malformed = await client.post(f"{BASE}/not-a-uuid/replay", headers=updater)
    assert malformed.status_code == 404
    assert malformed.json()["error"]["code"] == "DEAD_LETTER_NOT_FOUND"
    assert (await client.get(BASE)).status_code == 401


async def test_paging_is_keyset_with_id_tie_break(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-ADMIN-9, R-ADMIN-10, R-DLQ-18: dead letters page most recent first with the id as the
    final tie-break (five failures in one instant page 2+2+1, none dropped or repeated), with no
    trimming; pagination=false and a forged cursor are refused."""
    same = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    letters = [
        await insert_letter(engine, tenant, "notification.email", failed_at=same) for _ in range(5)
    ]
    newest = await insert_letter(engine, tenant, "notification.push")
    headers = await operator_headers(engine, settings, tenant, [FAILURE_READ])
    seen: list[str] = []
    sizes: list[int] = []
    cursor: str | None = None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        body = (await client.get(BASE, headers=headers, params=params)).json()
        sizes.append(len(body["items"]))
        seen.extend(item["id"] for item in body["items"])
        cursor = body["nextCursor"]
        if cursor is None:
            break
    assert sizes == [2, 2, 2]
    assert seen[0] == str(newest)
    # Same failed_at: higher id first, which is insertion order reversed.
    assert seen[1:] == [str(x) for x in reversed(letters)]

    for params, code in (
        ({"pagination": "false"}, "PAGINATION_REQUIRED"),
        ({"limit": "1000"}, "REQUEST_MALFORMED"),
        ({"cursor": "bm90LWEtY3Vyc29y"}, "CURSOR_INVALID"),
    ):
        refused = await client.get(BASE, headers=headers, params=params)
        status = 422 if code == "REQUEST_MALFORMED" else 400
        assert refused.status_code == status, params
        assert refused.json()["error"]["code"] == code, params
