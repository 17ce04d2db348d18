"""Herald behind a real PgBouncer in transaction mode (tests/pgbouncer.py).

- The start-up probe tells a transaction pooler from PostgreSQL itself (and from PgBouncer in
  session mode, which keeps sessions) by what the server answers, not by the URL.
- Behind a transaction pooler, a process that needs a session refuses to start without
  HERALD_DATABASE_SESSION_URL, and refuses a session URL that is itself such a pooler or reaches
  another database, in one line that names the setting and shows no password.
- Two tenants interleaved through ONE pooled server connection (default_pool_size = 1), many
  transactions each, the same statements far more than psycopg's five runs before it would
  prepare them: row-level security never shows one tenant's rows to the other, no prepared
  statement clashes, and no session-level setting is left on the server connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from httpx import ASGITransport, AsyncClient
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.api.app import create_app
from herald.auth.service import sign_token
from herald.config import Settings
from herald.db import pooler, tenancy
from herald.db import schema as s
from herald.db.engine import make_async_engine, with_database
from herald.errors import DatabaseSessionRequired, DatabaseSessionUrlInvalid
from herald.kinds import Registry
from herald.runtime.database import plan_connections
from tests.integration.test_centre import Seed
from tests.pgbouncer import Bouncer, require_pgbouncer, run_pgbouncer
from tests.pgbouncer import with_password as pgbouncer_with_password

ROUNDS = 12  # more than psycopg's prepare_threshold (5) runs of every statement


@pytest.fixture(scope="module")
def bouncer(server_url: str) -> Iterator[Bouncer]:
    """PgBouncer in transaction mode with ONE server connection per (database, user)."""
    require_pgbouncer()
    with run_pgbouncer(server_url, pool_mode="transaction", pool_size=1) as running:
        yield running


@pytest.fixture
def pooled_url(bouncer: Bouncer, database_url: str) -> str:
    return bouncer.url_for(database_url)


@pytest.fixture
async def pooled_engine(pooled_url: str) -> AsyncIterator[AsyncEngine]:
    """Herald's engine through PgBouncer, as `herald api` builds it there: no prepared statements;
    up to two client connections, which PgBouncer serves on its one server connection."""
    engine = make_async_engine(pooled_url, pool_size=1, prepare=False)
    yield engine
    await engine.dispose()


async def test_the_probe_tells_a_transaction_pooler_from_postgresql(
    server_url: str, database_url: str, pooled_url: str
) -> None:
    direct = await pooler.probe(database_url)
    pooled = await pooler.probe(pooled_url)
    assert direct.shares_sessions is False
    assert pooled.shares_sessions is True
    assert pooled.server == direct.server  # the same database, either way
    with run_pgbouncer(server_url, pool_mode="session", pool_size=2) as session_mode:
        kept = await pooler.probe(session_mode.url_for(database_url))
    assert kept.shares_sessions is False  # session mode keeps each client on its own backend


async def test_behind_a_transaction_pooler_what_needs_a_session_refuses_to_start(
    settings: Settings, bouncer: Bouncer, database_url: str
) -> None:
    secret = "s3cret-pw"
    with_password = pgbouncer_with_password(bouncer.url_for(database_url), secret)
    pooled = settings.model_copy(update={"database_url": with_password, "redis_url": None})
    with pytest.raises(DatabaseSessionRequired) as worker:
        await plan_connections(pooled, "worker")
    line = worker.value.message
    assert "HERALD_DATABASE_SESSION_URL" in line
    assert "LISTEN wake-up" in line and "presence locks" in line
    assert secret not in line and "postgres:***@" in line
    assert "\n" not in line
    with pytest.raises(DatabaseSessionRequired) as api:
        await plan_connections(pooled, "api")
    assert "realtime hub's LISTEN" in api.value.message
    # What needs no session starts behind the pooler, and its engine prepares nothing.
    scheduler = await plan_connections(pooled, "scheduler")
    assert (scheduler.pooled, scheduler.session_url) == (True, with_password)
    with_redis = pooled.model_copy(update={"redis_url": "redis://127.0.0.1:6379/0"})
    assert (await plan_connections(with_redis, "api")).pooled is True
    # With a session URL straight to PostgreSQL, the worker starts.
    split = pooled.model_copy(update={"database_session_url": database_url})
    planned = await plan_connections(split, "worker")
    assert (planned.url, planned.session_url, planned.pooled) == (
        with_password,
        database_url,
        True,
    )
    # Direct, nothing changes.
    assert (await plan_connections(settings, "worker")).pooled is False


async def test_a_session_url_through_a_pooler_or_to_another_database_is_refused(
    settings: Settings, bouncer: Bouncer, database_url: str, server_url: str
) -> None:
    pooled_url = bouncer.url_for(database_url)
    through_pooler = settings.model_copy(
        update={"database_url": pooled_url, "database_session_url": pooled_url}
    )
    with pytest.raises(DatabaseSessionUrlInvalid) as refused:
        await plan_connections(through_pooler, "worker")
    assert refused.value.message.startswith("HERALD_DATABASE_SESSION_URL (")
    assert "shares server connections" in refused.value.message
    elsewhere = settings.model_copy(
        update={"database_session_url": with_database(server_url, "postgres")}
    )
    with pytest.raises(DatabaseSessionUrlInvalid) as wrong:
        await plan_connections(elsewhere, "worker")
    assert "'postgres'" in wrong.value.message and "same database" in wrong.value.message


def _unique() -> str:
    import uuid

    return uuid.uuid4().hex[:10]


async def test_two_tenants_interleaved_through_one_server_connection_never_meet(
    engine: AsyncEngine, pooled_engine: AsyncEngine, bouncer: Bouncer, database_url: str
) -> None:
    """Two client connections held open at once, taking turns, one transaction each turn, under
    SET LOCAL ROLE herald_app and each its own tenant: every turn sees its own tenant's people
    only, on the one server connection PgBouncer has."""
    tenants = {"pgb-a-" + _unique(): ["a-1", "a-2"], "pgb-b-" + _unique(): ["b-1"]}
    for tenant, people in tenants.items():
        for external_id in people:
            await Seed(engine, tenant).person(external_id)
    read = select(s.person.c.external_id).order_by(s.person.c.external_id)
    backends: set[int] = set()
    async with pooled_engine.connect() as first, pooled_engine.connect() as second:
        pairs = list(zip((first, second), tenants.items(), strict=True))
        for _ in range(ROUNDS):
            for conn, (tenant, people) in pairs:
                async with conn.begin():
                    await tenancy.enter_tenant(conn, tenant, generic_plans=True)
                    seen = (await conn.execute(read)).scalars().all()
                    backends.add((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())
                assert seen == people  # RLS: never the other tenant's rows
    assert len(backends) == 1  # one server connection served both clients, turn by turn
    await _assert_nothing_left(bouncer.url_for(database_url), backends.pop())


async def test_the_inbox_of_two_tenants_through_one_server_connection(
    engine: AsyncEngine,
    pooled_engine: AsyncEngine,
    settings: Settings,
    registry: Registry,
    bouncer: Bouncer,
    database_url: str,
) -> None:
    """The end user's inbox (its compiled statements on psycopg's cursor, its SET LOCAL planner
    settings) read by two tenants' people in turn through the pooler, many times over."""
    people: dict[str, tuple[Seed, int, str]] = {}
    for label in ("a", "b"):
        seed = Seed(engine, f"pgb-{label}-{_unique()}")
        person_id = await seed.person(f"{label}-1")
        await seed.notify(person_id, title=f"for {label} only")
        people[label] = (seed, person_id, f"{label}-1")
    app = create_app(settings, pooled_engine, registry)
    async with AsyncClient(transport=ASGITransport(app=app), base_url="http://herald.test") as http:
        for _ in range(ROUNDS):
            for label, (seed, _person, subject) in people.items():
                token = sign_token(settings, tenant_id=seed.tenant, subject=subject)
                headers = {"Authorization": f"Bearer {token}"}
                answer = await http.get("/v1/me/notifications", headers=headers)
                assert answer.status_code == 200, answer.text
                assert [i["title"] for i in answer.json()["items"]] == [f"for {label} only"]
                count = await http.get("/v1/me/notifications/unread-count", headers=headers)
                assert count.status_code == 200, count.text
    async with pooled_engine.connect() as conn:
        backend = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        await conn.rollback()
    await _assert_nothing_left(bouncer.url_for(database_url), backend)


