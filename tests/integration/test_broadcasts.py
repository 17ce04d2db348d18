"""Broadcasts against real PostgreSQL: the admin API's every rule and refusal, the two-person
CHECK proved with direct SQL, release with a frozen audience, completion counted from delivery
rows, and a cancel in the middle of a fan-out and its sends."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from httpx import ASGITransport, AsyncClient
from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from herald import vocabulary
from herald.api.app import create_app
from herald.auth.service import create_api_key, sign_token
from herald.channels.base import Message, ProviderOutcome
from herald.channels.mock import MockProvider
from herald.config import Settings
from herald.db import schema as s
from herald.delivery.worker import deliver_batch
from herald.fanout import service as fanout
from herald.fanout.worker import fan_out_next_event
from herald.kinds import Registry
from herald.scheduling.broadcasts import worker as bworker
from herald.secrets.vault import build_vault
from tests import seed

BASE = "/v1/admin/broadcasts"
HOLDER = "broadcast-tests"
b, e, d, rcp = s.broadcast, s.notification_event, s.notification_delivery, s.notification_recipient
FINAL = {"sent", "delivered", "cancelled", *vocabulary.SKIPPED_STATUSES}


class SendingProvider(MockProvider):
    """The mock, answering `sent` as a real provider would (the plain mock records a skip)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__("email", settings)

    async def send(self, message: Message) -> ProviderOutcome:
        return ProviderOutcome.sent(f"m-{uuid.uuid4().hex[:8]}")


def body(**changes: Any) -> dict[str, Any]:
    valid: dict[str, Any] = {
        "title": "Sports day moved",
        "kind": "announcement.posted",
        "variables": {"title": "Sports day", "message": "It is now on Friday."},
        "channels": ["in_app", "email"],
        "audience": {"kind": "all_users"},
    }
    valid.update(changes)
    return valid


@pytest.fixture
def bsettings(settings: Settings) -> Settings:
    return settings.model_copy(update={"feature_broadcasts": True, "email_provider": "mock"})


@pytest.fixture
async def http(
    bsettings: Settings, engine: AsyncEngine, registry: Registry
) -> AsyncIterator[AsyncClient]:
    app = create_app(bsettings, engine, registry)
    async with AsyncClient(transport=ASGITransport(app=app), base_url="http://herald.test") as c:
        yield c


@dataclass(frozen=True)
class Ops:
    drafter: dict[str, str]  # every broadcast permission
    approver: dict[str, str]  # every broadcast permission, another person
    reader: dict[str, str]  # READ only
    clerk: dict[str, str]  # no broadcast permission
    admin_key: dict[str, str]


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


@pytest.fixture
async def ops(engine: AsyncEngine, bsettings: Settings, tenant: str) -> Ops:
    async with engine.begin() as conn:
        roles = {}
        for code, permissions in (
            ("officer", list(vocabulary.BROADCAST_PERMISSIONS)),
            ("viewer", ["NotificationBroadcast_READ"]),
            ("clerk", ["NotificationTemplate_READ"]),
        ):
            roles[code] = await seed.role(conn, tenant, code, "staff")
            await conn.execute(
                update(s.role).where(s.role.c.id == roles[code]).values(permissions=permissions)
            )
        await seed.person(conn, tenant, "drafter", roles=[roles["officer"]])
        await seed.person(conn, tenant, "approver", roles=[roles["officer"]])
        await seed.person(conn, tenant, "reader", roles=[roles["viewer"]])
        await seed.person(conn, tenant, "clerk", roles=[roles["clerk"]])
        key = await create_api_key(conn, tenant_id=tenant, scopes=["admin"])

    def token(subject: str, role: str) -> dict[str, str]:
        return bearer(sign_token(bsettings, tenant_id=tenant, subject=subject, role=role))

    return Ops(
        drafter=token("drafter", "officer"),
        approver=token("approver", "officer"),
        reader=token("reader", "viewer"),
        clerk=token("clerk", "clerk"),
        admin_key=bearer(key),
    )


async def row(engine: AsyncEngine, public_id: str) -> dict[str, Any]:
    async with engine.connect() as conn:
        found = await conn.execute(select(b).where(b.c.public_id == uuid.UUID(public_id)))
        return dict(found.one()._mapping)


