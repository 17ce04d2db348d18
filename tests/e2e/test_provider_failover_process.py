"""Provider failover with real processes (issue 45 item 4, "how it will be checked"): `herald api`
and `herald worker` with HERALD_EMAIL_PROVIDERS=smtp,smtp_backup and two real SMTP servers
(aiosmtpd). The first refuses connections (nothing listens on its port): mail goes through the
second, and the operator's trace over HTTP names it. Then the first comes back on its port: once
its circuit lets the probe through, mail goes through the first again."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.harness import HeraldProcess, last_line, run_cli
from tests.providers.servers import SmtpTestServer, smtp_free_port, smtp_server

SETTLE_SECONDS = 60.0


def _send(http: httpx.Client, title: str) -> str:
    sent = http.post(
        "/v1/events",
        json={
            "kind": "announcement.posted",
            "audience": {"kind": "all_users"},
            "channels": ["email"],
            "variables": {"title": title, "message": "School closes at noon."},
        },
    )
    assert sent.status_code == 201, sent.text
    event_id: str = sent.json()["id"]
    return event_id


def _wait_for_mail(servers: list[SmtpTestServer], count: int, worker: HeraldProcess) -> None:
    deadline = time.monotonic() + SETTLE_SECONDS
    while sum(len(s.handler.received) for s in servers) < count:
        assert time.monotonic() < deadline, worker.describe()
        time.sleep(0.05)


def _email_attempts(http: httpx.Client, event_id: str) -> list[dict[str, Any]]:
    answer = http.get(f"/v1/admin/events/{event_id}/recipients/g-1")
    assert answer.status_code == 200, answer.text
    (email,) = [d for d in answer.json()["deliveries"] if d["channel"] == "email"]
    attempts: list[dict[str, Any]] = email["attempts"]
    return attempts


def test_mail_goes_through_the_second_server_while_the_first_refuses_and_back_once_it_recovers(
    api_url: str, e2e_env: dict[str, str], tenant: str, tmp_path: Path
) -> None:
    created = run_cli(["keys", "create", "--tenant", tenant, "--scopes", "*"], e2e_env)
    assert created.returncode == 0, created.stderr
    key = last_line(created.stdout)
    first_port = smtp_free_port()
    with (
        smtp_server() as second,
        httpx.Client(
            base_url=api_url, timeout=10, headers={"Authorization": f"Bearer {key}"}
        ) as http,
    ):
        person = http.put(
            "/v1/people/g-1", json={"fullName": "Asha Rai", "email": "asha@example.com"}
        )
        assert person.status_code in (200, 201), person.text
        env = {
            **e2e_env,
            "HERALD_EMAIL_PROVIDERS": "smtp,smtp_backup",
            "HERALD_SMTP_HOST": "127.0.0.1",
            "HERALD_SMTP_PORT": str(first_port),
            "HERALD_SMTP_STARTTLS": "false",
            "HERALD_SMTP_BACKUP_HOST": second.host,
            "HERALD_SMTP_BACKUP_PORT": str(second.port),
            "HERALD_SMTP_BACKUP_STARTTLS": "false",
            "HERALD_EMAIL_FROM": "School <school@example.com>",
            "HERALD_PROVIDER_CIRCUIT_FAILURES": "1",
            "HERALD_PROVIDER_CIRCUIT_COOLDOWN_SECONDS": "1",
        }
        worker = HeraldProcess(["worker", "--tenant", tenant], env, tmp_path / "worker.log")
        try:
            event_id = _send(http, "Refused first")
            _wait_for_mail([second], 1, worker)
            assert second.handler.received[0].rcpt_tos == ["asha@example.com"]
            (attempt,) = _email_attempts(http, event_id)
            assert attempt["outcome"] == "sent" and attempt["provider"] == "smtp_backup"
            assert attempt["passedOver"] == [{"provider": "smtp", "reason": "EMAIL_TRANSPORT"}]

            with smtp_server(port=first_port) as first:
                # The first server is back. Until its circuit's cooldown has passed, sends still
                # go to the second; the first send after it is the probe, and it lands here.
                sent = 1
                while not first.handler.received:
                    event_id = _send(http, f"Recovered {sent}")
                    sent += 1
                    _wait_for_mail([first, second], sent, worker)
                    assert sent < 200, "the first server never got a send back"
                (attempt,) = _email_attempts(http, event_id)
                assert attempt["provider"] == "smtp" and attempt["passedOver"] == []
                # Closed again: the next one goes straight to the first.
                event_id = _send(http, "After recovery")
                _wait_for_mail([first, second], sent + 1, worker)
                assert len(first.handler.received) == 2
                (attempt,) = _email_attempts(http, event_id)
                assert attempt["provider"] == "smtp"
            # Every event reached exactly one server, once.
            assert len(second.handler.received) + 2 == sent + 1
        finally:
            exit_status = worker.stop(signal.SIGTERM)
    assert exit_status == 0, worker.describe()
