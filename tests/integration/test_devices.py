"""An end user's push devices over HTTP and through the service, against real PostgreSQL.

People are seeded directly; tokens are signed as a host would; every assertion about history,
invalidation and the partial unique reads notification_push_token itself.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from httpx import ASGITransport, AsyncClient
from sqlalchemy import exc, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald.api.app import create_app
from herald.auth.service import Actor, sign_token
from herald.config import Settings
from herald.db import schema as s
from herald.devices import service
from herald.errors import DeviceLimitReached
from herald.kinds import Registry
from herald.vocabulary import Platform
from tests import seed

BASE = "/v1/me/devices"
t = s.notification_push_token

Headers = dict[str, str]


# ---------------------------------------------------------------------------------------------
# Helpers


async def new_person(
    engine: AsyncEngine, tenant: str, external_id: str | None = None
) -> seed.Person:
    async with engine.begin() as conn:
        return await seed.person(conn, tenant, external_id)


def auth(settings: Settings, tenant: str, person: seed.Person) -> Headers:
    token = sign_token(settings, tenant_id=tenant, subject=person.external_id)
    return {"Authorization": f"Bearer {token}"}


def actor_of(tenant: str, person: seed.Person) -> Actor:
    return Actor(
        tenant_id=tenant,
        external_id=person.external_id,
        person_id=person.id,
        role_code=None,
        role_id=None,
        role_scope_kind=None,
        holds_role=False,
    )


def body(token: str, platform: Platform = "android") -> service.Target:
    return service.Target(token, platform, None)


async def rows(engine: AsyncEngine, tenant: str, token: str | None = None) -> list[dict[str, Any]]:
    """Every push-token row of the tenant (or of one token), oldest first, history included."""
    stmt = select(t).where(t.c.tenant_id == tenant).order_by(t.c.id)
    if token is not None:
        stmt = stmt.where(t.c.token == token)
    async with engine.connect() as conn:
        return [dict(r._mapping) for r in await conn.execute(stmt)]


def assert_invariants(all_rows: list[dict[str, Any]]) -> None:
    """R-SCHEMA-37/38 as the rows show them: the biconditional holds on every row, and no token
    has two live rows in one tenant."""
    for row in all_rows:
        assert row["is_active"] == (row["invalidated_at"] is None), row
        assert (row["invalidated_at"] is None) == (row["invalidation_reason"] is None), row
    live = [(r["tenant_id"], r["token"]) for r in all_rows if r["is_active"]]
    assert len(live) == len(set(live))


async def register(
    client: AsyncClient, headers: Headers, token: str, platform: str = "android"
) -> tuple[int, Any]:
    response = await client.post(BASE, json={"token": token, "platform": platform}, headers=headers)
    return response.status_code, response.json()


async def wait_until_blocked(engine: AsyncEngine, pid: int) -> None:
    """Return once backend `pid` waits on a lock; the interleaving, not a clock, is the point."""
    async with engine.connect() as conn:
        for _ in range(2000):
            waiting = (
                await conn.execute(
                    text("SELECT wait_event_type FROM pg_stat_activity WHERE pid = :pid"),
                    {"pid": pid},
                )
            ).scalar_one_or_none()
            await conn.rollback()
            if waiting == "Lock":
                return
            await asyncio.sleep(0.005)
    pytest.fail(f"backend {pid} never waited on a lock")


async def backend_pid(conn: AsyncConnection) -> int:
    return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


@pytest.fixture
async def small_cap_client(
    settings: Settings, engine: AsyncEngine, registry: Registry
) -> AsyncIterator[AsyncClient]:
    app = create_app(settings.model_copy(update={"device_limit": 2}), engine, registry)
    async with AsyncClient(transport=ASGITransport(app=app), base_url="http://herald.test") as http:
        yield http


# ---------------------------------------------------------------------------------------------
# Registration


async def test_a_new_token_is_a_new_row(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-DEVICE-2, R-DEVICE-6, R-SCHEMA-36: a new token is one fresh active row owned by the
    token's subject, in notification_push_token."""
    alice = await new_person(engine, tenant)
    status, answer = await register(client, auth(settings, tenant, alice), "tok-a1", "ios")
    assert status == 201
    assert answer == {"id": answer["id"], "platform": "ios"}
    [row] = await rows(engine, tenant)
    assert str(row["public_id"]) == answer["id"]
    assert row["person_id"] == alice.id
    assert row["token"] == "tok-a1"
    assert row["platform"] == "ios"
    assert row["is_active"] is True
    assert row["invalidated_at"] is None
    assert row["invalidation_reason"] is None


