"""A real `herald api` with HERALD_DATABASE_READ_URL (tests/replica_cluster.py): its inbox reads
come from the standby (with replay paused, a new row is not in the answer), and the person who
marks read gets the primary's answer at once. The routing's cases are in
tests/integration/test_read_replica.py; this proves the command wires it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from herald.auth import service as auth
from herald.config import Settings
from herald.db.engine import make_async_engine
from tests.conftest import JWT_SECRET
from tests.e2e.harness import HeraldProcess, free_port, herald_env
from tests.integration.test_centre import Seed
from tests.replica_cluster import ReplicaCluster, herald_cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[ReplicaCluster]:
    with herald_cluster() as running:
        yield running


@dataclass
class ReplicaApi:
    """A `herald api` reading from the cluster's standby, and a fresh tenant on its primary."""

    url: str
    process: HeraldProcess
    seed: Seed

    def client(self, subject: str) -> httpx.AsyncClient:
        token = auth.sign_token(
            Settings(jwt_secret=JWT_SECRET), tenant_id=self.seed.tenant, subject=subject
        )
        return httpx.AsyncClient(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )


@pytest.fixture
async def replica_api(cluster: ReplicaCluster, tmp_path: Path) -> AsyncIterator[ReplicaApi]:
    env = herald_env(
        HERALD_DATABASE_URL=cluster.primary_url("herald"),
        HERALD_DATABASE_READ_URL=cluster.standby_url("herald"),
        HERALD_JWT_SECRET=JWT_SECRET,
        HERALD_DATA_DIR=str(tmp_path / "data"),
        HERALD_REDIS_URL=None,
        HERALD_READ_MAX_LAG_SECONDS="3600",
        HERALD_RATE_LIMIT_PER_PERSON="off",
    )
    engine = make_async_engine(cluster.primary_url("herald"), pool_size=1)
    port = free_port()
    api = HeraldProcess(["api", "--port", str(port)], env, tmp_path / "api.log")
    try:
        running = ReplicaApi(
            f"http://127.0.0.1:{port}", api, Seed(engine, f"rr-{uuid.uuid4().hex[:10]}")
        )
        api.wait_until_healthy(running.url)
        yield running
    finally:
        api.kill()
        await engine.dispose()


async def _titles(http: httpx.AsyncClient) -> list[str]:
    answer = await http.get("/v1/me/notifications")
    assert answer.status_code == 200, answer.text
    return [item["title"] for item in answer.json()["items"]]


async def test_herald_api_reads_the_inbox_from_the_standby_and_fences_a_writer(
    cluster: ReplicaCluster, replica_api: ReplicaApi
) -> None:
    seed = replica_api.seed
    ann = await seed.person("ann")
    first = await seed.notify(ann, title="first")
    http = replica_api.client("ann")
    assert await _titles(http) == ["first"]
    cluster.wait_caught_up()
    cluster.pause_replay()
    try:
        await seed.notify(ann, title="second")
        assert await _titles(http) == ["first"]  # the standby's answer
        marked = await http.post(f"/v1/me/notifications/{first.id}/read")
        assert marked.status_code == 200, marked.text
        assert await _titles(http) == ["second", "first"]  # the primary's
    finally:
        cluster.resume_replay()
        await http.aclose()
    api = replica_api.process
    assert api.stop() == 0, api.describe()
    assert "without HERALD_REDIS_URL" in api.output()


async def test_subscribing_to_the_stream_fences_the_person(
    cluster: ReplicaCluster, replica_api: ReplicaApi
) -> None:
    """A client refetches its inbox once its stream says `subscribed`. An item committed before
    the subscription sent its notice before the stream listened, so that refetch must include
    it: subscribing fences the person, and the refetch is the primary's while the standby has not
    replayed up to the subscription."""
    seed = replica_api.seed
    ann, bob = await seed.person("ann"), await seed.person("bob")
    await seed.notify(ann, title="first")
    await seed.notify(bob, title="first")
    ann_http, bob_http = replica_api.client("ann"), replica_api.client("bob")
    assert await _titles(ann_http) == ["first"] and await _titles(bob_http) == ["first"]
    cluster.wait_caught_up()
    cluster.pause_replay()
    try:
        await seed.notify(ann, title="second")
        await seed.notify(bob, title="second")
        assert await _titles(ann_http) == ["first"]  # the standby's answer
        async with ann_http.stream("GET", "/v1/me/notifications/stream") as stream:
            assert stream.status_code == 200
            async for line in stream.aiter_lines():
                if line.startswith(":") and "subscribed" in line:
                    break
            assert await _titles(ann_http) == ["second", "first"]  # the primary's
        assert await _titles(bob_http) == ["first"]  # bob never subscribed: the standby
    finally:
        cluster.resume_replay()
        await ann_http.aclose()
        await bob_http.aclose()
    assert replica_api.process.stop() == 0, replica_api.process.describe()