async def count_broadcasts(engine: AsyncEngine, tenant: str) -> int:
    async with engine.connect() as conn:
        query = select(func.count()).select_from(b).where(b.c.tenant_id == tenant)
        return int((await conn.execute(query)).scalar_one())


async def draft(http: AsyncClient, ops: Ops, **changes: Any) -> dict[str, Any]:
    answer = await http.post(BASE, json=body(**changes), headers=ops.drafter)
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


async def approved(http: AsyncClient, ops: Ops, **changes: Any) -> dict[str, Any]:
    created = await draft(http, ops, **changes)
    answer = await http.post(
        f"{BASE}/{created['id']}/approve", json={"version": 1}, headers=ops.approver
    )
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


async def tick(
    engine: AsyncEngine, registry: Registry, settings: Settings
) -> bworker.BroadcastTickReport:
    return await bworker.run_tick(engine, registry, settings, HOLDER)


async def completed_messages(engine: AsyncEngine, tenant: str) -> list[dict[str, Any]]:
    """The payloads of the tenant's broadcast.completed webhook messages."""
    m = s.webhook_message
    async with engine.connect() as conn:
        found = await conn.execute(
            select(m.c.payload).where(
                m.c.tenant_id == tenant, m.c.event_type == "broadcast.completed"
            )
        )
        return [dict(payload) for payload in found.scalars()]


def error(answer: Any) -> str:
    return str(answer.json()["error"]["code"])


# ---------------------------------------------------------------------------------------------
# Flag, drafting, reading


async def test_flag_off_every_route_404(client: AsyncClient, ops: Ops) -> None:
    """R-BCAST-13: HERALD_FEATURE_BROADCASTS is off by default and its routes answer 404."""
    assert Settings.model_fields["feature_broadcasts"].default is False
    for answer in (
        await client.get(BASE, headers=ops.drafter),
        await client.post(BASE, json=body(), headers=ops.drafter),
        await client.post(
            f"{BASE}/{uuid.uuid4()}/approve", json={"version": 1}, headers=ops.approver
        ),
    ):
        assert answer.status_code == 404 and error(answer) == "NOTIFICATION_FEATURE_DISABLED"


async def test_draft_created_read_listed_and_audited(
    http: AsyncClient, ops: Ops, engine: AsyncEngine, tenant: str
) -> None:
    """R-BCAST-1, R-BCAST-2, R-BCAST-15: a broadcast starts as a draft by someone with
    _CREATE; _READ reads and lists it; a caller without the permission sees nothing."""
    created = await draft(http, ops)
    assert created["state"] == "draft" and created["version"] == 1
    assert created["createdBy"] == "person:drafter" and created["approvedBy"] is None
    got = await http.get(f"{BASE}/{created['id']}", headers=ops.reader)
    assert got.status_code == 200 and got.json()["title"] == "Sports day moved"
    listed = await http.get(BASE, headers=ops.reader)
    assert [item["id"] for item in listed.json()["items"]] == [created["id"]]
    assert (await http.get(BASE, headers=ops.clerk)).json()["items"] == []
    assert (await http.get(f"{BASE}/{created['id']}", headers=ops.clerk)).status_code == 404
    refused = await http.post(BASE, json=body(), headers=ops.reader)
    assert refused.status_code == 404 and error(refused) == "NOTIFICATION_BROADCAST_NOT_FOUND"
    async with engine.connect() as conn:
        audits = (
            await conn.execute(
                select(s.audit_record.c.action, s.audit_record.c.actor_id).where(
                    s.audit_record.c.tenant_id == tenant,
                    s.audit_record.c.entity_type == "broadcast",
                )
            )
        ).all()
    assert [(a.action, a.actor_id) for a in audits] == [("create", "drafter")]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"kind": "no.such.kind"}, "kind"),
        ({"variables": {"title": "t", "message": "m", "colour": "red"}}, "variables"),
        ({"variables": {"title": "t"}}, "variables"),
        ({"audience": {"kind": "nobody"}}, "audience"),
        ({"audience": {"kind": "users", "userIds": [f"u{i}" for i in range(501)]}}, "audience"),
        ({"channels": ["fax"]}, "channels"),
        ({"kind": "auth.otp", "variables": {}}, "kind"),
        ({"title": ""}, "title"),
        ({"scheduledFor": "2027-01-01T08:00:00"}, "scheduledFor"),
    ],
)
async def test_bad_drafts_refused_and_nothing_written(
    http: AsyncClient,
    ops: Ops,
    engine: AsyncEngine,
    tenant: str,
    changes: dict[str, Any],
    field: str,
) -> None:
    """Bad input: an unknown kind, undeclared or missing variables, an audience the send path
    refuses, … each a 400 naming the field, and no row written."""
    answer = await http.post(BASE, json=body(**changes), headers=ops.drafter)
    assert answer.status_code == 400, answer.text
    assert error(answer) == "NOTIFICATION_BROADCAST_INVALID"
    assert answer.json()["error"]["message"].startswith(f"{field}:")
    assert await count_broadcasts(engine, tenant) == 0


