"""CORS: the API answers the browser origins in HERALD_CORS_ORIGINS, and no others."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from httpx import ASGITransport, AsyncClient
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.api.app import create_app
from herald.config import Settings
from herald.kinds import Registry

LISTED = "https://school.example.com"
ALSO = "http://localhost:5173"
UNLISTED = "https://evil.example.net"


@pytest.fixture
async def cors_client(
    settings: Settings, engine: AsyncEngine, registry: Registry
) -> AsyncIterator[AsyncClient]:
    configured = settings.model_copy(update={"cors_origins": f"{LISTED}, {ALSO}/"})
    app = create_app(configured, engine, registry)
    async with AsyncClient(transport=ASGITransport(app=app), base_url="http://herald.test") as http:
        yield http


def _preflight(origin: str) -> dict[str, str]:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }


@pytest.mark.parametrize("origin", [LISTED, ALSO])
async def test_a_listed_origin_gets_the_headers_on_answers_and_preflights(
    cors_client: AsyncClient, origin: str
) -> None:
    # Refusals carry the headers too, so the page can read the 401 and refresh its token.
    answer = await cors_client.get("/v1/me/notifications", headers={"Origin": origin})
    assert answer.status_code == 401
    assert answer.headers["access-control-allow-origin"] == origin
    assert "access-control-allow-credentials" not in answer.headers

    preflight = await cors_client.options(
        "/v1/me/notifications/read-all", headers=_preflight(origin)
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == origin
    assert "POST" in preflight.headers["access-control-allow-methods"]
    allowed = preflight.headers["access-control-allow-headers"].lower()
    assert "authorization" in allowed and "content-type" in allowed


async def test_an_unlisted_origin_gets_no_headers_and_its_preflight_is_refused(
    cors_client: AsyncClient,
) -> None:
    answer = await cors_client.get("/v1/me/notifications", headers={"Origin": UNLISTED})
    assert "access-control-allow-origin" not in answer.headers

    preflight = await cors_client.options(
        "/v1/me/notifications/read-all", headers=_preflight(UNLISTED)
    )
    assert preflight.status_code == 400
    assert "access-control-allow-origin" not in preflight.headers


async def test_no_origin_is_answered_when_none_is_listed(client: AsyncClient) -> None:
    answer = await client.get("/v1/me/notifications", headers={"Origin": LISTED})
    assert "access-control-allow-origin" not in answer.headers
    preflight = await client.options("/v1/me/notifications/read-all", headers=_preflight(LISTED))
    assert "access-control-allow-origin" not in preflight.headers


@pytest.mark.parametrize(
    "value", ["*", "school.example.com", "https://school.example.com/app", "https://*.example.com"]
)
def test_a_value_that_is_not_an_origin_is_refused_at_start_up(value: str) -> None:
    with pytest.raises(ValidationError, match="HERALD_CORS_ORIGINS"):
        Settings(cors_origins=value)