async def test_a_web_push_token_needs_no_device_row(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-DEVICE-5, R-SCHEMA-36, R-SCHEMA-39: a web token registers on its own (there is no
    user_device row to need), beside the same person's phone, with its own platform."""
    alice = await new_person(engine, tenant)
    headers = auth(settings, tenant, alice)
    assert (await register(client, headers, "phone-token", "android"))[0] == 201
    status, answer = await register(client, headers, "https://push.example/sub/1", "web")
    assert status == 201
    assert answer["platform"] == "web"
    assert [(r["platform"], r["is_active"]) for r in await rows(engine, tenant)] == [
        ("android", True),
        ("web", True),
    ]


async def test_the_same_person_and_token_is_a_touch(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-DEVICE-7: re-registering one's own token updates last_used_at and platform in place —
    same id, still one row, no invalidate-and-reinsert."""
    alice = await new_person(engine, tenant)
    headers = auth(settings, tenant, alice)
    _, first = await register(client, headers, "tok-touch", "android")
    # Backdate, so "last_used_at moved" does not depend on two requests' clocks differing.
    past = datetime.now(UTC) - timedelta(days=3)
    async with engine.begin() as conn:
        await conn.execute(update(t).where(t.c.tenant_id == tenant).values(last_used_at=past))

    status, second = await register(client, headers, "tok-touch", "web")
    assert status == 200
    assert second == {"id": first["id"], "platform": "web"}
    [row] = await rows(engine, tenant)
    assert str(row["public_id"]) == first["id"]
    assert row["is_active"] is True
    assert row["platform"] == "web"
    assert row["last_used_at"] > past


async def test_a_token_moving_to_another_person_is_replaced_never_reassigned(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-DEVICE-1, R-DEVICE-3, R-DEVICE-8, R-SCHEMA-37, R-SCHEMA-38: the earlier holder's row is
    invalidated with reason `replaced` and kept; the new holder gets a fresh row (new id)."""
    alice = await new_person(engine, tenant)
    bob = await new_person(engine, tenant)
    _, alices = await register(client, auth(settings, tenant, alice), "shared-phone")
    status, bobs = await register(client, auth(settings, tenant, bob), "shared-phone", "ios")
    assert status == 201
    assert bobs["id"] != alices["id"]

    old, new = await rows(engine, tenant, "shared-phone")
    assert str(old["public_id"]) == alices["id"]
    assert old["person_id"] == alice.id  # never reassigned
    assert old["is_active"] is False
    assert old["invalidation_reason"] == "replaced"
    assert old["invalidated_at"] is not None
    assert old["platform"] == "android"
    assert str(new["public_id"]) == bobs["id"]
    assert new["person_id"] == bob.id
    assert new["is_active"] is True
    assert new["platform"] == "ios"
    assert_invariants(await rows(engine, tenant))

    # Alice no longer lists it; Bob does.
    alice_list = (await client.get(BASE, headers=auth(settings, tenant, alice))).json()
    bob_list = (await client.get(BASE, headers=auth(settings, tenant, bob))).json()
    assert alice_list == {"items": []}
    assert [d["id"] for d in bob_list["items"]] == [bobs["id"]]

    # Back to Alice: a third, fresh row; both earlier rows stay as history.
    status, again = await register(client, auth(settings, tenant, alice), "shared-phone")
    assert status == 201
    assert again["id"] not in (alices["id"], bobs["id"])
    history = await rows(engine, tenant, "shared-phone")
    assert [(r["person_id"], r["is_active"], r["invalidation_reason"]) for r in history] == [
        (alice.id, False, "replaced"),
        (bob.id, False, "replaced"),
        (alice.id, True, None),
    ]


async def test_tokens_are_unique_per_tenant(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-SCHEMA-37: the same token in two tenants is two live rows; one never replaces the other."""
    other_tenant = f"t-{uuid.uuid4().hex[:12]}"
    alice = await new_person(engine, tenant, "same-external-id")
    twin = await new_person(engine, other_tenant, "same-external-id")
    assert (await register(client, auth(settings, tenant, alice), "cross-tenant"))[0] == 201
    assert (await register(client, auth(settings, other_tenant, twin), "cross-tenant"))[0] == 201
    [mine] = await rows(engine, tenant)
    [theirs] = await rows(engine, other_tenant)
    assert mine["is_active"] is True
    assert theirs["is_active"] is True
    assert mine["person_id"] == alice.id
    assert theirs["person_id"] == twin.id


async def test_the_cap_refuses_and_never_evicts(
    small_cap_client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-DEVICE-4, R-DEVICE-9: at the cap (2 here) a new token is refused with 409
    NOTIFICATION_DEVICE_LIMIT_REACHED; the oldest device is not evicted, a touch still works,
    and a token held by someone else is left alone by the refusal."""
    alice = await new_person(engine, tenant)
    bob = await new_person(engine, tenant)
    headers = auth(settings, tenant, alice)
    client = small_cap_client
    assert (await register(client, headers, "cap-1"))[0] == 201
    assert (await register(client, headers, "cap-2"))[0] == 201
    assert (await register(client, auth(settings, tenant, bob), "bobs-token"))[0] == 201
    before = await rows(engine, tenant)

    response = await client.post(BASE, json={"token": "cap-3", "platform": "ios"}, headers=headers)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "NOTIFICATION_DEVICE_LIMIT_REACHED"
    # Taking Bob's token would also be a new device for Alice: refused, and Bob keeps it.
    response = await client.post(
        BASE, json={"token": "bobs-token", "platform": "ios"}, headers=headers
    )
    assert response.status_code == 409
    assert await rows(engine, tenant) == before

    # A touch of her own at the cap is not a new device.
    assert (await register(client, headers, "cap-1", "web"))[0] == 200
    # Removing one frees a slot; invalidated rows do not count.
    [oldest, _] = (await client.get(BASE, headers=headers)).json()["items"]
    assert (await client.delete(f"{BASE}/{oldest['id']}", headers=headers)).status_code == 204
    assert (await register(client, headers, "cap-3"))[0] == 201
    assert_invariants(await rows(engine, tenant))


async def test_the_default_cap_is_ten(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-DEVICE-4, R-DEVICE-9: with the default setting the eleventh active token is refused."""
    assert settings.device_limit == 10
    alice = await new_person(engine, tenant)
    headers = auth(settings, tenant, alice)
    for n in range(10):
        assert (await register(client, headers, f"ten-{n}"))[0] == 201
    assert (await register(client, headers, "ten-10"))[0] == 409
    assert sum(r["is_active"] for r in await rows(engine, tenant)) == 10


@pytest.mark.parametrize(
    "payload",
    [
        {"token": "x", "platform": "android", "userId": "someone-else"},
        {"token": "x", "platform": "android", "deviceId": "d-1"},
        {"token": "x", "platform": "blackberry"},
        {"token": "", "platform": "android"},
        {"token": "x" * 4097, "platform": "android"},
        {"token": "bad\x00byte", "platform": "android"},
        {"token": " padded ", "platform": "android"},
        {"token": 12345, "platform": "android"},
        {"platform": "android"},
        {"token": "x"},
    ],
    ids=[
        "userId",
        "deviceId",
        "platform",
        "empty",
        "too-long",
        "nul",
        "padded",
        "not-a-string",
        "no-token",
        "no-platform",
    ],
)
async def test_a_malformed_body_is_422_and_writes_nothing(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    payload: dict[str, Any],
) -> None:
    """R-DEVICE-6, R-DEVICE-11, R-SCHEMA-39: the body has no user or device id (an extra field is
    refused), the platform comes from the vocabulary, and the token is bounded."""
    alice = await new_person(engine, tenant)
    response = await client.post(BASE, json=payload, headers=auth(settings, tenant, alice))
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "REQUEST_MALFORMED"
    assert await rows(engine, tenant) == []


async def test_the_longest_token_is_accepted(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-DEVICE-2: the upper bound is inclusive (4,096 characters)."""
    alice = await new_person(engine, tenant)
    assert (await register(client, auth(settings, tenant, alice), "y" * 4096))[0] == 201


async def test_every_route_needs_a_session(client: AsyncClient) -> None:
    """R-DEVICE-2, R-DEVICE-11: no token, no device — and no way to name another user."""
    assert (await client.get(BASE)).status_code == 401
    assert (await client.post(BASE, json={"token": "x", "platform": "ios"})).status_code == 401
    assert (await client.delete(f"{BASE}/{uuid.uuid4()}")).status_code == 401


# ---------------------------------------------------------------------------------------------
# Listing and removal


async def test_the_list_shows_only_the_callers_active_devices_without_tokens(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-DEVICE-3, R-DEVICE-11: GET lists the caller's live devices oldest first, with
    id/platform/createdAt/lastUsedAt and never the token; history and others' rows stay out."""
    alice = await new_person(engine, tenant)
    bob = await new_person(engine, tenant)
    headers = auth(settings, tenant, alice)
    _, kept = await register(client, headers, "secret-token-kept", "ios")
    _, removed = await register(client, headers, "secret-token-removed", "web")
    await register(client, auth(settings, tenant, bob), "secret-token-bob")
    assert (await client.delete(f"{BASE}/{removed['id']}", headers=headers)).status_code == 204

    response = await client.get(BASE, headers=headers)
    assert response.status_code == 200
    [item] = response.json()["items"]
    assert set(item) == {"id", "platform", "createdAt", "lastUsedAt"}
    assert item["id"] == kept["id"]
    assert item["platform"] == "ios"
    datetime.fromisoformat(item["createdAt"])
    datetime.fromisoformat(item["lastUsedAt"])
    assert "secret-token" not in response.text


async def test_removing_ones_own_device_is_a_soft_invalidation(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-DEVICE-3, R-DEVICE-10, R-SCHEMA-38: DELETE answers 204 and keeps the row, invalidated
    with reason `user_logout`; a second DELETE of it is 404; the token can be registered again
    as a fresh row."""
    alice = await new_person(engine, tenant)
    headers = auth(settings, tenant, alice)
    _, device = await register(client, headers, "logout-token")
    response = await client.delete(f"{BASE}/{device['id']}", headers=headers)
    assert response.status_code == 204
    assert response.content == b""

    [row] = await rows(engine, tenant)
    assert str(row["public_id"]) == device["id"]
    assert row["is_active"] is False
    assert row["invalidation_reason"] == "user_logout"
    assert row["invalidated_at"] is not None

    again = await client.delete(f"{BASE}/{device['id']}", headers=headers)
    assert again.status_code == 404
    assert again.json()["error"]["code"] == "NOTIFICATION_DEVICE_NOT_FOUND"

    status, fresh = await register(client, headers, "logout-token")
    assert status == 201
    assert fresh["id"] != device["id"]
    assert_invariants(await rows(engine, tenant))


@pytest.mark.parametrize("device_id", ["not-a-uuid", str(uuid.uuid4()), "12"])
async def test_removing_an_unknown_device_is_404(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str, device_id: str
) -> None:
    """R-DEVICE-11: a malformed or unknown id is 404 NOTIFICATION_DEVICE_NOT_FOUND."""
    alice = await new_person(engine, tenant)
    response = await client.delete(f"{BASE}/{device_id}", headers=auth(settings, tenant, alice))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "NOTIFICATION_DEVICE_NOT_FOUND"


async def test_removing_someone_elses_device_is_404_and_leaves_it(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-DEVICE-10, R-DEVICE-11: another person's device (same tenant, or the same external id in
    another tenant) answers 404 — never 403 — and is untouched."""
    alice = await new_person(engine, tenant, "shared-name")
    bob = await new_person(engine, tenant)
    other_tenant = f"t-{uuid.uuid4().hex[:12]}"
    twin = await new_person(engine, other_tenant, "shared-name")
    _, bobs = await register(client, auth(settings, tenant, bob), "bob-phone")
    _, twins = await register(client, auth(settings, other_tenant, twin), "twin-phone")
    before = await rows(engine, tenant), await rows(engine, other_tenant)

    for device in (bobs, twins):
        response = await client.delete(
            f"{BASE}/{device['id']}", headers=auth(settings, tenant, alice)
        )
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "NOTIFICATION_DEVICE_NOT_FOUND"
    assert (await rows(engine, tenant), await rows(engine, other_tenant)) == before


# ---------------------------------------------------------------------------------------------
# The database's own guarantees


async def test_the_database_refuses_a_half_invalidated_row_or_a_second_live_token(
    engine: AsyncEngine, tenant: str
) -> None:
    """R-SCHEMA-37, R-SCHEMA-38, R-SCHEMA-39: the CHECKs and the partial unique hold even for a
    writer that bypasses the service; invalidated duplicates coexist with the live row."""
    alice = await new_person(engine, tenant)
    async with engine.begin() as conn:
        token_id = await seed.push_token(conn, tenant, alice.id, "db-token")
        await conn.execute(
            insert(t).values(
                tenant_id=tenant,
                person_id=alice.id,
                token="db-token",
                platform="ios",
                is_active=False,
                invalidated_at=datetime.now(UTC),
                invalidation_reason="replaced",
            )
        )

    refused: list[Callable[[AsyncConnection], Awaitable[Any]]] = [
        # is_active false without a time or a cause
        lambda c: c.execute(update(t).where(t.c.id == token_id).values(is_active=False)),
        # a time without the cause
        lambda c: c.execute(
            update(t)
            .where(t.c.id == token_id)
            .values(is_active=False, invalidated_at=datetime.now(UTC))
        ),
        # a cause on a live row
        lambda c: c.execute(
            update(t).where(t.c.id == token_id).values(invalidation_reason="replaced")
        ),
        # a second live row for the token
        lambda c: seed.push_token(c, tenant, alice.id, "db-token"),
        # a platform outside the vocabulary
        lambda c: seed.push_token(c, tenant, alice.id, "other", platform="symbian"),
    ]
    for attempt in refused:
        with pytest.raises(exc.IntegrityError):
            async with engine.begin() as conn:
                await attempt(conn)
    assert_invariants(await rows(engine, tenant))


# ---------------------------------------------------------------------------------------------
# Concurrency


async def _register_alone(
    engine: AsyncEngine, actor: Actor, token: str, limit: int = 10
) -> service.Registration:
    async with engine.begin() as conn:
        return await service.register_device(conn, actor, body(token), limit=limit)


async def test_concurrent_registrations_by_two_people_leave_one_live_row(
    engine: AsyncEngine, tenant: str
) -> None:
    """R-SCHEMA-37, R-DEVICE-1, R-DEVICE-8: two people registering one token at once, on two
    connections, both succeed; exactly one row stays live and the other is `replaced`."""
    alice = await new_person(engine, tenant)
    bob = await new_person(engine, tenant)
    for round_ in range(5):
        token = f"race-{round_}"
        results = await asyncio.gather(
            _register_alone(engine, actor_of(tenant, alice), token),
            _register_alone(engine, actor_of(tenant, bob), token),
        )
        assert all(r.created for r in results)
        history = await rows(engine, tenant, token)
        assert len(history) == 2
        assert [r["is_active"] for r in history] == [False, True]
        assert history[0]["invalidation_reason"] == "replaced"
        assert {r["person_id"] for r in history} == {alice.id, bob.id}
    assert_invariants(await rows(engine, tenant))


async def test_concurrent_registrations_by_one_person_are_one_row_and_a_touch(
    engine: AsyncEngine, tenant: str
) -> None:
    """R-DEVICE-7, R-SCHEMA-37: the same person registering one token twice at once gets one
    row: one call creates it, the other touches it."""
    alice = await new_person(engine, tenant)
    results = await asyncio.gather(
        _register_alone(engine, actor_of(tenant, alice), "twice"),
        _register_alone(engine, actor_of(tenant, alice), "twice"),
    )
    assert sorted(r.created for r in results) == [False, True]
    assert results[0].device.id == results[1].device.id
    [row] = await rows(engine, tenant)
    assert row["is_active"] is True


@pytest.mark.parametrize("held_by_third", [False, True], ids=["new-token", "held-token"])
async def test_a_registration_blocked_behind_another_replaces_it_after_commit(
    engine: AsyncEngine, tenant: str, held_by_third: bool
) -> None:
    """R-SCHEMA-37, R-DEVICE-1, R-DEVICE-8: B registers while A's registration of the same token
    is uncommitted. B waits on the database, then — once A commits — sees A's row and replaces
    it, instead of failing on the partial unique or leaving two live rows. With a third person
    holding the token first, A's invalidation of that row is what B waits on."""
    alice = await new_person(engine, tenant)
    bob = await new_person(engine, tenant)
    carol = await new_person(engine, tenant)
    if held_by_third:
        await _register_alone(engine, actor_of(tenant, carol), "contested")

    async with engine.connect() as conn_a, engine.connect() as conn_b:
        pid_b = await backend_pid(conn_b)
        a = await service.register_device(
            conn_a, actor_of(tenant, alice), body("contested"), limit=10
        )
        task_b = asyncio.create_task(
            service.register_device(conn_b, actor_of(tenant, bob), body("contested"), limit=10)
        )
        await wait_until_blocked(engine, pid_b)
        await conn_a.commit()
        b = await task_b
        await conn_b.commit()

    assert a.created and b.created
    assert a.device.id != b.device.id
    history = await rows(engine, tenant, "contested")
    owners = [(r["person_id"], r["is_active"], r["invalidation_reason"]) for r in history]
    expected = [(alice.id, False, "replaced"), (bob.id, True, None)]
    if held_by_third:
        expected.insert(0, (carol.id, False, "replaced"))
    assert owners == expected
    assert_invariants(await rows(engine, tenant))


async def test_a_same_person_registration_blocked_behind_its_twin_is_a_touch(
    engine: AsyncEngine, tenant: str
) -> None:
    """R-DEVICE-7, R-SCHEMA-37: the second of two simultaneous registrations of one token by one
    person waits for the first and then touches its row."""
    alice = await new_person(engine, tenant)
    async with engine.connect() as conn_a, engine.connect() as conn_b:
        pid_b = await backend_pid(conn_b)
        a = await service.register_device(conn_a, actor_of(tenant, alice), body("mine"), limit=10)
        task_b = asyncio.create_task(
            service.register_device(conn_b, actor_of(tenant, alice), body("mine"), limit=10)
        )
        await wait_until_blocked(engine, pid_b)
        await conn_a.commit()
        b = await task_b
        await conn_b.commit()
    assert (a.created, b.created) == (True, False)
    assert a.device.id == b.device.id
    [row] = await rows(engine, tenant)
    assert row["is_active"] is True


async def test_the_cap_holds_under_concurrent_registrations(
    engine: AsyncEngine, tenant: str
) -> None:
    """R-DEVICE-9: one slot left and two new tokens registered at once — one wins, the other is
    refused once the winner commits; the person never ends above the cap."""
    alice = await new_person(engine, tenant)
    actor = actor_of(tenant, alice)
    await _register_alone(engine, actor, "slot-1", limit=2)

    async with engine.connect() as conn_a, engine.connect() as conn_b:
        pid_b = await backend_pid(conn_b)
        await service.register_device(conn_a, actor, body("slot-2a"), limit=2)
        task_b = asyncio.create_task(
            service.register_device(conn_b, actor, body("slot-2b"), limit=2)
        )
        await wait_until_blocked(engine, pid_b)
        await conn_a.commit()
        with pytest.raises(DeviceLimitReached):
            await task_b
        await conn_b.rollback()

    # And unordered, through gather: never more than the cap.
    results = await asyncio.gather(
        _register_alone(engine, actor, "slot-3a", limit=3),
        _register_alone(engine, actor, "slot-3b", limit=3),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in results) == ["DeviceLimitReached", "Registration"]
    live = [r["token"] for r in await rows(engine, tenant) if r["is_active"]]
    assert len(live) == 3
    assert live[:2] == ["slot-1", "slot-2a"]


# ---------------------------------------------------------------------------------------------
# Browser Web Push subscriptions


def subscription_body(endpoint: str = "https://127.0.0.1/push/abc", **keys: str) -> dict[str, Any]:
    """A PushSubscription.toJSON() with real keys (a P-256 point, 16 bytes), platform webpush."""
    from tests.providers.servers import webpush_subscription

    browser = webpush_subscription(endpoint)
    return {
        "platform": "webpush",
        "endpoint": endpoint,
        "expirationTime": None,
        "keys": {"p256dh": browser.p256dh, "auth": browser.auth_b64} | keys,
    }


@pytest.fixture
async def loopback_client(
    settings: Settings, engine: AsyncEngine, registry: Registry, tmp_path: Any
) -> AsyncIterator[AsyncClient]:
    """Loopback endpoints allowed (as `herald dev` does) and Web Push configured."""
    app = create_app(
        settings.model_copy(
            update={
                "webhook_allow_loopback": True,
                "webpush_vapid_subject": "mailto:ops@school.example",
                "data_dir": tmp_path,
            }
        ),
        engine,
        registry,
    )
    async with AsyncClient(transport=ASGITransport(app=app), base_url="http://herald.test") as http:
        yield http


async def test_a_browser_subscription_is_a_device_with_its_keys(
    loopback_client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    alice = await new_person(engine, tenant)
    headers = auth(settings, tenant, alice)
    sent = subscription_body()
    response = await loopback_client.post(BASE, json=sent, headers=headers)
    assert response.status_code == 201, response.text
    assert response.json()["platform"] == "webpush"
    [row] = await rows(engine, tenant)
    assert (row["token"], row["webpush_p256dh"], row["webpush_auth"]) == (
        sent["endpoint"],
        sent["keys"]["p256dh"],
        sent["keys"]["auth"],
    )
    # The browser re-subscribes to the same endpoint with new keys: a touch that keeps them.
    again = subscription_body()
    response = await loopback_client.post(BASE, json=again, headers=headers)
    assert response.status_code == 200
    [row] = await rows(engine, tenant)
    assert row["webpush_p256dh"] == again["keys"]["p256dh"] and row["is_active"]
    # Listed like any device, without its endpoint or keys.
    listed = (await loopback_client.get(BASE, headers=headers)).json()["items"]
    assert [d["platform"] for d in listed] == ["webpush"]
    assert sent["endpoint"] not in json.dumps(listed)


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"endpoint": "http://push.example/sub"}, 400, "PUSH_SUBSCRIPTION_INVALID"),
        ({"endpoint": "ftp://push.example/sub"}, 400, "PUSH_SUBSCRIPTION_INVALID"),
        ({"endpoint": "https://10.0.0.7/sub"}, 400, "PUSH_ENDPOINT_FORBIDDEN"),
        ({"endpoint": "https://169.254.169.254/latest"}, 400, "PUSH_ENDPOINT_FORBIDDEN"),
        ({"endpoint": "https://127.0.0.1/sub"}, 400, "PUSH_ENDPOINT_FORBIDDEN"),
        ({"endpoint": "https://does-not-exist.invalid/sub"}, 400, "PUSH_ENDPOINT_FORBIDDEN"),
        (
            {"keys": {"p256dh": "B" + "A" * 86, "auth": "A" * 22}},
            400,
            "PUSH_SUBSCRIPTION_INVALID",
        ),
        ({"keys": {"p256dh": "BAAA", "auth": "A" * 22}}, 422, "REQUEST_MALFORMED"),
        ({"keys": "short-auth"}, 422, "REQUEST_MALFORMED"),
        ({"keys": None}, 422, "REQUEST_MALFORMED"),
        ({"endpoint": None}, 422, "REQUEST_MALFORMED"),
        ({"token": "also-a-token"}, 422, "REQUEST_MALFORMED"),
    ],
    ids=[
        "http",
        "ftp",
        "private",
        "metadata",
        "loopback",
        "unresolvable",
        "p256dh-off-curve",
        "p256dh-short",
        "auth-short",
        "no-keys",
        "no-endpoint",
        "token-too",
    ],
)
async def test_a_bad_subscription_is_refused_and_writes_nothing(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    change: dict[str, Any],
    status: int,
    code: str,
) -> None:
    alice = await new_person(engine, tenant)
    sent = subscription_body("https://push.example/sub")
    if change.get("keys") == "short-auth":
        sent["keys"]["auth"] = "AAAAAAAA"
    else:
        sent |= change
    sent = {k: v for k, v in sent.items() if v is not None or k == "expirationTime"}
    # Without network access push.example does not resolve either; the key checks come first,
    # so each case is refused for the reason it names.
    response = await client.post(BASE, json=sent, headers=auth(settings, tenant, alice))
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert await rows(engine, tenant) == []


async def test_the_vapid_public_key_is_published(
    loopback_client: AsyncClient, client: AsyncClient
) -> None:
    response = await loopback_client.get("/v1/webpush/vapid-public-key")
    assert response.status_code == 200
    key = response.json()["publicKey"]
    raw = base64.urlsafe_b64decode(key + "=" * (-len(key) % 4))
    assert len(raw) == 65 and raw[0] == 4
    assert (await loopback_client.get("/v1/webpush/vapid-public-key")).json()["publicKey"] == key
    unconfigured = await client.get("/v1/webpush/vapid-public-key")
    assert unconfigured.status_code == 404
    assert unconfigured.json()["error"]["code"] == "WEBPUSH_NOT_CONFIGURED"
