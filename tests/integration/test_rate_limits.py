"""Rate limits (R-SEC-14): a burst over a small configured limit is answered 429 RATE_LIMITED with
Retry-After, per API key and per tenant on sends, per person on /v1/me; with Redis, two API
instances share one budget. Limits are per minute here, so no test depends on how fast it runs."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from httpx import ASGITransport, AsyncClient
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.api.app import create_app
from herald.auth.service import create_api_key, sign_token
from herald.config import Settings
from herald.kinds import Registry
from herald.ratelimit import RateLimits, parse_limit
from tests import seed


def event() -> dict[str, Any]:
    """A new event each time (announcement.posted folds identical facts into one)."""
    return {
        "kind": "announcement.posted",
        "audience": {"kind": "users", "userIds": ["nobody"]},
        "channels": ["in_app"],
        "variables": {"title": uuid.uuid4().hex, "message": "m"},
    }


SECRET = {"type": "otp", "values": {"code": "123456"}}


@asynccontextmanager
async def api(
    settings: Settings, engine: AsyncEngine, registry: Registry, **update: Any
) -> AsyncIterator[AsyncClient]:
    app = create_app(settings.model_copy(update=update), engine, registry)
    try:
        async with AsyncClient(
            transport=ASGITransport(app=app), base_url="http://herald.test"
        ) as http:
            yield http
    finally:
        await app.state.herald.rate_limits.aclose()
        await app.state.herald.vault.aclose()


async def key(engine: AsyncEngine, tenant: str, *scopes: str) -> dict[str, str]:
    async with engine.begin() as conn:
        created = await create_api_key(conn, tenant_id=tenant, scopes=list(scopes))
    return {"Authorization": f"Bearer {created}"}


def assert_limited(answer: httpx.Response) -> None:
    assert answer.status_code == 429, answer.text
    assert answer.json()["error"]["code"] == "RATE_LIMITED"
    assert answer.json()["error"]["message"]
    assert 1 <= int(answer.headers["Retry-After"]) <= 60


async def test_a_burst_over_the_per_key_send_limit_is_429(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-SEC-14: with HERALD_RATE_LIMIT_SEND_PER_KEY=3/minute the fourth POST /v1/events of one
    key is 429 RATE_LIMITED with Retry-After; another key of the tenant still sends."""
    async with api(settings, engine, registry, rate_limit_send_per_key="3/minute") as http:
        first = await key(engine, tenant, "events:write")
        answers = [await http.post("/v1/events", json=event(), headers=first) for _ in range(4)]
        assert [a.status_code for a in answers[:3]] == [201, 201, 201]
        assert_limited(answers[3])
        second = await key(engine, tenant, "events:write")
        assert (await http.post("/v1/events", json=event(), headers=second)).status_code == 201


