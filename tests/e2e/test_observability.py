"""Issue 14 as an operator meets it: `herald api` and `herald worker` as real processes, a real SMTP
server refusing mail. The provider-outcome counter and the email queue's oldest-age gauge rise on
the API's /metrics (the processes share a metrics directory); the request id sent with the event
is in the JSON lines of both processes; a password reset's token is in no line."""

from __future__ import annotations

import json
import re
import secrets
import signal
import time
import uuid
from pathlib import Path

import httpx

from tests.e2e.harness import START_TIMEOUT, HeraldProcess, free_port, last_line, run_cli
from tests.providers.servers import smtp_server

TOKEN = secrets.token_urlsafe(24)


def sample(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rpartition(" ")[2])
    return total


def json_lines(process: HeraldProcess) -> list[dict[str, object]]:
    """Every line the process wrote, each parsed as one JSON object (fails on any other line).

    While the process runs, its last line may be one it is still writing (CI once read `{"`):
    only lines it has ended are read then. Once it has exited, every line must be whole."""
    text = process.output()
    if process.proc.poll() is None:
        text = text[: text.rfind("\n") + 1]
    found = []
    for line in text.splitlines():
        if line.strip():
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                raise AssertionError(f"not a JSON line: {line!r}") from None
    return found


def test_failing_smtp_request_ids_and_no_token_in_logs(
    e2e_env: dict[str, str], tenant: str, tmp_path: Path
) -> None:
    created = run_cli(["keys", "create", "--tenant", tenant, "--scopes", "*"], e2e_env)
    assert created.returncode == 0, created.stderr
    key = last_line(created.stdout)
    request_id = f"obs-{uuid.uuid4().hex}"

    with smtp_server() as smtp:
        smtp.handler.refuse_rcpt = "451 4.3.0 mailbox busy, try later"
        env = {
            **e2e_env,
            "HERALD_EMAIL_PROVIDER": "smtp",
            "HERALD_SMTP_HOST": smtp.host,
            "HERALD_SMTP_PORT": str(smtp.port),
            "HERALD_SMTP_STARTTLS": "false",
            "HERALD_EMAIL_FROM": "School <school@example.com>",
        }
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        api = HeraldProcess(["api", "--port", str(port)], env, tmp_path / "api.log")
        worker = HeraldProcess(["worker"], env, tmp_path / "worker.log")
        try:
            api.wait_until_healthy(base)
            worker.wait_for_output("worker started")
            with httpx.Client(
                base_url=base, timeout=10, headers={"Authorization": f"Bearer {key}"}
            ) as http:
                person = http.put(
                    "/v1/people/g-1", json={"fullName": "Asha Rai", "email": "asha@example.com"}
                )
                assert person.status_code in (200, 201), person.text
                before = http.get("/metrics").text
                sent = http.post(
                    "/v1/events",
                    headers={"X-Request-ID": request_id},
                    json={
                        "kind": "announcement.posted",
                        "audience": {"kind": "users", "userIds": ["g-1"]},
                        "channels": ["email"],
                        "variables": {"title": "Sports day", "message": "Friday"},
                    },
                )
                assert sent.status_code == 201, sent.text
                assert sent.headers["X-Request-ID"] == request_id

                stashed = http.post(
                    "/v1/secrets", json={"type": "password_reset", "values": {"token": TOKEN}}
                )
                assert stashed.status_code == 201, stashed.text
                reset = http.post(
                    "/v1/events",
                    json={
                        "kind": "auth.password_reset",
                        "audience": {"kind": "users", "userIds": ["g-1"]},
                        "channels": ["email"],
                        "variables": {"secretRef": stashed.json()["secretRef"]},
                    },
                )
                assert reset.status_code == 201, reset.text

                calls = "herald_provider_calls_total"
                labels = {"channel": "email", "outcome": "failed_retryable"}
                deadline = time.monotonic() + START_TIMEOUT
                while True:
                    scraped = http.get("/metrics").text
                    oldest = sample(
                        scraped,
                        "herald_deliveries_oldest_age_seconds",
                        channel="email",
                        status="failed",
                    )
                    if sample(scraped, calls, **labels) >= sample(before, calls, **labels) + 2 and (
                        oldest > 0
                    ):
                        break
                    assert time.monotonic() < deadline, f"{worker.describe()}\n{scraped}"
                    time.sleep(0.3)
                assert re.search(
                    r'^herald_http_request_duration_seconds_count\{.*route="/v1/events"',
                    scraped,
                    re.M,
                )
            # The worker's line about the delivery carries the request id of the API's request.
            deadline = time.monotonic() + START_TIMEOUT
            while not any(
                line.get("request_id") == request_id and line.get("delivery_id")
                for line in json_lines(worker)
            ):
                assert time.monotonic() < deadline, worker.describe()
                time.sleep(0.2)
        finally:
            assert worker.stop(signal.SIGTERM) == 0, worker.describe()
            api.stop()

    api_lines, worker_lines = json_lines(api), json_lines(worker)
    assert any(
        line.get("request_id") == request_id and line.get("role") == "api" for line in api_lines
    )
    delivered = [line for line in worker_lines if line.get("request_id") == request_id]
    assert delivered and all(line["role"] == "worker" for line in delivered)
    assert any("failed_retryable" in str(line["message"]) for line in delivered)
    for line in api_lines + worker_lines:
        assert {"time", "level", "logger", "message", "role"} <= line.keys()
    everything = api.output() + worker.output()
    assert TOKEN not in everything
    assert "asha@example.com" not in everything
