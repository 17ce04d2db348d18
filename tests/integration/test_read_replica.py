"""The inbox reads from a real streaming standby (HERALD_DATABASE_READ_URL, herald.db.replica).

A primary and its standby of their own (tests/replica_cluster.py). With the standby's replay
paused, a row written on the primary is not on the standby, so which server answered a read
shows in the answer itself:

- a person with no fence reads from the standby (the new row is missing), on the fast path and
  the FastAPI path alike;
- the person who just marked read (or read all, or saved preferences) reads from the primary
  until the standby has replayed that write — across two API processes through Redis; while
  Redis cannot say, every read goes to the primary;
- a standby lagging beyond HERALD_READ_MAX_LAG_SECONDS, or stopped, is passed over for the
  primary (never a 503), one log line each way;
- a read URL that is a primary, or another cluster, refuses start-up naming the setting without
  its password; one that cannot be reached starts on the primary.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
from httpx import ASGITransport, AsyncClient
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.api.app import create_app
from herald.auth.service import sign_token
from herald.config import Settings
from herald.db.engine import make_async_engine
from herald.db.replica import ReadRouting
from herald.errors import DatabaseReadUrlInvalid
from herald.kinds import Registry
from herald.runtime.database import Connections, plan_reads
from tests.conftest import JWT_SECRET
from tests.e2e.harness import HERALD, free_port
from tests.integration.test_centre import Seed
from tests.replica_cluster import ReplicaCluster, herald_cluster

LIST = "/v1/me/notifications"
# A repeated parameter is not the fast path's plain shape: FastAPI's route answers it.
LIST_SLOW = "/v1/me/notifications?limit=20&limit=20"
COUNT = "/v1/me/notifications/unread-count"
POLL_TIMEOUT = 30.0  # an upper bound for a state change, never an expectation


@pytest.fixture(scope="module")
def cluster() -> Iterator[ReplicaCluster]:
    with herald_cluster() as running:
        yield running


def _settings(cluster: ReplicaCluster, **update: object) -> Settings:
    values: dict[str, object] = {
        "database_url": cluster.primary_url("herald"),
        "database_read_url": cluster.standby_url("herald"),
        "jwt_secret": JWT_SECRET,
        "rate_limit_send_per_key": "off",
        "rate_limit_send_per_tenant": "off",
        "rate_limit_per_person": "off",
    }
    return Settings(**{**values, **update})  # type: ignore[arg-type]


@pytest.fixture
async def primary(cluster: ReplicaCluster) -> AsyncIterator[AsyncEngine]:
    engine = make_async_engine(cluster.primary_url("herald"), pool_size=2)
    yield engine
    await engine.dispose()


@dataclass
class Api:
    http: AsyncClient
    reads: ReadRouting
    settings: Settings

    async def get(self, path: str, person: Person) -> object:
        answer = await self.http.get(path, headers=person.headers(self.settings))
        assert answer.status_code == 200, answer.text
        return answer.json()

    async def titles(self, person: Person, path: str = LIST) -> list[str]:
        page = await self.get(path, person)
        assert isinstance(page, dict)
        return [item["title"] for item in page["items"]]

    async def unread(self, person: Person) -> int:
        count = await self.get(COUNT, person)
        assert isinstance(count, dict)
        return int(count["count"])


@dataclass
class Person:
    tenant: str
    subject: str
    id: int

    def headers(self, settings: Settings) -> dict[str, str]:
        token = sign_token(settings, tenant_id=self.tenant, subject=self.subject)
        return {"Authorization": f"Bearer {token}"}


async def _api(
    settings: Settings, primary: AsyncEngine, registry: Registry
) -> tuple[Api, AsyncClient]:
    url = settings.database_url
    assert url is not None
    reads = await plan_reads(settings, Connections(url, url, pooled=False), primary)
    app = create_app(settings, primary, registry, reads=reads)
    http = AsyncClient(transport=ASGITransport(app=app), base_url="http://herald.test")
    return Api(http, reads, settings), http


@pytest.fixture
async def api(
    cluster: ReplicaCluster, primary: AsyncEngine, registry: Registry
) -> AsyncIterator[Api]:
    built, http = await _api(_settings(cluster, read_max_lag_seconds=3600), primary, registry)
    yield built
    await http.aclose()
    await built.reads.aclose()
    assert built.reads.standby is not None
    await built.reads.standby.dispose()


async def _people(primary: AsyncEngine, *subjects: str) -> tuple[Seed, list[Person]]:
    seed = Seed(primary, f"rr-{uuid.uuid4().hex[:10]}")
    people = [Person(seed.tenant, s, await seed.person(s)) for s in subjects]
    return seed, people


async def _warm(cluster: ReplicaCluster, api: Api, *people: Person) -> None:
    """The inbox's functions created on the primary and everything seeded so far replayed."""
    for person in people:
        await api.titles(person)
    cluster.wait_caught_up()