async def test_update_only_a_draft_on_the_version_read(
    http: AsyncClient, ops: Ops, engine: AsyncEngine
) -> None:
    """R-ADMIN-5 style: PUT on the version read; stale → 409; an approved one → 409; nothing
    changed by a refusal."""
    created = await draft(http, ops)
    url = f"{BASE}/{created['id']}"
    changed = await http.put(
        url, json={**body(title="Moved again"), "version": 1}, headers=ops.drafter
    )
    assert changed.status_code == 200 and changed.json()["version"] == 2
    stale = await http.put(url, json={**body(title="Stale"), "version": 1}, headers=ops.drafter)
    assert stale.status_code == 409 and error(stale) == "NOTIFICATION_BROADCAST_VERSION_CONFLICT"
    bad = await http.put(url, json={**body(kind="nope"), "version": 2}, headers=ops.drafter)
    assert bad.status_code == 400
    await http.post(f"{url}/approve", json={"version": 2}, headers=ops.approver)
    late = await http.put(url, json={**body(title="Late"), "version": 3}, headers=ops.drafter)
    assert late.status_code == 409 and error(late) == "NOTIFICATION_BROADCAST_NOT_DRAFT"
    stored = await row(engine, created["id"])
    assert (stored["title"], stored["version"], stored["state"]) == ("Moved again", 3, "approved")


# ---------------------------------------------------------------------------------------------
# Two people


async def test_two_person_approval(
    http: AsyncClient, ops: Ops, engine: AsyncEngine, tenant: str
) -> None:
    """R-BCAST-3, R-BCAST-4: the creator's approval is refused (409 SELF_APPROVAL), an API key's
    (403, even with admin), one without _APPROVE (404), a stale version (409); another person
    with _APPROVE approves; approving twice is a 409; every refusal changes nothing."""
    created = await draft(http, ops)
    url = f"{BASE}/{created['id']}/approve"
    refusals = [
        (ops.drafter, {"version": 1}, 409, "NOTIFICATION_BROADCAST_SELF_APPROVAL"),
        (ops.admin_key, {"version": 1}, 403, "NOTIFICATION_BROADCAST_APPROVER_NOT_PERSON"),
        (ops.reader, {"version": 1}, 404, "NOTIFICATION_BROADCAST_NOT_FOUND"),
        (ops.approver, {"version": 7}, 409, "NOTIFICATION_BROADCAST_VERSION_CONFLICT"),
        (ops.approver, {}, 400, "NOTIFICATION_BROADCAST_INVALID"),
    ]
    for headers, payload, status, code in refusals:
        answer = await http.post(url, json=payload, headers=headers)
        assert (answer.status_code, error(answer)) == (status, code), answer.text
        stored = await row(engine, created["id"])
        assert (stored["state"], stored["version"], stored["approved_by"]) == ("draft", 1, None)
    accepted = await http.post(url, json={"version": 1}, headers=ops.approver)
    assert accepted.status_code == 200, accepted.text
    result = accepted.json()
    assert result["state"] == "approved" and result["approvedBy"] == "person:approver"
    twice = await http.post(url, json={"version": 2}, headers=ops.approver)
    assert twice.status_code == 409 and error(twice) == "NOTIFICATION_BROADCAST_ALREADY_APPROVED"
    async with engine.connect() as conn:
        actions = (
            await conn.execute(
                select(s.audit_record.c.action, s.audit_record.c.actor_id)
                .where(
                    s.audit_record.c.tenant_id == tenant,
                    s.audit_record.c.entity_type == "broadcast",
                )
                .order_by(s.audit_record.c.id)
            )
        ).all()
    assert [(a.action, a.actor_id) for a in actions] == [
        ("create", "drafter"),
        ("approve", "approver"),
    ]


