"""The published contract, fuzzed: schemathesis over /openapi.json against a real `herald api`.

A real `herald api` and `herald worker` run on the test database with the demo school loaded;
schemathesis runs every default check (server errors, status codes, response schemas, positive
and negative data, missing headers, unsupported methods and their Allow header, authentication,
stateful links) over every operation but the SSE stream, once with an all-scope API key and once
with a guardian's JWT, with a bounded number of cases per operation. `schemathesis.toml` at the
repository root names the few operations whose rules JSON Schema cannot state.

It takes a few minutes, so it runs where HERALD_TEST_CONTRACT is set: CI sets it for its second
`make test` only. HERALD_TEST_CONTRACT_EXAMPLES sets the cases per operation (default 20).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from herald.db.engine import libpq_url
from herald.demo.school import DEMO_GUARDIAN, TENANT
from tests.e2e.harness import HeraldProcess, free_port, last_line, run_cli

pytestmark = pytest.mark.skipif(
    not os.environ.get("HERALD_TEST_CONTRACT"),
    reason="the schemathesis campaign runs where HERALD_TEST_CONTRACT is set (CI's second run)",
)

ROOT = Path(__file__).resolve().parents[2]
SCHEMATHESIS = str(Path(sys.executable).with_name("st"))
EXAMPLES = int(os.environ.get("HERALD_TEST_CONTRACT_EXAMPLES", "20"))
# The live stream never ends by itself; its contract is tested in tests/integration.
EXCLUDED_PATH = "/v1/me/notifications/stream"
RUN_TIMEOUT = 900


@dataclass(frozen=True)
class Campaign:
    label: str
    returncode: int
    summary: str
    output: str


def _schemathesis(base_url: str, label: str, credential: str, workdir: Path) -> Campaign:
    workdir.mkdir(parents=True, exist_ok=True)
    completed = subprocess.run(
        [
            SCHEMATHESIS,
            "--config-file",
            str(ROOT / "schemathesis.toml"),
            "--no-color",
            "run",
            f"{base_url}/openapi.json",
            "--header",
            f"Authorization: Bearer {credential}",
            "--max-examples",
            str(EXAMPLES),
            "--exclude-path",
            EXCLUDED_PATH,
            # One worker: with two threads, CPython 3.11.7's ast.parse (which hypothesis calls to
            # describe a strategy) can fail with "AST constructor recursion depth mismatch"
            # (CPython gh-106905), a runtime error of the fuzzer, not a finding.
            "--workers",
            "1",
            "--generation-database",
            "none",
            "--seed",
            "17",
        ],
        # Its working folder collects hypothesis' and schemathesis' own files; not the repository.
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    output = completed.stdout + completed.stderr
    summary = " / ".join(
        line.strip()
        for line in output.splitlines()
        if re.search(r"generated|passed|failures?|errors?|Selected|Tested", line)
        and not line.startswith(" " * 4)
    )
    (workdir / "schemathesis.txt").write_text(output)
    return Campaign(label, completed.returncode, summary, output)


def _count(database_url: str, table: str) -> int:
    with psycopg.connect(libpq_url(database_url)) as conn:
        row = conn.execute(
            f"SELECT count(*) FROM {table} WHERE tenant_id = %s",  # a fixed table name
            (TENANT,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_schemathesis_finds_nothing_to_report(
    e2e_env: dict[str, str],
    database_url: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """Every default schemathesis check passes over the whole OpenAPI, with an API key and with a
    guardian's JWT: no 5xx, no response outside the published schema or statuses, no traceback
    in the API's log; and the fuzzer gets POST /v1/events through to a recorded event."""
    assert run_cli(["demo", "load"], e2e_env).returncode == 0
    created_key = run_cli(["keys", "create", "--tenant", TENANT, "--scopes", "*"], e2e_env)
    assert created_key.returncode == 0, created_key.stderr
    signed = run_cli(["token", "--tenant", TENANT, "--sub", DEMO_GUARDIAN], e2e_env)
    assert signed.returncode == 0, signed.stderr
    credentials = {
        "API key": last_line(created_key.stdout),
        "guardian JWT": last_line(signed.stdout),
    }
    events_before = _count(database_url, "notification_event")

    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    # The fuzzer sends thousands of requests a minute as one person and one key: far over the
    # rate limits, which would answer 429 (declared, but not what this campaign is about).
    unlimited = {
        **e2e_env,
        "HERALD_RATE_LIMIT_SEND_PER_KEY": "off",
        "HERALD_RATE_LIMIT_SEND_PER_TENANT": "off",
        "HERALD_RATE_LIMIT_PER_PERSON": "off",
        # Every feature on, so the fuzzer reaches reminders and broadcasts, not their 404.
        "HERALD_FEATURE_REMINDERS": "true",
        "HERALD_FEATURE_BROADCASTS": "true",
    }
    api = HeraldProcess(
        ["api", "--host", "127.0.0.1", "--port", str(port)], unlimited, tmp_path / "api.log"
    )
    worker = HeraldProcess(["worker"], e2e_env, tmp_path / "worker.log")
    try:
        api.wait_until_healthy(base_url)
        campaigns = [
            _schemathesis(base_url, label, credential, tmp_path / f"run-{index}")
            for index, (label, credential) in enumerate(credentials.items())
        ]
    finally:
        api.stop()
        worker.stop()

    events = _count(database_url, "notification_event") - events_before
    deliveries = _count(database_url, "notification_delivery")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"schemathesis, {EXAMPLES} cases per operation:"]
    lines += [f"  {c.label}: exit {c.returncode}; {c.summary}" for c in campaigns]
    lines.append(f"  events the fuzzer created: {events} ({deliveries} deliveries fanned out)")
    if reporter is not None:
        reporter.write_line("\n".join(lines))

    for campaign in campaigns:
        tail = "\n".join(campaign.output.splitlines()[-120:])
        assert campaign.returncode == 0, f"schemathesis ({campaign.label}) failed:\n{tail}"
    assert "Traceback" not in api.output(), api.describe()
    assert events > 0, "the fuzzer never got an event recorded through POST /v1/events"
