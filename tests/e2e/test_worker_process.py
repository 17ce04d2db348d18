"""`herald api` and `herald worker` as two processes: an event sent over HTTP reaches the inbox."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx

from herald.auth import service as auth
from herald.config import Settings
from tests.e2e.harness import HeraldProcess, last_line, run_cli, wait_for_inbox


def _seed_class(http: httpx.Client) -> None:
    """A class with one student and the student's guardian, written over the directory API."""
    for code, scope in (("guardian", "guardian"), ("student", "student")):
        assert http.put(f"/v1/roles/{code}", json={"scopeKind": scope}).status_code in (200, 201)
    people = {"s-1": ("Bina Rai", "student"), "g-1": ("Hari Rai", "guardian")}
    for external_id, (name, role) in people.items():
        answer = http.put(f"/v1/people/{external_id}", json={"fullName": name, "roles": [role]})
        assert answer.status_code in (200, 201), answer.text
    assert http.put("/v1/groups/class-x", json={"name": "Class X"}).status_code in (200, 201)
    member = http.put("/v1/groups/class-x/members/s-1", json={"memberRole": "student"})
    assert member.status_code in (200, 201), member.text
    assert http.put("/v1/guardianships/s-1/g-1").status_code in (200, 201)


def test_event_sent_over_http_reaches_the_inbox_through_the_worker_process(
    api_url: str, e2e_env: dict[str, str], settings: Settings, tenant: str, tmp_path: Path
) -> None:
    """R-OPS-7, R-OPS-9, R-OPS-11: the API and the worker run as separate processes; the worker
    fans the event out, and on SIGTERM it drains and exits cleanly."""
    created = run_cli(["keys", "create", "--tenant", tenant, "--scopes", "*"], e2e_env)
    assert created.returncode == 0, created.stderr
    key = last_line(created.stdout)
    token = auth.sign_token(settings, tenant_id=tenant, subject="g-1", role="guardian")

    worker = HeraldProcess(["worker"], e2e_env, tmp_path / "worker.log")
    try:
        with httpx.Client(
            base_url=api_url, timeout=10, headers={"Authorization": f"Bearer {key}"}
        ) as http:
            _seed_class(http)
            sent = http.post(
                "/v1/events",
                json={
                    "kind": "announcement.posted",
                    "audience": {"kind": "guardians_of_group", "groupIds": ["class-x"]},
                    "channels": ["in_app"],
                    "variables": {"title": "Sports day moved", "message": "It is now on Friday."},
                },
            )
            assert sent.status_code == 201, sent.text
            event_id = sent.json()["id"]

            items = wait_for_inbox(api_url, token)
            assert [(i["kind"], i["title"]) for i in items] == [
                ("announcement.posted", "Sports day moved")
            ]
            status = http.get(f"/v1/events/{event_id}").json()
            assert status["state"] == "completed"
            assert status["recipientCount"] == 1
    finally:
        exit_status = worker.stop(signal.SIGTERM)
    assert exit_status == 0, worker.describe()
    assert "worker stopped" in worker.output()