async def test_a_person_without_a_fence_reads_from_the_standby(
    cluster: ReplicaCluster, primary: AsyncEngine, api: Api
) -> None:
    seed, (ann, bob) = await _people(primary, "ann", "bob")
    await seed.notify(ann.id, title="first")
    await seed.notify(bob.id, title="first")
    await _warm(cluster, api, ann, bob)
    cluster.pause_replay()
    try:
        await seed.notify(ann.id, title="second")
        await seed.notify(bob.id, title="second")
        # Paused: the standby has not got "second", so an answer without it is the standby's.
        assert await api.titles(ann) == ["first"]
        assert await api.titles(ann, LIST_SLOW) == ["first"]
        assert await api.unread(bob) == 1
    finally:
        cluster.resume_replay()
    cluster.wait_caught_up()
    assert await api.titles(ann) == ["second", "first"]
    assert await api.unread(bob) == 2


async def test_the_person_who_marks_read_then_reads_gets_the_primary_answer(
    cluster: ReplicaCluster, primary: AsyncEngine, api: Api
) -> None:
    seed, (ann, bob, cy) = await _people(primary, "ann", "bob", "cy")
    first = await seed.notify(ann.id, title="first")
    await seed.notify(bob.id, title="first")
    await seed.notify(cy.id, title="first")
    await _warm(cluster, api, ann, bob, cy)
    cluster.pause_replay()
    try:
        await seed.notify(ann.id, title="second")
        await seed.notify(bob.id, title="second")
        await seed.notify(cy.id, title="second")
        assert await api.titles(ann) == ["first"]  # the standby, before ann writes
        mark = await api.http.post(f"{LIST}/{first.id}/read", headers=ann.headers(api.settings))
        assert mark.status_code == 200, mark.text
        # ann's fence is past the paused standby: the primary answers, "second" and all.
        page = await api.get(LIST, ann)
        assert isinstance(page, dict)
        assert [(i["title"], i["readAt"] is not None) for i in page["items"]] == [
            ("second", False),
            ("first", True),
        ]
        assert await api.titles(ann, LIST_SLOW) == ["second", "first"]
        # read-all on the FastAPI path, then bob's count is the primary's (0), not 1.
        done = await api.http.post(f"{LIST}/read-all?x=1", headers=bob.headers(api.settings))
        assert done.status_code == 200, done.text
        assert await api.unread(bob) == 0
        # Saving preferences fences too.
        saved = await api.http.put(
            "/v1/me/preferences",
            headers=cy.headers(api.settings),
            json={"version": 0, "channels": {"sms": False}},
        )
        assert saved.status_code == 200, saved.text
        assert await api.titles(cy) == ["second", "first"]
    finally:
        cluster.resume_replay()
    cluster.wait_caught_up()


async def test_a_fence_reaches_every_api_process_through_redis(
    cluster: ReplicaCluster, primary: AsyncEngine, registry: Registry
) -> None:
    redis_url = os.environ.get("HERALD_TEST_REDIS_URL")
    if not redis_url:
        pytest.skip("HERALD_TEST_REDIS_URL is not set: fences are shared through Redis")
    settings = _settings(cluster, read_max_lag_seconds=3600, redis_url=redis_url)
    one, one_http = await _api(settings, primary, registry)
    two, two_http = await _api(settings, primary, registry)
    try:
        seed, (ann,) = await _people(primary, "ann")
        first = await seed.notify(ann.id, title="first")
        await _warm(cluster, one, ann)
        cluster.pause_replay()
        try:
            await seed.notify(ann.id, title="second")
            assert await two.titles(ann) == ["first"]
            mark = await one.http.post(f"{LIST}/{first.id}/read", headers=ann.headers(settings))
            assert mark.status_code == 200, mark.text
            assert await two.titles(ann) == ["second", "first"]  # the other process knows
        finally:
            cluster.resume_replay()
        cluster.wait_caught_up()
    finally:
        for built, http in ((one, one_http), (two, two_http)):
            await http.aclose()
            await built.reads.aclose()
            assert built.reads.standby is not None
            await built.reads.standby.dispose()


