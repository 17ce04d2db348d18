"""Realtime: the publisher after commit, the hub's one listener, and the SSE stream over real HTTP.

Every stream here is read by a real HTTP client (httpx) from a uvicorn server running in this
process, while the real fan-out writes and publishes. Negative cases ("nothing arrives") are
proved by ordering, not by a clock: after the event that must not arrive, a second event that
must arrive is published over the same listener, so the first notification a stream reads is
the allowed one exactly when the forbidden one was never routed to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from herald.api.app import create_app
from herald.auth.service import Actor, sign_token
from herald.config import Settings
from herald.db.engine import libpq_url, make_async_engine, sqlalchemy_url
from herald.fanout import queries as fanout_queries
from herald.fanout.service import InAppNotice
from herald.fanout.worker import fan_out_next_event
from herald.kinds import Registry
from herald.realtime import service
from herald.realtime.hub import LISTENER_APPLICATION_NAME, PostgresSource, RealtimeHub
from herald.realtime.publisher import NotifyPublisher, RedisPublisher
from herald.realtime.service import Notice, Viewer
from herald.runtime import server
from herald.sending.service import SendInput, asend
from tests import seed
from tests.e2e.harness import free_port

# Upper bounds against hangs, never expectations.
WAIT = 15.0
STREAM_KEYS = {"recipientId", "kind", "category", "priority", "occurredAt"}


# ---------------------------------------------------------------------------------------------
# A live API and SSE clients


@dataclass
class LiveApi:
    base_url: str
    hub: RealtimeHub
    http: httpx.AsyncClient

    def stream(self, token: str) -> contextlib.AbstractAsyncContextManager[Stream]:
        return open_stream(self.http, self.base_url, token)

    async def get(self, path: str, token: str) -> httpx.Response:
        return await self.http.get(
            f"{self.base_url}{path}", headers={"Authorization": f"Bearer {token}"}
        )


@contextlib.asynccontextmanager
async def live_api(
    settings: Settings,
    engine: AsyncEngine,
    registry: Registry,
    *,
    hub: RealtimeHub | None = None,
    ping_seconds: float = 15.0,
) -> AsyncIterator[LiveApi]:
    """uvicorn serving create_app() on a free port in this loop, lifespan and all."""
    app = create_app(settings, engine, registry, realtime=hub)
    live_hub: RealtimeHub = app.state.herald.realtime
    live_hub.ping_seconds = ping_seconds
    port = free_port()
    stop, listening = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        server.serve_api(
            app, host="127.0.0.1", port=port, stop=stop, listening=listening, log_level="warning"
        )
    )
    try:
        await asyncio.wait_for(listening.wait(), WAIT)
        if live_hub.source is not None:
            await asyncio.wait_for(live_hub.listening.wait(), WAIT)
        async with httpx.AsyncClient(
            timeout=httpx.Timeout(WAIT), limits=httpx.Limits(max_connections=200)
        ) as http:
            yield LiveApi(f"http://127.0.0.1:{port}", live_hub, http)
    finally:
        # End the open streams first: uvicorn waits for in-flight responses before it stops.
        await live_hub.aclose()
        stop.set()
        await asyncio.wait_for(task, WAIT)


@dataclass
class SseItem:
    kind: str  # "comment" or the event name
    data: str


@dataclass
class Stream:
    response: httpx.Response
    items: asyncio.Queue[SseItem] = field(default_factory=asyncio.Queue)
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    async def read(self) -> None:
        event: str | None = None
        data: list[str] = []
        try:
            async for line in self.response.aiter_lines():
                if line == "":
                    if data:
                        await self.items.put(SseItem(event or "message", "\n".join(data)))
                    event, data = None, []
                elif line.startswith(":"):
                    await self.items.put(SseItem("comment", line[1:].strip()))
                elif line.startswith("event:"):
                    event = line.removeprefix("event:").strip()
                elif line.startswith("data:"):
                    data.append(line.removeprefix("data:").strip())
        finally:
            self.ended.set()

    async def next_item(self) -> SseItem:
        return await asyncio.wait_for(self.items.get(), WAIT)

    async def next_notification(self) -> dict[str, Any]:
        while True:
            item = await self.next_item()
            if item.kind == "notification":
                parsed: dict[str, Any] = json.loads(item.data)
                return parsed
            assert item.kind == "comment", item

    async def next_comment(self, prefix: str) -> str:
        while True:
            item = await self.next_item()
            assert item.kind == "comment", f"expected a comment, got {item}"
            if item.data.startswith(prefix):
                return item.data


@contextlib.asynccontextmanager
async def open_stream(http: httpx.AsyncClient, base_url: str, token: str) -> AsyncIterator[Stream]:
    """Connect, and return once the server says the stream is registered with the hub."""
    async with http.stream(
        "GET",
        f"{base_url}/v1/me/notifications/stream",
        headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"},
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        stream = Stream(response)
        reader = asyncio.create_task(stream.read())
        try:
            await stream.next_comment("subscribed")
            yield stream
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await reader


async def eventually(predicate: Callable[[], bool]) -> None:
    """Wait (up to WAIT) until `predicate` holds."""
    for _ in range(int(WAIT / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition never held")


# ---------------------------------------------------------------------------------------------
# Directory, sends and fan-out


@dataclass
class Publishes:
    """A publisher wrapper that records what the fan-out handed it."""

    inner: NotifyPublisher | RedisPublisher
    calls: list[list[InAppNotice]] = field(default_factory=list)

    async def __call__(self, notices: Sequence[InAppNotice]) -> None:
        self.calls.append(list(notices))
        await self.inner(notices)


async def send_in_app(
    engine: AsyncEngine, tenant: str, audience: dict[str, Any], title: str | None = None
) -> uuid.UUID:
    async with engine.begin() as conn:
        result = await asend(
            conn,
            SendInput(
                tenant_id=tenant,
                kind="announcement.posted",
                audience=audience,
                channels=["in_app"],
                variables={"title": title or uuid.uuid4().hex, "message": "Details inside."},
            ),
        )
    assert result is not None
    return result.id


async def fan_out_all(engine: AsyncEngine, registry: Registry, tenant: str, publish: Any) -> int:
    events = 0
    while await fan_out_next_event(
        engine, registry, batch_size=500, publish=publish, tenant_id=tenant
    ):
        events += 1
    return events


async def recipient_public_id(engine: AsyncEngine, event_id: uuid.UUID, person_id: int) -> str:
    async with engine.connect() as conn:
        found = (
            await conn.execute(
                text(
                    "SELECT r.public_id FROM notification_recipient r "
                    "JOIN notification_event e ON e.id = r.event_id "
                    "WHERE e.public_id = :event AND r.user_id = :person"
                ),
                {"event": event_id, "person": person_id},
            )
        ).scalar_one()
    return str(found)


async def listener_connections(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int(
            (
                await conn.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND application_name = :name"
                    ),
                    {"name": LISTENER_APPLICATION_NAME},
                )
            ).scalar_one()
        )


def token(settings: Settings, tenant: str, person: seed.Person, role: str | None = None) -> str:
    return sign_token(settings, tenant_id=tenant, subject=person.external_id, role=role)


# ---------------------------------------------------------------------------------------------
# End to end over HTTP


async def test_event_arrives_with_exactly_five_keys(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-REALTIME-1, R-REALTIME-5, R-REALTIME-7: after the batch commits, the recipient's open
    stream receives a `notification` event carrying only recipientId, kind, category, priority
    and occurredAt — the recipient id the centre lists, and no title or body."""
    async with engine.begin() as conn:
        ana = await seed.person(conn, tenant, "ana")
    ana_token = token(settings, tenant, ana)
    publish = Publishes(NotifyPublisher(engine))
    async with live_api(settings, engine, registry) as api, api.stream(ana_token) as stream:
        event_id = await send_in_app(engine, tenant, {"kind": "users", "userIds": ["ana"]})
        assert await fan_out_all(engine, registry, tenant, publish) == 1
        data = await stream.next_notification()
        listed = (await api.get("/v1/me/notifications", ana_token)).json()["items"]

    assert set(data) == STREAM_KEYS
    assert data["recipientId"] == await recipient_public_id(engine, event_id, ana.id)
    assert data["recipientId"] == listed[0]["id"]
    assert (data["kind"], data["category"], data["priority"]) == (
        "announcement.posted",
        "announcement",
        listed[0]["priority"],
    )
    assert datetime.fromisoformat(data["occurredAt"]) == datetime.fromisoformat(
        listed[0]["occurredAt"]
    )
    assert [len(call) for call in publish.calls] == [1]


