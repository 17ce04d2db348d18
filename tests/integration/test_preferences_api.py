"""The consumer preference API (GET/PUT /v1/me/preferences) against real PostgreSQL.

Most tests go through the ASGI app; the concurrency tests use two real database connections (the
service directly) and two real HTTP connections to a uvicorn server on 127.0.0.1, each forced to
overlap by a lock the test holds and releases only once PostgreSQL reports both savers waiting.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import pytest
from httpx import ASGITransport, AsyncClient
from sqlalchemy import insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald.api.app import create_app
from herald.auth.service import Actor, sign_token
from herald.config import Settings
from herald.db import schema as s
from herald.errors import PreferenceVersionConflict
from herald.fanout.worker import fan_out_next_event
from herald.kinds import Kind, Registry, Template
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.preferences import service
from herald.preferences.schemas import PreferenceOverride, PreferencesUpdate
from herald.runtime.server import serve_api
from herald.sending.service import SendInput, asend
from herald.vocabulary import CATEGORIES, CHANNELS
from tests import seed
from tests.e2e.harness import free_port

URL = "/v1/me/preferences"
# Upper bound for waiting on PostgreSQL to report lock waiters; never an expectation.
WAIT_LIMIT_SECONDS = 30.0

Stored = tuple[int | None, dict[str, bool], dict[tuple[str, str], bool]]


# --------------------------------------------------------------------------------------------
# Helpers


async def person(engine: AsyncEngine, tenant: str, external_id: str = "parent") -> seed.Person:
    async with engine.begin() as conn:
        return await seed.person(conn, tenant, external_id)


def auth(settings: Settings, tenant: str, who: seed.Person) -> dict[str, str]:
    token = sign_token(settings, tenant_id=tenant, subject=who.external_id)
    return {"Authorization": f"Bearer {token}"}


def actor(tenant: str, who: seed.Person) -> Actor:
    return Actor(
        tenant_id=tenant,
        external_id=who.external_id,
        person_id=who.id,
        role_code=None,
        role_id=None,
        role_scope_kind=None,
        holds_role=False,
    )


async def stored(engine: AsyncEngine, person_id: int) -> Stored:
    """(set version or None, global switches, per-category overrides) exactly as stored."""
    st = s.notification_preference_set
    ch = s.notification_channel_preference
    pr = s.notification_preference
    async with engine.connect() as conn:
        version = (
            await conn.execute(select(st.c.version).where(st.c.person_id == person_id))
        ).scalar_one_or_none()
        switches = {
            row.channel: row.enabled
            for row in await conn.execute(
                select(ch.c.channel, ch.c.enabled).where(ch.c.person_id == person_id)
            )
        }
        overrides = {
            (row.category, row.channel): row.enabled
            for row in await conn.execute(
                select(pr.c.category, pr.c.channel, pr.c.enabled).where(pr.c.person_id == person_id)
            )
        }
    return version, switches, overrides


def cells(body: Mapping[str, Any]) -> dict[str, dict[str, bool]]:
    return {c["category"]: c["channels"] for c in body["categories"]}


def locked(body: Mapping[str, Any]) -> dict[str, bool]:
    return {c["category"]: c["locked"] for c in body["categories"]}


async def wait_for_lock_waiters(engine: AsyncEngine, count: int) -> None:
    """Return once `count` backends of this database wait on a lock over the preference set."""
    probe = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND query ILIKE '%notification_preference_set%'"
    )
    async with asyncio.timeout(WAIT_LIMIT_SECONDS):
        while True:
            async with engine.connect() as conn:
                waiting = int((await conn.execute(probe)).scalar_one())
            if waiting >= count:
                return
            await asyncio.sleep(0.02)


async def hold_set_lock(conn: AsyncConnection, tenant: str, person_id: int, version: int) -> None:
    """Inside an open transaction, lock what a saver from `version` must wait for: the set row
    (version > 0), or an uncommitted set row that a first save's INSERT conflicts with (0)."""
    st = s.notification_preference_set
    if version == 0:
        await conn.execute(insert(st).values(tenant_id=tenant, person_id=person_id, version=1))
    else:
        await conn.execute(
            select(st.c.version).where(st.c.person_id == person_id).with_for_update()
        )


def kind(name: str, category: str, *, unsuppressible: bool) -> Kind:
    return Kind(
        name=name,
        category=category,
        channels=("email",),
        templates={"email": {"en": Template(title="Hello", body="Hello {{name}}")}},
        dedupe="repeatable",
        unsuppressible=unsuppressible,
    )


