"""Per-tenant provider accounts with real processes (issue 46 item 4, "how it will be checked"):
`herald api` and `herald worker` (one per tenant) against three real SMTP servers (aiosmtpd).
Tenant A's SMTP account sends A's email through A's server; tenant B's goes through the
deployment's; a change of A's account over the API is used by the next delivery, the workers
still running."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx

from tests.e2e.harness import HeraldProcess, free_port, last_line, run_cli
from tests.providers.servers import SmtpTestServer, smtp_server

SETTLE_SECONDS = 60.0


def _send(http: httpx.Client, title: str) -> None:
    sent = http.post(
        "/v1/events",
        json={
            "kind": "announcement.posted",
            "audience": {"kind": "users", "userIds": ["g-1"]},
            "channels": ["email"],
            "variables": {"title": title, "message": "School closes at noon."},
        },
    )
    assert sent.status_code == 201, sent.text


def _wait_for(server: SmtpTestServer, count: int, *processes: HeraldProcess) -> None:
    deadline = time.monotonic() + SETTLE_SECONDS
    while len(server.handler.received) < count:
        assert time.monotonic() < deadline, "\n".join(p.describe() for p in processes)
        time.sleep(0.05)


def _recipients(server: SmtpTestServer) -> list[str]:
    return [message.rcpt_tos[0] for message in server.handler.received]


def test_each_tenant_mails_through_its_own_server_and_a_change_needs_no_restart(
    e2e_env: dict[str, str], tenant: str, tmp_path: Path
) -> None:
    a, b = f"{tenant}-a", f"{tenant}-b"
    with smtp_server() as district, smtp_server() as school_a, smtp_server() as school_a_new:
        env = {
            **e2e_env,
            "HERALD_SMTP_HOST": district.host,
            "HERALD_SMTP_PORT": str(district.port),
            "HERALD_SMTP_STARTTLS": "false",
            "HERALD_EMAIL_FROM": "District <no-reply@district.example>",
            # The tests' SMTP servers listen on 127.0.0.1.
            "HERALD_WEBHOOK_ALLOW_LOOPBACK": "true",
        }
        port = free_port()
        api = HeraldProcess(
            ["api", "--host", "127.0.0.1", "--port", str(port)], env, tmp_path / "api.log"
        )
        workers: list[HeraldProcess] = []
        try:
            api.wait_until_healthy(f"http://127.0.0.1:{port}")
            clients = {}
            for name in (a, b):
                created = run_cli(["keys", "create", "--tenant", name, "--scopes", "*"], env)
                assert created.returncode == 0, created.stderr
                clients[name] = httpx.Client(
                    base_url=f"http://127.0.0.1:{port}",
                    timeout=10,
                    headers={"Authorization": f"Bearer {last_line(created.stdout)}"},
                )
                person = clients[name].put(
                    "/v1/people/g-1", json={"fullName": "Asha Rai", "email": f"asha@{name}.np"}
                )
                assert person.status_code in (200, 201), person.text

            def point_a_at(server: SmtpTestServer) -> None:
                answer = clients[a].put(
                    "/v1/admin/providers/smtp",
                    json={
                        "settings": {
                            "host": server.host,
                            "port": server.port,
                            "starttls": False,
                            "from": "School A <office@school-a.np>",
                        }
                    },
                )
                assert answer.status_code == 200, answer.text

            point_a_at(school_a)
            workers = [
                HeraldProcess(["worker", "--tenant", name], env, tmp_path / f"worker-{name}.log")
                for name in (a, b)
            ]
            _send(clients[a], "For school A")
            _send(clients[b], "For school B")
            _wait_for(school_a, 1, *workers)
            _wait_for(district, 1, *workers)
            assert _recipients(school_a) == [f"asha@{a}.np"]
            assert _recipients(district) == [f"asha@{b}.np"]

            # A's account changes; the workers keep running.
            point_a_at(school_a_new)
            _send(clients[a], "For school A, again")
            _wait_for(school_a_new, 1, *workers)
            assert _recipients(school_a_new) == [f"asha@{a}.np"]
            assert len(school_a.handler.received) == 1 and len(district.handler.received) == 1
            for client in clients.values():
                client.close()
        finally:
            statuses = [worker.stop(signal.SIGTERM) for worker in workers]
            api.stop()
    assert statuses == [0, 0], "\n".join(w.describe() for w in workers)
