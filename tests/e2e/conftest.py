"""Fixtures that run `herald` as real processes against the session's test database, and the
browser that drives its pages."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import JWT_SECRET
from tests.e2e.failover_cluster import FailoverCluster, unavailable_reason
from tests.e2e.harness import HeraldProcess, Tab, free_port, herald_env, launch_browser, open_tab
from tests.gates import require

if TYPE_CHECKING:
    from playwright.sync_api import Browser


@pytest.fixture(scope="session")
def e2e_env(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """What every herald process in these tests sees: the test database and the test secret.

    HERALD_DATA_DIR is an empty folder of its own, so nothing from a developer's `herald dev`
    (its dev.json, its embedded database) leaks in.
    """
    return herald_env(
        HERALD_DATABASE_URL=database_url,
        HERALD_JWT_SECRET=JWT_SECRET,
        HERALD_DATA_DIR=str(tmp_path_factory.mktemp("herald-data")),
        HERALD_POLL_INTERVAL_SECONDS="0.2",
    )


@pytest.fixture(scope="module")
def api_url(e2e_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`herald api` on a free port, answering /healthz; stopped (SIGTERM, then kill) afterwards."""
    port = free_port()
    log: Path = tmp_path_factory.mktemp("api") / "api.log"
    process = HeraldProcess(["api", "--host", "127.0.0.1", "--port", str(port)], e2e_env, log)
    base_url = f"http://127.0.0.1:{port}"
    try:
        process.wait_until_healthy(base_url)
        yield base_url
    finally:
        process.stop()


@pytest.fixture(scope="module")
def failover_cluster() -> Iterator[FailoverCluster]:
    """A pg_auto_failover monitor, primary and secondary on free localhost ports, removed after
    the module. HERALD_TEST_FAILOVER: unset runs it where pg_autoctl is installed and skips with
    the reason elsewhere; `required` (CI) fails instead of skipping; `off` skips."""
    wanted = os.environ.get("HERALD_TEST_FAILOVER", "")
    if wanted == "off":
        pytest.skip("failover tests skipped: HERALD_TEST_FAILOVER=off")
    require("HERALD_TEST_FAILOVER", unavailable_reason(), skipped="failover tests skipped: ")
    with FailoverCluster.create() as cluster:
        yield cluster


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium under Playwright; every browser test goes through this fixture, so
    without a browser they skip (or, in CI, fail) with the reason."""
    with launch_browser() as launched:
        yield launched


@pytest.fixture
def tab(browser: Browser) -> Iterator[Tab]:
    """A page of its own for one test, 1280 × 900; its console errors fail the test (`evidence`)."""
    with open_tab(browser, 1280, 900) as opened:
        yield opened