async def test_the_per_tenant_send_limit_spans_the_tenants_keys(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-SEC-14: HERALD_RATE_LIMIT_SEND_PER_TENANT counts every key of a tenant together;
    another tenant is untouched."""
    async with api(settings, engine, registry, rate_limit_send_per_tenant="4/minute") as http:
        keys = [await key(engine, tenant, "events:write") for _ in range(2)]
        statuses = [
            (await http.post("/v1/events", json=event(), headers=keys[i % 2])).status_code
            for i in range(4)
        ]
        assert statuses == [201] * 4
        assert_limited(await http.post("/v1/events", json=event(), headers=keys[0]))
        assert_limited(await http.post("/v1/events", json=event(), headers=keys[1]))
        other = await key(engine, f"{tenant}-b", "events:write")
        assert (await http.post("/v1/events", json=event(), headers=other)).status_code == 201


async def test_secrets_are_limited_apart_from_events(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-SEC-14: POST /v1/secrets has the same per-key limit, counted apart from events (a
    password reset is one stash and one send)."""
    async with api(settings, engine, registry, rate_limit_send_per_key="2/minute") as http:
        both = await key(engine, tenant, "events:write", "secrets:write")
        stashes = [await http.post("/v1/secrets", json=SECRET, headers=both) for _ in range(3)]
        assert [a.status_code for a in stashes[:2]] == [201, 201]
        assert_limited(stashes[2])
        assert (await http.post("/v1/events", json=event(), headers=both)).status_code == 201


async def test_a_burst_on_the_end_user_routes_is_429_per_person(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-SEC-14: with HERALD_RATE_LIMIT_PER_PERSON=3/minute a person's fourth /v1/me request
    (any route) is 429 with Retry-After; another person is not held back by it."""
    async with engine.begin() as conn:
        await seed.person(conn, tenant, "ana")
        await seed.person(conn, tenant, "bo")
    ana = {"Authorization": f"Bearer {sign_token(settings, tenant_id=tenant, subject='ana')}"}
    bo = {"Authorization": f"Bearer {sign_token(settings, tenant_id=tenant, subject='bo')}"}
    async with api(settings, engine, registry, rate_limit_per_person="3/minute") as http:
        answers = [
            await http.get("/v1/me/notifications", headers=ana),
            await http.get("/v1/me/notifications/unread-count", headers=ana),
            await http.get("/v1/me/preferences", headers=ana),
            await http.get("/v1/me/devices", headers=ana),
        ]
        assert [a.status_code for a in answers[:3]] == [200, 200, 200]
        assert_limited(answers[3])
        assert (await http.get("/v1/me/notifications", headers=bo)).status_code == 200


async def test_off_switches_a_limit_off(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """`off` means no limit at all."""
    async with api(
        settings,
        engine,
        registry,
        rate_limit_send_per_key="off",
        rate_limit_send_per_tenant="off",
    ) as http:
        sender = await key(engine, tenant, "events:write")
        for _ in range(5):
            assert (await http.post("/v1/events", json=event(), headers=sender)).status_code == 201


def test_a_malformed_rate_stops_the_process() -> None:
    """R-OPS-14: a rate Herald cannot read is refused at start-up, naming the variable."""
    with pytest.raises(ValidationError, match="rate_limit_send_per_key"):
        Settings(rate_limit_send_per_key="lots")
    with pytest.raises(ValidationError, match="rate_limit_per_person"):
        Settings(rate_limit_per_person="0/second")
    assert parse_limit("off") is None
    assert parse_limit("6000/minute") is not None


@pytest.mark.redis
async def test_with_redis_two_api_instances_share_one_limit(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str, redis_url: str
) -> None:
    """R-SEC-14: with HERALD_REDIS_URL the limit is one budget for every API process: two
    instances together allow 3 sends a minute for the key, not 3 each."""
    async with (
        api(
            settings, engine, registry, redis_url=redis_url, rate_limit_send_per_key="3/minute"
        ) as one,
        api(
            settings, engine, registry, redis_url=redis_url, rate_limit_send_per_key="3/minute"
        ) as two,
    ):
        sender = await key(engine, tenant, "events:write")
        statuses = [
            (await one.post("/v1/events", json=event(), headers=sender)).status_code,
            (await two.post("/v1/events", json=event(), headers=sender)).status_code,
            (await one.post("/v1/events", json=event(), headers=sender)).status_code,
        ]
        assert statuses == [201, 201, 201]
        assert_limited(await two.post("/v1/events", json=event(), headers=sender))
        assert_limited(await one.post("/v1/events", json=event(), headers=sender))


async def test_without_redis_each_process_counts_its_own() -> None:
    """R-SEC-14 (documented): without Redis the counters are per process — two limiters over
    their own memory each allow the full budget."""
    item = parse_limit("2/minute")
    assert item is not None
    one, two = RateLimits.build(None), RateLimits.build(None)
    assert not one.shared
    assert [(await one.try_hit(item, "k")).allowed for _ in range(3)] == [True, True, False]
    assert [(await two.try_hit(item, "k")).allowed for _ in range(2)] == [True, True]