# --------------------------------------------------------------------------------------------
# Reading


async def test_a_person_who_never_saved_reads_version_0_and_the_code_defaults(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-PREFAPI-1, R-SCHEMA-31, R-PREF-10, R-PREF-11, R-PREF-13: version 0, every channel and
    every category, each cell the code default; the read creates no row of any kind."""
    who = await person(engine, tenant)

    response = await client.get(URL, headers=auth(settings, tenant, who))

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["version"] == 0
    assert body["channels"] == dict.fromkeys(CHANNELS, True)
    assert [c["category"] for c in body["categories"]] == list(CATEGORIES)
    grid = cells(body)
    assert grid["announcement"] == {
        "in_app": True,
        "email": True,
        "push": True,
        "sms": False,
        "telegram": True,
        "slack": True,
        "teams": True,
        "whatsapp": True,
    }
    assert grid["transport"]["email"] is False
    assert grid["account"] == {
        "in_app": True,
        "email": True,
        "push": False,
        "sms": False,
        "telegram": False,
        # Personal: a Slack or Teams destination may be a channel others read.
        "slack": False,
        "teams": False,
        # WhatsApp follows Telegram.
        "whatsapp": False,
    }
    assert all(grid[c]["sms"] is False for c in CATEGORIES if c != "security")
    assert await stored(engine, who.id) == (None, {}, {})


async def test_a_read_needs_an_end_user_token(client: AsyncClient) -> None:
    """R-PREFAPI-11: no token, no preferences (the route is authenticated, not permission-free
    to anonymous callers)."""
    assert (await client.get(URL)).status_code == 401
    assert (await client.put(URL, json={"version": 0})).status_code == 401


# --------------------------------------------------------------------------------------------
# Saving


async def test_a_first_save_from_version_0_creates_the_set_at_version_1(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-PREFAPI-2, R-PREFAPI-8, R-PREF-2, R-PREF-8: PUT version 0 inserts the set row at 1 with
    the rows it describes, and GET reflects the four-step order; a second version-0 save finds
    the row and is a 409."""
    who = await person(engine, tenant)
    headers = auth(settings, tenant, who)

    response = await client.put(
        URL,
        headers=headers,
        json={
            "version": 0,
            "channels": {"email": False},
            "overrides": [{"category": "academic", "channel": "email", "enabled": True}],
        },
    )

    assert response.status_code == 200, response.text
    assert response.json() == {"version": 1}
    assert await stored(engine, who.id) == (1, {"email": False}, {("academic", "email"): True})
    body = (await client.get(URL, headers=headers)).json()
    assert body["version"] == 1
    assert body["channels"]["email"] is False
    assert body["channels"]["push"] is True
    grid = cells(body)
    assert grid["academic"]["email"] is True  # the override beats the global mute
    assert grid["announcement"]["email"] is False  # muted globally
    assert grid["transport"]["email"] is False
    assert grid["security"]["email"] is True  # locked

    again = await client.put(URL, headers=headers, json={"version": 0, "channels": {}})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "NOTIFICATION_PREFERENCE_VERSION_CONFLICT"
    assert await stored(engine, who.id) == (1, {"email": False}, {("academic", "email"): True})


async def test_a_stale_version_is_a_409_that_changes_nothing(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-PREFAPI-9, R-PREFAPI-10: a save from a version the set has moved past (or never reached)
    is 409 NOTIFICATION_PREFERENCE_VERSION_CONFLICT and persists none of its rows."""
    who = await person(engine, tenant)
    headers = auth(settings, tenant, who)
    first = await client.put(URL, headers=headers, json={"version": 0, "channels": {"sms": False}})
    assert first.json() == {"version": 1}
    second = await client.put(
        URL,
        headers=headers,
        json={
            "version": 1,
            "channels": {"push": False},
            "overrides": [{"category": "finance", "channel": "email", "enabled": False}],
        },
    )
    assert second.json() == {"version": 2}
    current = (2, {"push": False}, {("finance", "email"): False})
    assert await stored(engine, who.id) == current

    for version in (1, 7):
        refused = await client.put(
            URL,
            headers=headers,
            json={
                "version": version,
                "channels": {"email": False},
                "overrides": [{"category": "events", "channel": "push", "enabled": False}],
            },
        )
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "NOTIFICATION_PREFERENCE_VERSION_CONFLICT"
        assert await stored(engine, who.id) == current


async def test_a_save_replaces_the_whole_set(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-SCHEMA-34, R-PREF-14: a channel or cell left out of a save has no row afterwards, so it
    reads as its code default again."""
    who = await person(engine, tenant)
    headers = auth(settings, tenant, who)
    await client.put(
        URL,
        headers=headers,
        json={
            "version": 0,
            "channels": {"email": False},
            "overrides": [{"category": "transport", "channel": "email", "enabled": True}],
        },
    )

    response = await client.put(URL, headers=headers, json={"version": 1})

    assert response.json() == {"version": 2}
    assert await stored(engine, who.id) == (2, {}, {})
    grid = cells((await client.get(URL, headers=headers)).json())
    assert grid["transport"]["email"] is False
    assert grid["announcement"]["email"] is True


async def test_a_global_switch_is_stored_only_as_a_mute_so_echoing_get_changes_nothing(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-SCHEMA-32, R-PREF-9, R-PREF-11: GET reports every unmuted channel as true; a PUT stores a
    global row only for false, because a stored "sms: true" would switch SMS on for every
    category. Echoing GET's channels back therefore leaves every effective cell as it was."""
    who = await person(engine, tenant)
    headers = auth(settings, tenant, who)
    before = (await client.get(URL, headers=headers)).json()

    echoed = await client.put(
        URL, headers=headers, json={"version": before["version"], "channels": before["channels"]}
    )

    assert echoed.json() == {"version": 1}
    assert await stored(engine, who.id) == (1, {}, {})
    after = (await client.get(URL, headers=headers)).json()
    assert after["channels"] == before["channels"]
    assert after["categories"] == before["categories"]
    assert cells(after)["announcement"]["sms"] is False

    muted = await client.put(
        URL, headers=headers, json={"version": 1, "channels": {"sms": True, "telegram": False}}
    )
    assert muted.json() == {"version": 2}
    assert await stored(engine, who.id) == (2, {"telegram": False}, {})


async def test_cells_of_a_locked_category_are_dropped_before_saving(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-PREFAPI-6, R-SCHEMA-35, R-PREF-4: security (every kind unsuppressible) is locked; its
    cells in a save store nothing, the other cells of the same save are stored, and the locked
    category still reads all true even under a global mute."""
    who = await person(engine, tenant)
    headers = auth(settings, tenant, who)

    response = await client.put(
        URL,
        headers=headers,
        json={
            "version": 0,
            "channels": {"email": False},
            "overrides": [
                {"category": "security", "channel": "email", "enabled": False},
                {"category": "academic", "channel": "push", "enabled": False},
                {"category": "security", "channel": "sms", "enabled": False},
            ],
        },
    )

    assert response.json() == {"version": 1}
    assert await stored(engine, who.id) == (1, {"email": False}, {("academic", "push"): False})
    body = (await client.get(URL, headers=headers)).json()
    assert locked(body)["security"] is True
    assert cells(body)["security"] == dict.fromkeys(CHANNELS, True)


async def test_duplicate_cells_fold_into_one_row_and_the_last_wins(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-PREFAPI-7: one stored override per (category, channel), with the last value sent."""
    who = await person(engine, tenant)
    headers = auth(settings, tenant, who)

    response = await client.put(
        URL,
        headers=headers,
        json={
            "version": 0,
            "overrides": [
                {"category": "finance", "channel": "sms", "enabled": True},
                {"category": "events", "channel": "email", "enabled": False},
                {"category": "finance", "channel": "sms", "enabled": False},
                {"category": "events", "channel": "email", "enabled": True},
                {"category": "finance", "channel": "sms", "enabled": True},
            ],
        },
    )

    assert response.json() == {"version": 1}
    assert await stored(engine, who.id) == (
        1,
        {},
        {("finance", "sms"): True, ("events", "email"): True},
    )
    assert cells((await client.get(URL, headers=headers)).json())["finance"]["sms"] is True


@pytest.mark.parametrize(
    "body",
    [
        {"version": 0, "channels": {"fax": False}},
        {"version": 0, "overrides": [{"category": "academic", "channel": "fax", "enabled": True}]},
        {"version": 0, "overrides": [{"category": "sports", "channel": "email", "enabled": True}]},
        {
            "version": 0,
            "overrides": [{"category": "__all__", "channel": "email", "enabled": False}],
        },
    ],
)
async def test_an_unknown_channel_or_category_is_a_400_that_writes_nothing(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    body: dict[str, Any],
) -> None:
    """R-SCHEMA-33: only real channels and categories (no sentinel for "all"): 400
    NOTIFICATION_PREFERENCE_INVALID, and not even the set row is created."""
    who = await person(engine, tenant)

    response = await client.put(URL, headers=auth(settings, tenant, who), json=body)

    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "NOTIFICATION_PREFERENCE_INVALID"
    assert await stored(engine, who.id) == (None, {}, {})


@pytest.mark.parametrize(
    "body",
    [
        {"channels": {"email": False}},
        {"version": "0"},
        {"version": -1},
        {"version": 1.5},
        {"version": 0, "channels": {"email": "no"}},
        {"version": 0, "channels": ["email"]},
        {"version": 0, "overrides": [{"category": "academic", "channel": "email"}]},
        {"version": 0, "overrides": [{"category": "academic", "channel": "email", "enabled": 1}]},
        {"version": 0, "userId": "someone-else"},
        {"version": 0, "personId": 1},
    ],
)
async def test_a_malformed_body_is_a_422_that_writes_nothing(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    body: dict[str, Any],
) -> None:
    """R-PREFAPI-11: the body has no way to name whose preferences these are (an extra field is
    refused), and a body of the wrong shape is a 422 that writes nothing."""
    who = await person(engine, tenant)

    response = await client.put(URL, headers=auth(settings, tenant, who), json=body)

    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "REQUEST_MALFORMED"
    assert await stored(engine, who.id) == (None, {}, {})


async def test_reads_and_writes_are_keyed_on_the_token_person(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-PREFAPI-11: one person's save is invisible to another in the same tenant and to a person
    with the same external id in another tenant; each reads their own version."""
    alice = await person(engine, tenant, "alice")
    bob = await person(engine, tenant, "bob")
    other_tenant = f"t-{uuid.uuid4().hex[:12]}"
    alice_elsewhere = await person(engine, other_tenant, "alice")

    saved = await client.put(
        URL,
        headers=auth(settings, tenant, alice),
        json={"version": 0, "channels": {"email": False}},
    )
    assert saved.json() == {"version": 1}

    for who, where in ((bob, tenant), (alice_elsewhere, other_tenant)):
        body = (await client.get(URL, headers=auth(settings, where, who))).json()
        assert body["version"] == 0
        assert body["channels"]["email"] is True
        assert await stored(engine, who.id) == (None, {}, {})
    assert await stored(engine, alice.id) == (1, {"email": False}, {})
    # Bob's first save is his own version 0, unaffected by Alice's version 1.
    bob_saved = await client.put(URL, headers=auth(settings, tenant, bob), json={"version": 0})
    assert bob_saved.json() == {"version": 1}


# --------------------------------------------------------------------------------------------
# Locked categories come from the registry


def test_locked_categories_are_computed_from_registry_entries() -> None:
    """R-PREFAPI-4, R-PREFAPI-5: locked means every registered kind of the category is
    unsuppressible. In the sample registry security is locked and account (allowed to hold an
    unsuppressible kind, holding none) is not; a mixed category and an empty one are unlocked."""
    assert service.locked_categories(SAMPLE_REGISTRY) == frozenset({"security"})

    mixed = Registry(
        [
            kind("auth.reset", "security", unsuppressible=True),
            kind("security.digest", "security", unsuppressible=False),
            kind("account.lockout", "account", unsuppressible=True),
        ]
    )
    assert service.locked_categories(mixed) == frozenset({"account"})
    assert service.locked_categories(Registry([])) == frozenset()


async def test_the_api_reports_and_enforces_locks_from_the_running_registry(
    settings: Settings, engine: AsyncEngine, tenant: str
) -> None:
    """R-PREFAPI-4, R-PREFAPI-5, R-PREFAPI-6: with a registry whose security category mixes an
    unsuppressible and a suppressible kind and whose account category holds only an
    unsuppressible one, the API reports account locked and security not — the reverse of the
    sample registry — and drops account cells while storing security cells."""
    registry = Registry(
        [
            kind("auth.reset", "security", unsuppressible=True),
            kind("security.digest", "security", unsuppressible=False),
            kind("account.lockout", "account", unsuppressible=True),
            kind("announcement.posted", "announcement", unsuppressible=False),
        ]
    )
    who = await person(engine, tenant)
    headers = auth(settings, tenant, who)
    app = create_app(settings, engine, registry)
    async with AsyncClient(transport=ASGITransport(app=app), base_url="http://herald.test") as http:
        body = (await http.get(URL, headers=headers)).json()
        assert locked(body) == {c: c == "account" for c in CATEGORIES}
        assert cells(body)["account"] == dict.fromkeys(CHANNELS, True)
        # Unlocked, security shows its code defaults (SMS on: R-PREF-11's one exception; the
        # staff chat channels off, as security notices are personal).
        assert cells(body)["security"] == {c: c not in ("slack", "teams") for c in CHANNELS}

        saved = await http.put(
            URL,
            headers=headers,
            json={
                "version": 0,
                "overrides": [
                    {"category": "account", "channel": "email", "enabled": False},
                    {"category": "security", "channel": "email", "enabled": False},
                ],
            },
        )
        assert saved.json() == {"version": 1}
        assert await stored(engine, who.id) == (1, {}, {("security", "email"): False})
        after = (await http.get(URL, headers=headers)).json()
        assert cells(after)["security"]["email"] is False
        assert cells(after)["account"]["email"] is True


def test_the_preference_api_does_not_load_the_fan_out() -> None:
    """R-PLAT-15: importing the preference API pulls in no fan-out or delivery component."""
    probe = (
        "import sys, herald.preferences.routes, herald.preferences.service\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[:2] in "
        "(['herald', 'fanout'], ['herald', 'delivery'], ['herald', 'channels']))\n"
        "print(','.join(loaded))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == ""


# --------------------------------------------------------------------------------------------
# Concurrent saves


@pytest.mark.parametrize("start_version", [0, 1])
async def test_two_connections_saving_the_same_version_one_wins_and_nothing_mixes(
    engine: AsyncEngine, tenant: str, start_version: int
) -> None:
    """R-PREFAPI-3, R-PREFAPI-8, R-PREFAPI-9, R-PREFAPI-10: the first saver holds its transaction
    open; the second, from the same version, waits on the set row and, once the first commits,
    gets the version conflict. The stored state is exactly the winner's, none of the loser's."""
    who = await person(engine, tenant)
    me = actor(tenant, who)
    if start_version:
        async with engine.begin() as conn:
            await service.save_preferences(
                conn,
                me,
                SAMPLE_REGISTRY,
                PreferencesUpdate(
                    version=0,
                    channels={"telegram": False},
                    overrides=[
                        PreferenceOverride(category="transport", channel="sms", enabled=True)
                    ],
                ),
            )
    winner = PreferencesUpdate(
        version=start_version,
        channels={"email": False},
        overrides=[PreferenceOverride(category="academic", channel="email", enabled=True)],
    )
    loser = PreferencesUpdate(
        version=start_version,
        channels={"push": False},
        overrides=[PreferenceOverride(category="finance", channel="sms", enabled=True)],
    )
    first_saved = asyncio.Event()
    release_first = asyncio.Event()

    async def first() -> int:
        async with engine.begin() as conn:
            saved = await service.save_preferences(conn, me, SAMPLE_REGISTRY, winner)
            first_saved.set()
            await release_first.wait()
        return saved.version

    async def second() -> int:
        await first_saved.wait()
        async with engine.begin() as conn:
            saved = await service.save_preferences(conn, me, SAMPLE_REGISTRY, loser)
        return saved.version

    first_task = asyncio.create_task(first())
    second_task = asyncio.create_task(second())
    await first_saved.wait()
    # The second saver is inside its statement, blocked on the first's lock, before we commit.
    await wait_for_lock_waiters(engine, 1)
    release_first.set()
    outcomes = await asyncio.gather(first_task, second_task, return_exceptions=True)

    assert outcomes[0] == start_version + 1
    assert isinstance(outcomes[1], PreferenceVersionConflict)
    assert await stored(engine, who.id) == (
        start_version + 1,
        {"email": False},
        {("academic", "email"): True},
    )


@pytest.fixture
async def api_url(
    settings: Settings, engine: AsyncEngine, registry: Registry
) -> AsyncIterator[str]:
    """A real uvicorn server on 127.0.0.1 in this test's event loop, over the test database."""
    port = free_port()
    stop, listening = asyncio.Event(), asyncio.Event()
    server = asyncio.create_task(
        serve_api(
            create_app(settings, engine, registry),
            host="127.0.0.1",
            port=port,
            stop=stop,
            listening=listening,
            log_level="warning",
        )
    )
    ready = asyncio.create_task(listening.wait())
    await asyncio.wait({server, ready}, return_when=asyncio.FIRST_COMPLETED)
    if server.done():
        ready.cancel()
        server.result()  # raises why it did not start
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop.set()
        await server


@pytest.mark.parametrize("start_version", [0, 1])
async def test_two_devices_saving_over_http_at_once_one_gets_409_and_nothing_mixes(
    api_url: str, engine: AsyncEngine, settings: Settings, tenant: str, start_version: int
) -> None:
    """R-PREFAPI-3, R-PREFAPI-8, R-PREFAPI-9, R-PREFAPI-10: two real HTTP requests from the same
    version, on two connections, are both inside their save (waiting on a lock the test holds)
    before either can proceed; exactly one is 200, the other 409, and the stored state is the
    winner's whole set with nothing of the loser's."""
    who = await person(engine, tenant)
    headers = auth(settings, tenant, who)
    phone = {
        "version": start_version,
        "channels": {"email": False},
        "overrides": [{"category": "academic", "channel": "email", "enabled": True}],
    }
    laptop = {
        "version": start_version,
        "channels": {"push": False, "telegram": False},
        "overrides": [
            {"category": "finance", "channel": "sms", "enabled": True},
            {"category": "events", "channel": "in_app", "enabled": False},
        ],
    }
    expected = {
        "phone": ({"email": False}, {("academic", "email"): True}),
        "laptop": (
            {"push": False, "telegram": False},
            {("finance", "sms"): True, ("events", "in_app"): False},
        ),
    }
    async with httpx.AsyncClient(base_url=api_url, timeout=WAIT_LIMIT_SECONDS) as http:
        if start_version:
            first = await http.put(URL, headers=headers, json={"version": 0})
            assert first.json() == {"version": 1}

        async with engine.connect() as blocker:
            await blocker.begin()
            await hold_set_lock(blocker, tenant, who.id, start_version)
            requests = asyncio.gather(
                http.put(URL, headers=headers, json=phone),
                http.put(URL, headers=headers, json=laptop),
            )
            # Both saves are in flight at once, each waiting inside its version statement.
            await wait_for_lock_waiters(engine, 2)
            await blocker.rollback()
            phone_answer, laptop_answer = await requests

    statuses = {"phone": phone_answer.status_code, "laptop": laptop_answer.status_code}
    assert sorted(statuses.values()) == [200, 409], (phone_answer.text, laptop_answer.text)
    winner = "phone" if statuses["phone"] == 200 else "laptop"
    loser_answer = laptop_answer if winner == "phone" else phone_answer
    winner_answer = phone_answer if winner == "phone" else laptop_answer
    assert winner_answer.json() == {"version": start_version + 1}
    assert loser_answer.json()["error"]["code"] == "NOTIFICATION_PREFERENCE_VERSION_CONFLICT"
    switches, overrides = expected[winner]
    assert await stored(engine, who.id) == (start_version + 1, switches, overrides)


# --------------------------------------------------------------------------------------------
# The fan-out honours what was saved


async def test_the_fan_out_honours_a_saved_global_mute_and_category_override(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str, registry: Registry
) -> None:
    """R-PREF-1, R-PREF-2, R-PREF-8, R-PREF-9, R-PREFAPI-2: a parent mutes email globally and
    switches academic email back on through the API; the next fan-out queues the academic email,
    skips the announcement email for preference, and still delivers both in-app. A parent who
    saved nothing gets both emails."""
    muted = await person(engine, tenant, "muted-parent")
    untouched = await person(engine, tenant, "other-parent")
    saved = await client.put(
        URL,
        headers=auth(settings, tenant, muted),
        json={
            "version": 0,
            "channels": {"email": False},
            "overrides": [{"category": "academic", "channel": "email", "enabled": True}],
        },
    )
    assert saved.json() == {"version": 1}

    audience = {"kind": "users", "userIds": [muted.external_id, untouched.external_id]}
    async with engine.begin() as conn:
        assignment = await asend(
            conn,
            SendInput(
                tenant_id=tenant,
                kind="assignment.published",
                audience=audience,
                channels=["in_app", "email"],
                variables={"title": "Fractions", "subject": "Maths", "dueDate": "2026-12-04"},
            ),
            registry=registry,
        )
        announcement = await asend(
            conn,
            SendInput(
                tenant_id=tenant,
                kind="announcement.posted",
                audience=audience,
                channels=["in_app", "email"],
                variables={"title": "Sports day", "message": "Moved to Friday."},
            ),
            registry=registry,
        )
    assert assignment is not None and announcement is not None
    while await fan_out_next_event(engine, registry, batch_size=50, tenant_id=tenant):
        pass

    # Not suppressed: assignment emails wait for their digest window (held), then go.
    assert await delivery_statuses(engine, assignment.id) == {
        ("muted-parent", "email"): "held",
        ("muted-parent", "in_app"): "delivered",
        ("other-parent", "email"): "held",
        ("other-parent", "in_app"): "delivered",
    }
    assert await delivery_statuses(engine, announcement.id) == {
        ("muted-parent", "email"): "skipped_preference",
        ("muted-parent", "in_app"): "delivered",
        ("other-parent", "email"): "queued",
        ("other-parent", "in_app"): "delivered",
    }


async def delivery_statuses(
    engine: AsyncEngine, event_public_id: uuid.UUID
) -> dict[tuple[str, str], str]:
    e, r, d, p = s.notification_event, s.notification_recipient, s.notification_delivery, s.person
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(p.c.external_id, d.c.channel, d.c.status)
            .select_from(
                e.join(r, r.c.event_id == e.c.id)
                .join(d, d.c.recipient_id == r.c.id)
                .join(p, p.c.id == r.c.user_id)
            )
            .where(e.c.public_id == event_public_id)
        )
        found: dict[tuple[str, str], str] = {}
        for row in rows:
            assert (row.external_id, row.channel) not in found, "one delivery per cell"
            found[(row.external_id, row.channel)] = row.status
        return found


# --------------------------------------------------------------------------------------------
# Which cells are explicit


async def test_get_lists_the_explicit_overrides_beside_the_effective_cells(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-PREFAPI-1: GET keeps DESIGN §5.1's fields and adds `overrides`, the cells the person set
    explicitly, in PUT's shape and the matrix's order — so a client can tell an override that
    happens to equal the default from the default itself; none before a save; echoing the whole
    answer's overrides back in a PUT keeps them."""
    who = await person(engine, tenant)
    headers = auth(settings, tenant, who)
    before = (await client.get(URL, headers=headers)).json()
    assert set(before) == {"version", "channels", "categories", "overrides", "quietHours"}
    assert before["overrides"] == []

    chosen = [
        {"category": "transport", "channel": "email", "enabled": False},  # equals the default
        {"category": "announcement", "channel": "sms", "enabled": True},
        {"category": "academic", "channel": "email", "enabled": True},
    ]
    saved = await client.put(
        URL,
        headers=headers,
        json={"version": 0, "channels": {"email": False}, "overrides": chosen},
    )
    assert saved.status_code == 200, saved.text
    body = (await client.get(URL, headers=headers)).json()
    assert body["overrides"] == [
        {"category": "announcement", "channel": "sms", "enabled": True},
        {"category": "academic", "channel": "email", "enabled": True},
        {"category": "transport", "channel": "email", "enabled": False},
    ]
    assert cells(body)["announcement"]["email"] is False  # muted globally, not explicit
    echoed = await client.put(
        URL,
        headers=headers,
        json={"version": 1, "channels": {"email": False}, "overrides": body["overrides"]},
    )
    assert echoed.json() == {"version": 2}
    assert (await client.get(URL, headers=headers)).json()["overrides"] == body["overrides"]


async def test_a_locked_categorys_stored_cell_is_not_reported_explicit(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-PREF-6: a cell of a locked category has no effect, so even a row stored before the
    category became locked is not shown as an override."""
    who = await person(engine, tenant)
    async with engine.begin() as conn:
        await conn.execute(
            insert(s.notification_preference_set).values(
                tenant_id=tenant, person_id=who.id, version=1
            )
        )
        await conn.execute(
            insert(s.notification_preference).values(
                tenant_id=tenant,
                person_id=who.id,
                category="security",
                channel="sms",
                enabled=False,
            )
        )
    body = (await client.get(URL, headers=auth(settings, tenant, who))).json()
    assert body["overrides"] == []
    assert cells(body)["security"]["sms"] is True
