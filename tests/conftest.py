"""Shared fixtures: a real PostgreSQL database per test session, one tenant per test.

With HERALD_TEST_DATABASE_URL set, the session creates a fresh database on that server; without
it, it starts the embedded PostgreSQL under .herald/test. Either way the database is migrated with
Alembic (the same path `herald migrate` takes) and dropped at the end.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from httpx import ASGITransport, AsyncClient
from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from herald import outages
from herald.api.app import create_app
from herald.config import Settings
from herald.db import embedded, migrate
from herald.db.engine import libpq_url, make_async_engine, make_sync_engine
from herald.kinds import Registry
from herald.kinds.sample import SAMPLE_REGISTRY

ROOT = Path(__file__).resolve().parent.parent
JWT_SECRET = "test-secret-that-is-long-enough-for-hs256"


def _server_url() -> str:
    configured = os.environ.get("HERALD_TEST_DATABASE_URL")
    if configured:
        return configured
    return embedded.start(ROOT / ".herald" / "test")


@pytest.fixture(autouse=True)
def _every_dependency_up() -> None:
    """Outage state is per process (herald.outages): each test starts with none, so a
    test that expects "… unavailable" to be said is not silenced by an earlier test's outage."""
    for dependency in outages.STATES.values():
        dependency.down_since, dependency.failures = None, 0


@pytest.fixture(scope="session")
def server_url() -> str:
    """A URL of the PostgreSQL server the tests use (any database on it)."""
    return _server_url()


def create_database(server_url: str, name: str) -> str:
    with psycopg.connect(libpq_url(server_url), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return make_url(server_url).set(database=name).render_as_string(hide_password=False)


def drop_database(server_url: str, name: str) -> None:
    with psycopg.connect(libpq_url(server_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def database_url(server_url: str) -> Iterator[str]:
    name = f"herald_test_{uuid.uuid4().hex[:10]}"
    url = create_database(server_url, name)
    migrate.upgrade(url)
    yield url
    drop_database(server_url, name)


@pytest.fixture(scope="session")
def settings(database_url: str) -> Settings:
    # Rate limits are off here: tests page and poll faster than any person would; the limits'
    # own tests (tests/integration/test_rate_limits.py) set each one they exercise.
    return Settings(
        database_url=database_url,
        jwt_secret=JWT_SECRET,
        poll_interval_seconds=0.05,
        rate_limit_send_per_key="off",
        rate_limit_send_per_tenant="off",
        rate_limit_per_person="off",
    )


@pytest.fixture(scope="session")
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    eng = make_async_engine(database_url, pool_size=5)
    yield eng
    await eng.dispose()


@pytest.fixture(scope="session")
def sync_engine(database_url: str) -> Iterator[Engine]:
    eng = make_sync_engine(database_url)
    yield eng
    eng.dispose()


@pytest.fixture(scope="session")
def registry() -> Registry:
    return SAMPLE_REGISTRY


@pytest.fixture
def tenant() -> str:
    """A tenant of this test's own: tests isolate by tenant, so they may commit freely."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def client(
    settings: Settings, engine: AsyncEngine, registry: Registry
) -> AsyncIterator[AsyncClient]:
    app = create_app(settings, engine, registry)
    async with AsyncClient(transport=ASGITransport(app=app), base_url="http://herald.test") as http:
        yield http


@pytest.fixture(scope="session")
def redis_url() -> str:
    """HERALD_TEST_REDIS_URL, or a skip that says why. Set but unreachable is a failure, not a skip:
    CI sets it and must run these tests."""
    url = os.environ.get("HERALD_TEST_REDIS_URL")
    if not url:
        pytest.skip("Redis tests skipped: HERALD_TEST_REDIS_URL is not set (CI sets it)")
    import redis

    try:
        redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.fail(f"HERALD_TEST_REDIS_URL={url} does not answer: {exc}")
    return url