async def test_without_an_answer_from_redis_reads_go_to_the_primary(
    cluster: ReplicaCluster, primary: AsyncEngine, registry: Registry
) -> None:
    """Whether the person just wrote is unknown while Redis cannot be reached: the primary
    answers (200, fresh), never the standby."""
    settings = _settings(cluster, read_max_lag_seconds=3600)
    standby = make_async_engine(cluster.standby_url("herald"), pool_size=1, prepare=False)
    reads = ReadRouting(
        primary, standby, max_lag_seconds=3600, redis_url=f"redis://127.0.0.1:{free_port()}/0"
    )
    app = create_app(settings, primary, registry, reads=reads)
    http = AsyncClient(transport=ASGITransport(app=app), base_url="http://herald.test")
    api = Api(http, reads, settings)
    try:
        seed, (ann,) = await _people(primary, "ann")
        await seed.notify(ann.id, title="first")
        await api.titles(ann)
        cluster.wait_caught_up()
        cluster.pause_replay()
        try:
            await seed.notify(ann.id, title="second")
            assert await api.titles(ann) == ["second", "first"]
            assert await api.unread(ann) == 2
        finally:
            cluster.resume_replay()
        cluster.wait_caught_up()
    finally:
        await http.aclose()
        await reads.aclose()
        await standby.dispose()


async def _until(condition: object, api: Api, person: Person) -> None:
    deadline = time.monotonic() + POLL_TIMEOUT
    while time.monotonic() < deadline:
        await api.titles(person)
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.06)
    raise AssertionError("the read routing never changed state")