async def test_another_persons_stream_receives_nothing(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-CENTRE-6 on the stream: an event for Ana never reaches Bo's stream. Bo's first event is
    his own, published after Ana's over the same listener, so Ana's was not routed to him."""
    async with engine.begin() as conn:
        ana = await seed.person(conn, tenant, "ana")
        bo = await seed.person(conn, tenant, "bo")
    publish = NotifyPublisher(engine)
    async with (
        live_api(settings, engine, registry) as api,
        api.stream(token(settings, tenant, ana)) as ana_stream,
        api.stream(token(settings, tenant, bo)) as bo_stream,
    ):
        for_ana = await send_in_app(engine, tenant, {"kind": "users", "userIds": ["ana"]})
        await fan_out_all(engine, registry, tenant, publish)
        for_bo = await send_in_app(engine, tenant, {"kind": "users", "userIds": ["bo"]})
        await fan_out_all(engine, registry, tenant, publish)

        ana_first = await ana_stream.next_notification()
        bo_first = await bo_stream.next_notification()
    assert ana_first["recipientId"] == await recipient_public_id(engine, for_ana, ana.id)
    assert bo_first["recipientId"] == await recipient_public_id(engine, for_bo, bo.id)


async def test_role_scoped_row_for_another_role_is_not_delivered(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-CENTRE-2, R-CENTRE-7, R-CENTRE-8 on the stream: a teacher who is also a parent, viewing
    as guardian, is not told of a staff-scoped row (nor, as teacher, of a guardian-scoped one);
    with no active role only unscoped rows arrive. Streams read in publish order, so each
    stream's events are exactly the ones its role may see."""
    async with engine.begin() as conn:
        guardian_role = await seed.role(conn, tenant, "guardian", "guardian")
        teacher_role = await seed.role(conn, tenant, "teacher", "staff")
        tara = await seed.person(conn, tenant, "tara", roles=[guardian_role, teacher_role])
    publish = NotifyPublisher(engine)
    async with (
        live_api(settings, engine, registry) as api,
        api.stream(token(settings, tenant, tara, "guardian")) as as_guardian,
        api.stream(token(settings, tenant, tara, "teacher")) as as_teacher,
        api.stream(token(settings, tenant, tara)) as no_role,
    ):
        staff = await send_in_app(engine, tenant, {"kind": "role", "roles": ["teacher"]})
        await fan_out_all(engine, registry, tenant, publish)
        family = await send_in_app(engine, tenant, {"kind": "role", "roles": ["guardian"]})
        await fan_out_all(engine, registry, tenant, publish)
        everyone = await send_in_app(engine, tenant, {"kind": "users", "userIds": ["tara"]})
        await fan_out_all(engine, registry, tenant, publish)

        guardian_seen = [await as_guardian.next_notification() for _ in range(2)]
        teacher_seen = [await as_teacher.next_notification() for _ in range(2)]
        unscoped_seen = await no_role.next_notification()

    staff_id = await recipient_public_id(engine, staff, tara.id)
    family_id = await recipient_public_id(engine, family, tara.id)
    everyone_id = await recipient_public_id(engine, everyone, tara.id)
    assert [d["recipientId"] for d in guardian_seen] == [family_id, everyone_id]
    assert [d["recipientId"] for d in teacher_seen] == [staff_id, everyone_id]
    assert unscoped_seen["recipientId"] == everyone_id


async def test_rolled_back_batch_publishes_nothing(
    settings: Settings,
    engine: AsyncEngine,
    registry: Registry,
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R-REALTIME-5: a batch whose transaction rolls back calls no publisher and nothing reaches
    the stream; the next committed batch's event is the first the stream sees."""
    async with engine.begin() as conn:
        ana = await seed.person(conn, tenant, "ana")
    publish = Publishes(NotifyPublisher(engine))

    async def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("disk full")

    async with (
        live_api(settings, engine, registry) as api,
        api.stream(token(settings, tenant, ana)) as stream,
    ):
        await send_in_app(engine, tenant, {"kind": "users", "userIds": ["ana"]})
        with monkeypatch.context() as patch:
            patch.setattr(fanout_queries, "complete_fanout", broken)
            with pytest.raises(RuntimeError, match="disk full"):
                await fan_out_next_event(
                    engine, registry, batch_size=500, publish=publish, tenant_id=tenant
                )
        assert publish.calls == []

        # The failed event stays claimed until its lease lapses; a second one goes through.
        committed = await send_in_app(engine, tenant, {"kind": "users", "userIds": ["ana"]})
        assert await fan_out_next_event(
            engine, registry, batch_size=500, publish=publish, tenant_id=tenant
        )
        first = await stream.next_notification()
    assert first["recipientId"] == await recipient_public_id(engine, committed, ana.id)
    assert len(publish.calls) == 1


async def test_keep_alive_comments(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-REALTIME-1: an idle stream sends comment keep-alives on the hub's ping interval."""
    async with engine.begin() as conn:
        ana = await seed.person(conn, tenant, "ana")
    async with (
        live_api(settings, engine, registry, ping_seconds=0.1) as api,
        api.stream(token(settings, tenant, ana)) as stream,
    ):
        assert (await stream.next_comment("ping")).startswith("ping")
        assert (await stream.next_comment("ping")).startswith("ping")


async def test_stream_requires_a_token(
    settings: Settings, engine: AsyncEngine, registry: Registry
) -> None:
    """R-CENTRE-5: the stream, like the centre, needs an authenticated end user."""
    async with live_api(settings, engine, registry) as api:
        missing = await api.http.get(f"{api.base_url}/v1/me/notifications/stream")
        forged = await api.get("/v1/me/notifications/stream", "not-a-token")
    assert missing.status_code == 401
    assert forged.status_code == 401
    assert missing.json()["error"]["code"] == forged.json()["error"]["code"]


async def test_client_disconnect_removes_the_subscription(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """A client that goes away ends its stream cleanly and leaves nothing registered."""
    async with engine.begin() as conn:
        ana = await seed.person(conn, tenant, "ana")
    async with live_api(settings, engine, registry) as api:
        async with api.stream(token(settings, tenant, ana)):
            assert api.hub.stream_count == 1
        await eventually(lambda: api.hub.stream_count == 0)
        # The hub still serves a new stream afterwards.
        async with api.stream(token(settings, tenant, ana)):
            assert api.hub.stream_count == 1


async def test_one_listener_connection_regardless_of_streams(
    settings: Settings, database_url: str, engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """DESIGN.md §1: one LISTEN connection per API process, fanned out in memory — 1 stream or
    50, the process holds one listener and its request pool holds no connection for a stream."""
    async with engine.begin() as conn:
        people = [await seed.person(conn, tenant, f"p{i}") for i in range(50)]
    api_engine = make_async_engine(database_url, pool_size=2)
    try:
        async with (
            live_api(settings, api_engine, registry) as api,
            contextlib.AsyncExitStack() as streams,
        ):
            opened = [
                await streams.enter_async_context(api.stream(token(settings, tenant, people[0])))
            ]
            assert await listener_connections(engine) == 1
            assert api_engine.pool.checkedout() == 0  # type: ignore[attr-defined]

            for person in people[1:]:
                opened.append(
                    await streams.enter_async_context(api.stream(token(settings, tenant, person)))
                )
            assert api.hub.stream_count == 50
            assert await listener_connections(engine) == 1
            assert api_engine.pool.checkedout() == 0  # type: ignore[attr-defined]

            # And every one of the 50 streams is served by that one listener.
            await send_in_app(engine, tenant, {"kind": "all_users"})
            await fan_out_all(engine, registry, tenant, NotifyPublisher(engine))
            received = [await s.next_notification() for s in opened]
        assert len({d["recipientId"] for d in received}) == 50
    finally:
        await api_engine.dispose()


async def test_streams_survive_a_listener_reconnect(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """When the listener's connection dies the hub reconnects while streams stay open, and a
    later publish reaches the same stream."""
    async with engine.begin() as conn:
        ana = await seed.person(conn, tenant, "ana")
    async with (
        live_api(settings, engine, registry) as api,
        api.stream(token(settings, tenant, ana)) as stream,
    ):
        async with engine.connect() as conn:
            killed = (
                (
                    await conn.execute(
                        text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = current_database() AND application_name = :name"
                        ),
                        {"name": LISTENER_APPLICATION_NAME},
                    )
                )
                .scalars()
                .all()
            )
        assert killed == [True]
        await eventually(lambda: not api.hub.listening.is_set())
        await asyncio.wait_for(api.hub.listening.wait(), WAIT)

        event_id = await send_in_app(engine, tenant, {"kind": "users", "userIds": ["ana"]})
        await fan_out_all(engine, registry, tenant, NotifyPublisher(engine))
        data = await stream.next_notification()
        assert not stream.ended.is_set()
    assert data["recipientId"] == await recipient_public_id(engine, event_id, ana.id)


# ---------------------------------------------------------------------------------------------
# Failures of the transport


async def test_publish_failure_is_logged_and_fan_out_completes(
    engine: AsyncEngine, registry: Registry, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    """R-REALTIME-3, R-REALTIME-6, R-REALTIME-9: with the database behind the publisher and
    Redis both unreachable, each publish logs a warning, raises nothing, and the fan-out
    completes with its rows written."""
    async with engine.begin() as conn:
        await seed.person(conn, tenant, "ana")
    dead_engine = make_async_engine("postgresql://postgres@127.0.0.1:1/nowhere", pool_size=1)
    publishers: list[NotifyPublisher | RedisPublisher] = [
        NotifyPublisher(dead_engine),
        RedisPublisher("redis://127.0.0.1:1/0"),
    ]
    try:
        for publisher in publishers:
            event_id = await send_in_app(engine, tenant, {"kind": "users", "userIds": ["ana"]})
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="herald"):
                assert await fan_out_all(engine, registry, tenant, publisher) == 1
            # The NOTIFY publisher says so itself; a Redis outage is said once, by its state.
            assert any(
                "realtime publish" in r.getMessage()
                or r.getMessage().startswith(("redis unavailable", "database unavailable"))
                for r in caplog.records
            )
            async with engine.connect() as conn:
                state = (
                    await conn.execute(
                        text(
                            "SELECT e.fanout_completed_at IS NOT NULL, count(r.id) "
                            "FROM notification_event e "
                            "LEFT JOIN notification_recipient r ON r.event_id = e.id "
                            "WHERE e.public_id = :id GROUP BY e.id"
                        ),
                        {"id": event_id},
                    )
                ).one()
            assert tuple(state) == (True, 1)
    finally:
        for publisher in publishers:
            await publisher.aclose()
        await dead_engine.dispose()


async def test_unread_count_is_right_with_the_transport_down(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-REALTIME-2, R-REALTIME-3: with no listener running and the publisher's Redis
    unreachable, a stream still opens (keep-alives only) and the unread count a reconnecting
    client refetches is right."""
    async with engine.begin() as conn:
        ana = await seed.person(conn, tenant, "ana")
    ana_token = token(settings, tenant, ana)
    publisher = RedisPublisher("redis://127.0.0.1:1/0")
    try:
        async with (
            live_api(settings, engine, registry, hub=RealtimeHub(None), ping_seconds=0.1) as api,
            api.stream(ana_token) as stream,
        ):
            for _ in range(3):
                await send_in_app(engine, tenant, {"kind": "users", "userIds": ["ana"]})
            assert await fan_out_all(engine, registry, tenant, publisher) == 3
            # The stream is alive and told nothing: what comes next is a keep-alive.
            assert (await stream.next_item()).kind == "comment"
            count = await api.get("/v1/me/notifications/unread-count", ana_token)
    finally:
        await publisher.aclose()
    assert count.status_code == 200
    assert count.json() == {"count": 3, "capped": False}


async def test_publisher_writes_no_durable_record(database_url: str, tenant: str) -> None:
    """R-REALTIME-4: the NOTIFY publisher works on a read-only session — it writes no row of
    its own — and its payload reaches a LISTEN connection."""
    read_only = create_async_engine(
        sqlalchemy_url(database_url),
        connect_args={"options": "-c default_transaction_read_only=on"},
    )
    notice = _notice(tenant_id=tenant)
    received: list[str | bytes] = []
    listening = asyncio.Event()
    listener = asyncio.create_task(
        PostgresSource(libpq_url(database_url)).run(received.append, listening.set)
    )
    try:
        await asyncio.wait_for(listening.wait(), WAIT)
        await NotifyPublisher(read_only)([notice])
        await eventually(lambda: bool(received))
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
        await read_only.dispose()
    decoded = service.decode(received[0])
    assert [n.recipient_id for n in decoded] == [str(notice.recipient_public_id)]


# ---------------------------------------------------------------------------------------------
# Redis transport


@pytest.mark.redis
async def test_redis_transport_delivers(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str, redis_url: str
) -> None:
    """R-REALTIME-1 over Redis (HERALD_REDIS_URL set): the worker's Redis publisher reaches the
    stream through the API's one Redis subscription, another person's stream gets nothing, and
    no LISTEN connection is opened."""
    async with engine.begin() as conn:
        ana = await seed.person(conn, tenant, "ana")
        bo = await seed.person(conn, tenant, "bo")
    redis_settings = settings.model_copy(update={"redis_url": redis_url})
    publisher = RedisPublisher(redis_url)
    try:
        async with (
            live_api(redis_settings, engine, registry) as api,
            api.stream(token(settings, tenant, ana)) as ana_stream,
            api.stream(token(settings, tenant, bo)) as bo_stream,
        ):
            assert await listener_connections(engine) == 0
            for_ana = await send_in_app(engine, tenant, {"kind": "users", "userIds": ["ana"]})
            await fan_out_all(engine, registry, tenant, publisher)
            for_bo = await send_in_app(engine, tenant, {"kind": "users", "userIds": ["bo"]})
            await fan_out_all(engine, registry, tenant, publisher)
            ana_first = await ana_stream.next_notification()
            bo_first = await bo_stream.next_notification()
    finally:
        await publisher.aclose()
    assert set(ana_first) == STREAM_KEYS
    assert ana_first["recipientId"] == await recipient_public_id(engine, for_ana, ana.id)
    assert bo_first["recipientId"] == await recipient_public_id(engine, for_bo, bo.id)


# ---------------------------------------------------------------------------------------------
# The hub and the wire format, without a server


def _notice(**overrides: Any) -> InAppNotice:
    values: dict[str, Any] = {
        "tenant_id": "t1",
        "person_id": 7,
        "recipient_public_id": uuid.uuid4(),
        "kind": "announcement.posted",
        "category": "announcement",
        "priority": "normal",
        "occurred_at": datetime(2026, 11, 30, 8, 0, tzinfo=UTC),
        "audience_role_id": None,
    }
    values.update(overrides)
    return InAppNotice(**values)


def test_payloads_stay_under_the_notify_limit() -> None:
    """NOTIFY payloads must stay under 8000 bytes: a 500-recipient batch is split into chunks
    that each fit, and every notice survives the round trip."""
    notices = [_notice(person_id=i, tenant_id="tenant-" + "x" * 40) for i in range(500)]
    payloads = service.encode(notices)
    assert len(payloads) > 1
    assert all(len(p.encode()) < 8000 for p in payloads)
    decoded = [n for p in payloads for n in service.decode(p)]
    assert [n.person_id for n in decoded] == list(range(500))
    assert decoded[0].occurred_at == notices[0].occurred_at


def test_malformed_payload_is_ignored() -> None:
    """A payload the hub cannot read is logged and dropped; it never breaks the listener."""
    assert service.decode("not json") == []
    assert service.decode('[{"t": "x"}]') == []


def test_hub_builds_notices_only_for_its_own_streams() -> None:
    """A hub parses only the notices of people with a stream in its process (issue 12: with
    several API processes most of a batch is for other processes' streams)."""
    payload = service.encode([_notice(person_id=n) for n in range(1, 6)])[0]
    decoded = service.decode(payload, lambda tenant, person: person in (2, 4))
    assert [n.person_id for n in decoded] == [2, 4]
    assert service.decode(payload, lambda tenant, person: False) == []
    hub = RealtimeHub(None)
    assert hub.dispatch(payload) == 0


def _actor(role_id: int | None, scope: str | None, holds: bool) -> Actor:
    return Actor(
        tenant_id="t1",
        external_id="x",
        person_id=7,
        role_code="r" if role_id else None,
        role_id=role_id,
        role_scope_kind=scope,
        holds_role=holds,
    )


def _wire(**overrides: Any) -> Notice:
    return service.decode(service.encode([_notice(**overrides)])[0])[0]


@pytest.mark.parametrize(
    ("actor", "notice_role", "visible"),
    [
        (_actor(None, None, False), None, True),  # R-CENTRE-8: unscoped only
        (_actor(None, None, False), 3, False),  # R-CENTRE-8
        (_actor(3, "guardian", True), 3, True),  # R-CENTRE-7
        (_actor(3, "guardian", True), 4, False),  # R-CENTRE-2
        (_actor(3, "guardian", False), 3, True),  # a guardian scope needs no live grant
        (_actor(4, "staff", True), 4, True),
        (_actor(4, "staff", False), 4, False),  # R-CENTRE-9: a dismissed teacher
        (_actor(4, None, True), None, True),
    ],
)
def test_viewer_applies_the_centre_predicate(
    actor: Actor, notice_role: int | None, visible: bool
) -> None:
    """R-CENTRE-2, R-CENTRE-7, R-CENTRE-8, R-CENTRE-9: the stream's filter is the centre's."""
    viewer = Viewer.of(actor)
    assert viewer.may_see(_wire(audience_role_id=notice_role)) is visible
    assert not viewer.may_see(_wire(audience_role_id=notice_role, person_id=8))
    assert not viewer.may_see(_wire(audience_role_id=notice_role, tenant_id="t2"))


async def test_slow_stream_drops_its_oldest_notice() -> None:
    """A stream that falls QUEUE_SIZE behind loses its oldest hint, never the newest, and the
    hub's memory stays bounded."""
    hub = RealtimeHub(None, queue_size=3)
    viewer = Viewer.of(_actor(None, None, False))
    with hub.subscribe(viewer) as sub:
        notices = [_notice(person_id=7) for _ in range(5)]
        for notice in notices:
            assert hub.dispatch(service.encode([notice])[0]) == 1
        received = [await sub.next() for _ in range(3)]
        assert sub.dropped == 2
    assert [n.recipient_id if n else None for n in received] == [
        str(n.recipient_public_id) for n in notices[2:]
    ]
    assert hub.stream_count == 0


async def test_closing_the_hub_ends_open_streams() -> None:
    """Closing the hub (API shutdown) ends every open stream cleanly instead of leaving it
    hanging, and a stream opened afterwards ends at once."""
    hub = RealtimeHub(None)
    viewer = Viewer.of(_actor(None, None, False))
    with hub.subscribe(viewer) as sub:
        await hub.aclose()
        assert await sub.next() is None
    with hub.subscribe(viewer) as late:
        assert await late.next() is None


# ---------------------------------------------------------------------------------------------
# Liveness while a stream is open


async def test_a_dismissed_teachers_stream_ends_within_a_keep_alive(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-CENTRE-9 while the stream is open: a teacher's stream, opened while they held the staff
    role, ends within one keep-alive interval of the role being taken from them; their stream as
    guardian, and a colleague's teacher stream, stay open through further intervals; reconnecting
    as teacher is allowed but the stream no longer sees staff rows."""
    async with engine.begin() as conn:
        teacher_role = await seed.role(conn, tenant, "teacher", "staff")
        guardian_role = await seed.role(conn, tenant, "guardian", "guardian")
        tara = await seed.person(conn, tenant, "tara", roles=[teacher_role, guardian_role])
        tom = await seed.person(conn, tenant, "tom", roles=[teacher_role])
    async with (
        live_api(settings, engine, registry, ping_seconds=0.2) as api,
        api.stream(token(settings, tenant, tara, "teacher")) as as_teacher,
        api.stream(token(settings, tenant, tara, "guardian")) as as_guardian,
        api.stream(token(settings, tenant, tom, "teacher")) as colleague,
    ):
        await as_teacher.next_comment("ping")  # open, and swept at least once while live
        async with engine.begin() as conn:
            await conn.execute(
                text("DELETE FROM person_role WHERE person_id = :p AND role_id = :r"),
                {"p": tara.id, "r": teacher_role},
            )
        await asyncio.wait_for(as_teacher.ended.wait(), WAIT)
        for stream in (as_guardian, colleague):
            for _ in range(3):  # several sweeps after the dismissal
                await stream.next_comment("ping")
            assert not stream.ended.is_set()
        assert api.hub.stream_count == 2

        async with api.stream(token(settings, tenant, tara, "teacher")) as again:
            staff = await send_in_app(engine, tenant, {"kind": "role", "roles": ["teacher"]})
            await fan_out_all(engine, registry, tenant, NotifyPublisher(engine))
            mine = await send_in_app(engine, tenant, {"kind": "users", "userIds": ["tara"]})
            await fan_out_all(engine, registry, tenant, NotifyPublisher(engine))
            first = await again.next_notification()
        assert first["recipientId"] == await recipient_public_id(engine, mine, tara.id)
        assert (await colleague.next_notification())["recipientId"] == (
            await recipient_public_id(engine, staff, tom.id)
        )


async def test_a_deleted_persons_stream_ends_within_a_keep_alive(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """A person deleted from the directory (soft or erased) loses their open stream within one
    keep-alive interval, and cannot open another (401)."""
    async with engine.begin() as conn:
        ana = await seed.person(conn, tenant, "ana")
        bo = await seed.person(conn, tenant, "bo")
    async with (
        live_api(settings, engine, registry, ping_seconds=0.2) as api,
        api.stream(token(settings, tenant, ana)) as ana_stream,
        api.stream(token(settings, tenant, bo)) as bo_stream,
    ):
        async with engine.begin() as conn:
            await conn.execute(
                text("UPDATE person SET deleted_at = now() WHERE id = :p"), {"p": ana.id}
            )
            await conn.execute(text("DELETE FROM person WHERE id = :p"), {"p": bo.id})
        await asyncio.wait_for(ana_stream.ended.wait(), WAIT)
        await asyncio.wait_for(bo_stream.ended.wait(), WAIT)
        refused = await api.get("/v1/me/notifications/stream", token(settings, tenant, ana))
        assert refused.status_code == 401
        await eventually(lambda: api.hub.stream_count == 0)


async def test_a_failing_liveness_check_keeps_streams_open() -> None:
    """A liveness check that cannot reach the database ends nothing; the next interval retries."""

    class Unreachable:
        calls = 0

        async def still_live(self, viewers: list[Viewer]) -> set[Viewer]:
            Unreachable.calls += 1
            raise ConnectionError("database unreachable")

    hub = RealtimeHub(None, ping_seconds=0.01, liveness=Unreachable())
    viewer = Viewer.of(_actor(None, None, False))
    with hub.subscribe(viewer) as sub:
        hub.start()
        await eventually(lambda: Unreachable.calls >= 3)
        hub.dispatch(service.encode([_notice(person_id=viewer.person_id)])[0])
        assert await sub.next() is not None  # still open, still served
    await hub.aclose()
