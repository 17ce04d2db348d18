"""Each Herald process names its database connections (`herald-api`, `herald-worker`, …), so an
operator reading pg_stat_activity or the server's log can tell whose backend holds a lock or a
core; a name the operator chose — `application_name` in the URL, or PGAPPNAME — wins."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from herald.db.engine import make_async_engine, parse_database_url


async def _name_seen(url: str, application_name: str | None) -> str:
    engine = make_async_engine(url, pool_size=1, application_name=application_name)
    try:
        async with engine.connect() as conn:
            return str(await conn.scalar(text("SELECT current_setting('application_name')")))
    finally:
        await engine.dispose()


async def test_the_process_name_reaches_the_server(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGAPPNAME", raising=False)
    assert await _name_seen(database_url, "herald-worker") == "herald-worker"


async def test_a_name_in_the_url_wins(database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGAPPNAME", raising=False)
    url = (
        parse_database_url(database_url).with_param("application_name", "billing-notices").render()
    )
    assert await _name_seen(url, "herald-worker") == "billing-notices"


async def test_pgappname_wins(database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGAPPNAME", "from-the-environment")
    assert await _name_seen(database_url, "herald-api") == "from-the-environment"