async def test_api_key_may_draft_but_a_person_approves(http: AsyncClient, ops: Ops) -> None:
    """R-BCAST-4: a draft made with an API key is approved by a person."""
    answer = await http.post(BASE, json=body(), headers=ops.admin_key)
    assert answer.status_code == 201 and answer.json()["createdBy"].startswith("api_key:")
    ok = await http.post(
        f"{BASE}/{answer.json()['id']}/approve", json={"version": 1}, headers=ops.drafter
    )
    assert ok.status_code == 200


async def test_check_constraint_refuses_self_approval_in_sql(
    engine: AsyncEngine, tenant: str
) -> None:
    """R-BCAST-5: the database itself refuses a row approved by its creator (and an approver
    that is not a person), whatever the code does."""
    values = {
        "tenant_id": tenant,
        "title": "t",
        "kind": "announcement.posted",
        "audience": {"kind": "all_users"},
        "created_by": "person:alice",
    }
    with pytest.raises(IntegrityError, match="broadcast_approver_not_creator_check"):
        async with engine.begin() as conn:
            await conn.execute(
                insert(b).values(
                    **values, state="approved", approved_by="person:alice", approved_at=func.now()
                )
            )
    async with engine.begin() as conn:
        row_id = (await conn.execute(insert(b).values(**values).returning(b.c.id))).scalar_one()
    with pytest.raises(IntegrityError, match="broadcast_approver_not_creator_check"):
        async with engine.begin() as conn:
            await conn.execute(
                update(b)
                .where(b.c.id == row_id)
                .values(state="approved", approved_by="person:alice", approved_at=func.now())
            )
    with pytest.raises(IntegrityError, match="broadcast_approver_is_person_check"):
        async with engine.begin() as conn:
            await conn.execute(
                update(b)
                .where(b.c.id == row_id)
                .values(state="approved", approved_by="api_key:k1", approved_at=func.now())
            )


async def test_approval_needs_a_kind_that_renders(
    http: AsyncClient, ops: Ops, engine: AsyncEngine, tenant: str
) -> None:
    """R-BCAST-6: a published override that does not render blocks approval (400), nothing
    changed."""
    created = await draft(http, ops)
    async with engine.begin() as conn:
        await conn.execute(
            insert(s.notification_template).values(
                tenant_id=tenant,
                kind="announcement.posted",
                channel="email",
                locale="en",
                title="{{title}}",
                body="Hello {{name}}, {{unknownThing}}",
                status="published",
            )
        )
    answer = await http.post(
        f"{BASE}/{created['id']}/approve", json={"version": 1}, headers=ops.approver
    )
    assert answer.status_code == 400 and error(answer) == "NOTIFICATION_BROADCAST_TEMPLATE_INVALID"
    assert (await row(engine, created["id"]))["state"] == "draft"


# ---------------------------------------------------------------------------------------------
# Release, frozen audience, completion