async def test_a_standby_lagging_beyond_the_limit_is_passed_over(
    cluster: ReplicaCluster,
    primary: AsyncEngine,
    registry: Registry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    api, http = await _api(_settings(cluster, read_max_lag_seconds=0.2), primary, registry)
    try:
        seed, (ann,) = await _people(primary, "ann")
        await seed.notify(ann.id, title="first")
        await _warm(cluster, api, ann)
        caplog.set_level(logging.INFO, logger="herald.db.replica")
        cluster.pause_replay()
        try:
            await seed.notify(ann.id, title="second")
            await _until(lambda: api.reads.state == "lagging", api, ann)
            assert await api.titles(ann) == ["second", "first"]  # the primary's answer
            assert await api.unread(ann) == 2
        finally:
            cluster.resume_replay()
        await _until(lambda: api.reads.state == "usable", api, ann)
    finally:
        await http.aclose()
        await api.reads.aclose()
        assert api.reads.standby is not None
        await api.reads.standby.dispose()
    lines = [r.getMessage() for r in caplog.records if r.name == "herald.db.replica"]
    assert len([line for line in lines if "HERALD_READ_MAX_LAG_SECONDS" in line]) == 1
    assert len([line for line in lines if "usable again" in line]) == 1


async def test_a_stopped_standby_leaves_reads_on_the_primary(
    cluster: ReplicaCluster,
    primary: AsyncEngine,
    api: Api,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seed, (ann,) = await _people(primary, "ann")
    await seed.notify(ann.id, title="first")
    await _warm(cluster, api, ann)
    caplog.set_level(logging.INFO, logger="herald.db.replica")
    cluster.stop_node("standby")
    try:
        await seed.notify(ann.id, title="second")
        for _ in range(3):
            assert await api.titles(ann) == ["second", "first"]
            assert await api.titles(ann, LIST_SLOW) == ["second", "first"]
            assert await api.unread(ann) == 2
        assert api.reads.state == "down"
    finally:
        cluster.start("standby")
    cluster.wait_caught_up()
    await _until(lambda: api.reads.state == "usable", api, ann)
    lines = [r.getMessage() for r in caplog.records if r.name == "herald.db.replica"]
    assert len([line for line in lines if "not usable" in line]) == 1, lines
    assert len([line for line in lines if "usable again" in line]) == 1, lines


async def test_a_read_url_that_is_no_standby_of_the_primary_refuses_start_up(
    cluster: ReplicaCluster, primary: AsyncEngine, server_url: str
) -> None:
    secret = "s3cret-pw"
    url = cluster.primary_url("herald")
    connections = Connections(url, url, pooled=False)
    the_primary = cluster.primary_url("herald").replace("postgres@", f"postgres:{secret}@")
    with pytest.raises(DatabaseReadUrlInvalid) as refused:
        await plan_reads(_settings(cluster, database_read_url=the_primary), connections, primary)
    line = refused.value.message
    assert line.startswith("HERALD_DATABASE_READ_URL (") and "reaches a primary" in line
    assert secret not in line and "postgres:***@" in line and "\n" not in line
    with pytest.raises(DatabaseReadUrlInvalid) as elsewhere:
        await plan_reads(_settings(cluster, database_read_url=server_url), connections, primary)
    assert "another PostgreSQL cluster" in elsewhere.value.message


def test_herald_api_refuses_a_primary_as_its_read_url_in_one_line(
    cluster: ReplicaCluster,
) -> None:
    """The real command: it exits before listening, saying which setting and why."""
    env = {
        **os.environ,
        "HERALD_DATABASE_URL": cluster.primary_url("herald"),
        "HERALD_DATABASE_READ_URL": cluster.primary_url("herald").replace(
            "postgres@", "postgres:s3cret-pw@"
        ),
        "HERALD_JWT_SECRET": JWT_SECRET,
    }
    env.pop("HERALD_REDIS_URL", None)
    done = subprocess.run(
        [HERALD, "api", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "DATABASE_READ_URL_INVALID: HERALD_DATABASE_READ_URL (" in done.stderr + done.stdout
    assert "s3cret-pw" not in done.stderr + done.stdout


async def test_an_unreachable_read_url_starts_on_the_primary(
    cluster: ReplicaCluster, primary: AsyncEngine, registry: Registry
) -> None:
    nowhere = f"postgresql://postgres@127.0.0.1:{free_port()}/herald"
    api, http = await _api(_settings(cluster, database_read_url=nowhere), primary, registry)
    try:
        assert api.reads.state == "unverified"
        seed, (ann,) = await _people(primary, "ann")
        await seed.notify(ann.id, title="only")
        assert await api.titles(ann) == ["only"]
        assert await api.unread(ann) == 1
        await _until(lambda: api.reads.state == "down", api, ann)  # every read a 200 meanwhile
    finally:
        await http.aclose()
        await api.reads.aclose()
        assert api.reads.standby is not None
        await api.reads.standby.dispose()


async def test_operator_history_reads_come_from_the_standby_until_the_operator_writes(
    cluster: ReplicaCluster, primary: AsyncEngine, api: Api
) -> None:
    """The events list, an event's deliveries and a person's deliveries may come from the
    standby; an operator's cancel fences that operator (not others) to the primary."""
    from herald.auth.service import create_api_key

    seed, (ann,) = await _people(primary, "ann")
    await seed.notify(ann.id, title="first")
    async with primary.begin() as conn:
        keys = [await create_api_key(conn, tenant_id=seed.tenant, scopes=["admin"]) for _ in "ab"]
    one, other = ({"Authorization": f"Bearer {key}"} for key in keys)

    async def events(headers: dict[str, str]) -> list[str]:
        answer = await api.http.get("/v1/admin/events", headers=headers)
        assert answer.status_code == 200, answer.text
        return [item["id"] for item in answer.json()["items"]]

    async def deliveries(headers: dict[str, str], event: object) -> int:
        """The event's delivery list: 404 where the event has not arrived yet."""
        answer = await api.http.get(f"/v1/admin/events/{event}/deliveries", headers=headers)
        return answer.status_code

    await events(one)
    await _warm(cluster, api, ann)
    cluster.pause_replay()
    try:
        await seed.notify(ann.id, title="second")
        async with primary.connect() as conn:
            newest = await conn.scalar(
                text(
                    "SELECT public_id FROM notification_event WHERE tenant_id = :t "
                    "ORDER BY id DESC LIMIT 1"
                ),
                {"t": seed.tenant},
            )
        # Paused: the standby has only the first event, so these answers are the standby's.
        assert len(await events(one)) == 1
        assert await deliveries(one, newest) == 404
        cancelled = await api.http.post(f"/v1/admin/events/{newest}/cancel", headers=one)
        assert cancelled.status_code == 200, cancelled.text
        # The operator who cancelled reads the primary; the other operator still the standby.
        assert len(await events(one)) == 2
        assert await deliveries(one, newest) == 200
        assert len(await events(other)) == 1
        assert await deliveries(other, newest) == 404
    finally:
        cluster.resume_replay()
    cluster.wait_caught_up()
    assert len(await events(other)) == 2
