"""`herald api`, `herald worker` and `herald scheduler` behind a real PgBouncer in transaction
mode (tests/pgbouncer.py): without HERALD_DATABASE_SESSION_URL what needs a session refuses to
start in one line; with it, an event sent over HTTP wakes the worker by LISTEN (the poll is a
minute away), reaches the inbox through the pooler, and the API's realtime hub, listening
through the session URL, tells an open stream."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from herald.auth import service as auth
from herald.config import Settings
from herald.db.engine import libpq_url
from tests.e2e.harness import HeraldProcess, free_port, last_line, run_cli, wait_for_inbox
from tests.e2e.test_worker_process import _seed_class
from tests.pgbouncer import Bouncer, require_pgbouncer, run_pgbouncer, with_password


@pytest.fixture(scope="module")
def bouncer(server_url: str) -> Iterator[Bouncer]:
    require_pgbouncer()
    with run_pgbouncer(server_url, pool_mode="transaction", pool_size=4) as running:
        yield running


def test_behind_the_pooler_without_a_session_url_the_worker_and_api_refuse_in_one_line(
    e2e_env: dict[str, str], bouncer: Bouncer, database_url: str
) -> None:
    pooled = with_password(bouncer.url_for(database_url), "pw-9x")
    env = {**e2e_env, "HERALD_DATABASE_URL": pooled}
    for command, needs in (("worker", "presence locks"), ("api", "realtime hub's LISTEN")):
        refused = run_cli([command], env)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        lines = [line for line in refused.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, refused.stderr
        assert lines[0].startswith("error: DATABASE_SESSION_REQUIRED: ")
        assert "HERALD_DATABASE_SESSION_URL" in lines[0] and needs in lines[0]
        assert "pw-9x" not in refused.stderr
    wrong = run_cli(["worker"], {**env, "HERALD_DATABASE_SESSION_URL": pooled})
    assert wrong.returncode == 1
    assert "DATABASE_SESSION_URL_INVALID: HERALD_DATABASE_SESSION_URL (" in wrong.stderr
    assert "pw-9x" not in wrong.stderr


def _listening(database_url: str, application_name: str) -> bool:
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = %s AND query ILIKE 'LISTEN%%'",
            (application_name,),
        ).fetchone()
    return bool(row and row[0])


def _wait_for(check: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"never: {what}")


def test_with_a_session_url_an_event_wakes_the_worker_and_the_stream_through_the_pooler(
    e2e_env: dict[str, str],
    bouncer: Bouncer,
    database_url: str,
    settings: Settings,
    tenant: str,
    tmp_path: Path,
) -> None:
    env = {
        **e2e_env,
        "HERALD_DATABASE_URL": bouncer.url_for(database_url),
        "HERALD_DATABASE_SESSION_URL": database_url,
        # Only a LISTEN wake-up can bring the event in within the wait below.
        "HERALD_POLL_INTERVAL_SECONDS": "60",
    }
    created = run_cli(["keys", "create", "--tenant", tenant, "--scopes", "*"], e2e_env)
    assert created.returncode == 0, created.stderr
    key = last_line(created.stdout)
    token = auth.sign_token(settings, tenant_id=tenant, subject="g-1", role="guardian")
    port = free_port()
    api_url = f"http://127.0.0.1:{port}"
    api = HeraldProcess(["api", "--port", str(port)], env, tmp_path / "api.log")
    worker = HeraldProcess(["worker"], env, tmp_path / "worker.log")
    scheduler = HeraldProcess(["scheduler"], env, tmp_path / "scheduler.log")
    stream_lines: list[str] = []
    try:
        api.wait_until_healthy(api_url)
        with httpx.Client(
            base_url=api_url, timeout=10, headers={"Authorization": f"Bearer {key}"}
        ) as http:
            _seed_class(http)  # before the worker looks for work: nothing is waiting for it
            _wait_for(lambda: _listening(database_url, "herald-worker"), "the worker listens")
            _wait_for(lambda: _listening(database_url, "herald-realtime"), "the hub listens")

            def read_stream() -> None:
                headers = {"Authorization": f"Bearer {token}"}
                with httpx.stream(
                    "GET", f"{api_url}/v1/me/notifications/stream", headers=headers, timeout=90
                ) as answer:
                    for line in answer.iter_lines():
                        stream_lines.append(line)
                        if line.startswith("data:"):
                            return

            reader = threading.Thread(target=read_stream, daemon=True)
            reader.start()
            _wait_for(lambda: any("subscribed" in line for line in stream_lines), "subscribed")
            sent = http.post(
                "/v1/events",
                json={
                    "kind": "announcement.posted",
                    "audience": {"kind": "guardians_of_group", "groupIds": ["class-x"]},
                    "channels": ["in_app"],
                    "variables": {"title": "Behind the pooler", "message": "Still on time."},
                },
            )
            assert sent.status_code == 201, sent.text
            items = wait_for_inbox(api_url, token, timeout=30)
            assert [i["title"] for i in items] == ["Behind the pooler"]
            reader.join(timeout=30)
            assert any(line.startswith("data:") for line in stream_lines), stream_lines
            # The inbox read many more times than psycopg's five before it would prepare.
            for _ in range(12):
                answer = httpx.get(
                    f"{api_url}/v1/me/notifications",
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=10,
                )
                assert answer.status_code == 200, answer.text
    finally:
        statuses = [p.stop(signal.SIGTERM) for p in (worker, scheduler, api)]
    assert statuses == [0, 0, 0], (worker.describe(), scheduler.describe(), api.describe())
    for process in (api, worker, scheduler):
        assert "prepared statement" not in process.output(), process.describe()