async def test_release_freezes_audience_and_completes(
    http: AsyncClient,
    ops: Ops,
    engine: AsyncEngine,
    registry: Registry,
    bsettings: Settings,
    tenant: str,
) -> None:
    """R-BCAST-7, R-BCAST-8, R-BCAST-9, R-BCAST-10, R-BCAST-16: the scheduler freezes
    audienceFrozenAt and records one event (no recipient yet: it sends nothing itself); a person
    created after the freeze gets nothing; deliveries complete through the workers; the counts
    and the report are the delivery rows'; the preview counts the frozen audience."""
    async with engine.begin() as conn:
        for n in range(3):
            await seed.person(conn, tenant, f"parent-{n}")
    # The host subscribes to broadcast.completed (issue 16): one message once it completes.
    hook = await http.post(
        "/v1/admin/webhooks",
        json={"url": "https://93.184.215.14/hook", "eventTypes": ["broadcast.completed"]},
        headers=ops.admin_key,
    )
    assert hook.status_code == 201, hook.text
    result = await approved(http, ops)
    preview = (await http.get(f"{BASE}/{result['id']}/audience-preview", headers=ops.reader)).json()
    assert preview["count"] == 7 and len(preview["sample"]) == 7  # 4 operators + 3 parents
    assert (await tick(engine, registry, bsettings)).released >= 1
    stored = await row(engine, result["id"])
    assert stored["state"] == "sending" and stored["audience_frozen_at"] is not None
    async with engine.connect() as conn:
        event = (await conn.execute(select(e).where(e.c.id == stored["event_id"]))).one()
        recipients = (
            await conn.execute(select(func.count()).where(rcp.c.event_id == stored["event_id"]))
        ).scalar_one()
    assert event.audience_frozen_at == stored["audience_frozen_at"]
    assert recipients == 0 and event.fanout_claimed_at is None
    async with engine.begin() as conn:
        late = await seed.person(conn, tenant, "late-joiner")
    while await fan_out_next_event(engine, registry, batch_size=2, tenant_id=tenant):
        pass
    async with engine.connect() as conn:
        people = set(
            (
                await conn.execute(
                    select(rcp.c.user_id).where(rcp.c.event_id == stored["event_id"])
                )
            ).scalars()
        )
    assert len(people) == 7 and late.id not in people
    assert (await tick(engine, registry, bsettings)).completed == 0  # emails still queued
    vault = build_vault(bsettings, engine)
    while await deliver_batch(
        engine,
        "email",
        SendingProvider(bsettings),
        registry=registry,
        vault=vault,
        settings=bsettings,
        tenant_id=tenant,
    ):
        pass
    assert await completed_messages(engine, tenant) == []  # not before it completes
    await tick(engine, registry, bsettings)
    await tick(engine, registry, bsettings)  # a later tick emits nothing more
    got = (await http.get(f"{BASE}/{result['id']}", headers=ops.reader)).json()
    assert got["state"] == "completed" and got["recipientCount"] == 7
    [message] = await completed_messages(engine, tenant)
    assert message["type"] == "broadcast.completed"
    assert message["data"] == {"broadcastId": result["id"], "state": "completed"}
    # Nothing left queued for an address no test serves (e2e workers share this database).
    gone = await http.delete(f"/v1/admin/webhooks/{hook.json()['id']}", headers=ops.admin_key)
    assert gone.status_code == 204 and await completed_messages(engine, tenant) == []
    assert got["counts"] == {"delivered": 7, "sent": 7}
    report = (await http.get(f"{BASE}/{result['id']}/report", headers=ops.reader)).json()
    assert report["counts"] == {"in_app": {"delivered": 7}, "email": {"sent": 7}}
    assert report["deliveryCount"] == 14 and report["recipientCount"] == 7
    preview = (await http.get(f"{BASE}/{result['id']}/audience-preview", headers=ops.reader)).json()
    assert preview["count"] == 7
    # R-BCAST-14: every delivery carries the hash of what it rendered.
    async with engine.connect() as conn:
        hashes = (
            (
                await conn.execute(
                    select(d.c.rendered_hash).where(d.c.event_id == stored["event_id"])
                )
            )
            .scalars()
            .all()
        )
    assert len(hashes) == 14 and all(hashes)
    cancel = await http.post(f"{BASE}/{result['id']}/cancel", headers=ops.drafter)
    assert cancel.status_code == 409 and error(cancel) == "NOTIFICATION_BROADCAST_COMPLETED"


async def test_scheduled_broadcast_waits_for_its_time(
    http: AsyncClient, ops: Ops, engine: AsyncEngine, registry: Registry, bsettings: Settings
) -> None:
    """A broadcast with scheduledFor in the future is not released before it."""
    result = await approved(http, ops, scheduledFor="2099-01-01T08:00:00Z")
    await tick(engine, registry, bsettings)
    assert (await row(engine, result["id"]))["state"] == "approved"


# ---------------------------------------------------------------------------------------------
# Cancel