async def test_an_engine_that_prepares_clashes_behind_the_pooler(
    pooled_url: str, engine: AsyncEngine
) -> None:
    """The control: psycopg's own default (prepare after five runs) through the same PgBouncer
    fails as soon as the second client prepares its first statement, which is why Herald's
    engines there prepare nothing."""
    preparing = make_async_engine(pooled_url, pool_size=1)
    try:
        async with preparing.connect() as first, preparing.connect() as second:
            with pytest.raises(DBAPIError) as clash:
                for _ in range(ROUNDS):
                    for conn in (first, second):
                        async with conn.begin():
                            await conn.execute(text("SELECT count(*) FROM person"))
        assert isinstance(
            clash.value.orig,
            psycopg.errors.DuplicatePreparedStatement | psycopg.errors.InvalidSqlStatementName,
        )
    finally:
        await preparing.dispose()


async def _assert_nothing_left(pooled_url: str, backend: int) -> None:
    """A new client of the pooler, outside any transaction, on the same server connection: no
    tenant, no role, the planner's defaults, no prepared statement."""
    async with await psycopg.AsyncConnection.connect(
        pooled_url, autocommit=True, prepare_threshold=None
    ) as conn:
        row = await (
            await conn.execute(
                "SELECT pg_backend_pid(), current_setting('herald.tenant_id', true), "
                "current_user = session_user, current_setting('plan_cache_mode'), "
                "current_setting('enable_bitmapscan'), current_setting('enable_sort'), "
                "(SELECT count(*) FROM pg_prepared_statements)"
            )
        ).fetchone()
    assert row is not None
    pid, tenant, own_role, plan_cache_mode, bitmapscan, sort, prepared = row
    assert pid == backend  # the very server connection the tenants shared
    assert tenant in (None, "")
    assert own_role is True
    assert (plan_cache_mode, bitmapscan, sort) == ("auto", "on", "on")
    assert prepared == 0