async def test_cancel_draft_and_approved_then_refusals(
    http: AsyncClient, ops: Ops, engine: AsyncEngine, registry: Registry, bsettings: Settings
) -> None:
    """Cancel from draft or approved: nothing is ever released; cancelling twice, approving or
    updating a cancelled one are precise 409s."""
    first = await draft(http, ops)
    second = await approved(http, ops, title="Second")
    for item in (first, second):
        answer = await http.post(f"{BASE}/{item['id']}/cancel", headers=ops.drafter)
        assert answer.status_code == 200 and answer.json()["state"] == "cancelled"
        assert answer.json()["settledAt"] is not None
    await tick(engine, registry, bsettings)
    assert (await row(engine, second["id"]))["event_id"] is None
    again = await http.post(f"{BASE}/{first['id']}/cancel", headers=ops.drafter)
    assert again.status_code == 409 and error(again) == "NOTIFICATION_BROADCAST_CANCELLED"
    approve = await http.post(
        f"{BASE}/{first['id']}/approve", json={"version": 2}, headers=ops.approver
    )
    assert approve.status_code == 409 and error(approve) == "NOTIFICATION_BROADCAST_CANCELLED"
    put = await http.put(
        f"{BASE}/{first['id']}", json={**body(), "version": 2}, headers=ops.drafter
    )
    assert put.status_code == 409 and error(put) == "NOTIFICATION_BROADCAST_CANCELLED"
    assert (await http.post(f"{BASE}/{first['id']}/cancel", headers=ops.reader)).status_code == 404


class BlockingProvider(MockProvider):
    """A provider whose sends wait until released: calls in flight while the cancel commits."""

    def __init__(self, settings: Settings) -> None:
        super().__init__("email", settings)
        self.started = asyncio.Event()
        self.proceed = asyncio.Event()

    async def send(self, message: Message) -> ProviderOutcome:
        self.started.set()
        await self.proceed.wait()
        return ProviderOutcome.sent(f"m-{uuid.uuid4().hex[:8]}")


async def test_cancel_mid_flight(
    http: AsyncClient,
    ops: Ops,
    engine: AsyncEngine,
    registry: Registry,
    bsettings: Settings,
    tenant: str,
) -> None:
    """R-BCAST-11, R-BCAST-12: cancelled while sending — fan-out half written, some emails sent,
    some in flight — no recipient is written after the cancel, every unclaimed delivery becomes
    cancelled, calls in flight finish and are recorded, and the report adds up."""
    async with engine.begin() as conn:
        for n in range(600):
            await seed.person(conn, tenant, f"p-{n:04d}")
    result = await approved(http, ops)
    await tick(engine, registry, bsettings)
    token = uuid.uuid4()
    async with engine.begin() as conn:
        claimed = await fanout.claim_next_event(conn, token, tenant_id=tenant)
    assert claimed is not None
    for _ in range(3):  # 300 of 604 people
        async with engine.begin() as conn:
            await fanout.fan_out_batch(conn, claimed, token, registry=registry, batch_size=100)
    vault = build_vault(bsettings, engine)
    await deliver_batch(
        engine,
        "email",
        SendingProvider(bsettings),
        registry=registry,
        vault=vault,
        settings=bsettings,
        tenant_id=tenant,
        limit=50,
    )
    blocking = BlockingProvider(bsettings)
    in_flight = asyncio.create_task(
        deliver_batch(
            engine,
            "email",
            blocking,
            registry=registry,
            vault=vault,
            settings=bsettings,
            tenant_id=tenant,
            limit=10,
        )
    )
    await asyncio.wait_for(blocking.started.wait(), 10)
    answer = await http.post(f"{BASE}/{result['id']}/cancel", headers=ops.drafter)
    assert answer.status_code == 200 and answer.json()["state"] == "cancelled"
    assert answer.json()["settledAt"] is None  # ten calls are still in flight
    async with engine.begin() as conn:
        after = await fanout.fan_out_batch(conn, claimed, token, registry=registry, batch_size=100)
    assert after.lost_claim and after.recipients_written == 0
    blocking.proceed.set()
    assert await in_flight == 10
    await tick(engine, registry, bsettings)
    stored = await row(engine, result["id"])
    assert stored["state"] == "cancelled" and stored["settled_at"] is not None
    async with engine.connect() as conn:
        statuses = dict(
            (
                await conn.execute(
                    select(d.c.status, func.count())
                    .where(d.c.event_id == stored["event_id"])
                    .group_by(d.c.status)
                )
            ).all()
        )
        recipients = (
            await conn.execute(select(func.count()).where(rcp.c.event_id == stored["event_id"]))
        ).scalar_one()
        event = (await conn.execute(select(e).where(e.c.id == stored["event_id"]))).one()
    assert set(statuses) <= FINAL, statuses
    assert recipients == 300 and event.recipient_count == 300 and event.cancelled_at is not None
    assert statuses["sent"] == 60 and statuses["cancelled"] == 240 and statuses["delivered"] == 300
    report = (await http.get(f"{BASE}/{result['id']}/report", headers=ops.reader)).json()
    assert report["recipientCount"] == 300 and report["deliveryCount"] == 600
    assert sum(sum(by.values()) for by in report["counts"].values()) == 2 * recipients
    events = await http.get(f"/v1/admin/events/{result['eventId']}", headers=ops.admin_key)
    assert events.status_code in (200, 404)


async def test_a_dead_lettered_fanout_settles_the_broadcast_as_failed(
    http: AsyncClient,
    ops: Ops,
    engine: AsyncEngine,
    registry: Registry,
    bsettings: Settings,
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 11: a broadcast whose fan-out gives up (its attempt budget spent, dead-lettered)
    does not stay `sending` forever. What it wrote is still sent; once none of it is in flight
    the broadcast is `failed` and settled, its report adds up to the recipients written, and
    cancelling it is refused like cancelling a completed one."""
    from herald.fanout import queries as fanout_queries
    from herald.fanout.worker import MAX_FANOUT_ATTEMPTS

    async with engine.begin() as conn:
        for n in range(3):
            await seed.person(conn, tenant, f"parent-{n}")
    result = await approved(http, ops)
    await tick(engine, registry, bsettings)
    token = uuid.uuid4()
    async with engine.begin() as conn:  # attempt 1 writes one page of 3 of the 7 people
        claimed = await fanout.claim_next_event(conn, token, tenant_id=tenant)
    assert claimed is not None
    async with engine.begin() as conn:
        first = await fanout.fan_out_batch(conn, claimed, token, registry=registry, batch_size=3)
    assert first.recipients_written == 3 and not first.completed

    async def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug in a resolver")

    monkeypatch.setattr(fanout_queries, "advance_cursor", broken)
    for _ in range(MAX_FANOUT_ATTEMPTS - 1):  # every later attempt fails; the last gives up
        async with engine.begin() as conn:
            await fanout.release_stale_claims(conn, older_than_seconds=0)
        with pytest.raises(RuntimeError):
            await fan_out_next_event(engine, registry, batch_size=3, tenant_id=tenant)
    monkeypatch.undo()
    stored = await row(engine, result["id"])
    async with engine.connect() as conn:
        event = (await conn.execute(select(e).where(e.c.id == stored["event_id"]))).one()
    assert event.fanout_failed_at is not None and event.fanout_completed_at is None

    report = await tick(engine, registry, bsettings)
    assert report.failed == 0 and (await row(engine, result["id"]))["state"] == "sending"
    vault = build_vault(bsettings, engine)
    while await deliver_batch(
        engine,
        "email",
        SendingProvider(bsettings),
        registry=registry,
        vault=vault,
        settings=bsettings,
        tenant_id=tenant,
    ):
        pass
    assert (await tick(engine, registry, bsettings)).failed == 1
    stored = await row(engine, result["id"])
    assert stored["state"] == "failed"
    assert stored["failed_at"] is not None and stored["settled_at"] is not None
    assert stored["completed_at"] is None
    got = (await http.get(f"{BASE}/{result['id']}", headers=ops.reader)).json()
    assert got["state"] == "failed" and got["counts"] == {"delivered": 3, "sent": 3}
    answer = await http.get(f"{BASE}/{result['id']}/report", headers=ops.reader)
    assert answer.json()["counts"] == {"in_app": {"delivered": 3}, "email": {"sent": 3}}
    assert answer.json()["recipientCount"] == 3 and answer.json()["deliveryCount"] == 6
    assert (await tick(engine, registry, bsettings)).failed == 0  # settled: never looked at again
    cancel = await http.post(f"{BASE}/{result['id']}/cancel", headers=ops.drafter)
    assert cancel.status_code == 409 and error(cancel) == "NOTIFICATION_BROADCAST_COMPLETED"
    with pytest.raises(IntegrityError):  # the pair CHECK: failed means failed_at, and back
        async with engine.begin() as conn:
            await conn.execute(update(b).where(b.c.id == stored["id"]).values(failed_at=None))
