"""Broadcasts end to end, against real `herald api`, `herald scheduler` and `herald worker`
processes: two operators (JWTs), the creator's approval refused and the other's accepted, an API
key's approval refused, a person added after the freeze getting nothing, and a broadcast to two
thousand people cancelled mid-flight whose every delivery ends sent, delivered, cancelled or
skipped, with a report that adds up; `herald broadcasts status --follow` watches it end."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from herald import vocabulary
from herald.auth import service as auth
from herald.config import Settings
from tests.e2e.harness import HeraldProcess, free_port, last_line, run_cli, sql

FINAL = {"sent", "delivered", "cancelled", *vocabulary.SKIPPED_STATUSES}
CROWD = 2000


def _wait(check: Any, what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_two_people_frozen_audience_and_cancel_mid_flight(
    e2e_env: dict[str, str], database_url: str, settings: Settings, tenant: str, tmp_path: Path
) -> None:
    """R-BCAST-3, R-BCAST-4, R-BCAST-7, R-BCAST-8, R-BCAST-9, R-BCAST-10, R-BCAST-11,
    R-BCAST-12, R-BCAST-15: the whole flow over HTTP with real processes."""
    env = {
        **e2e_env,
        "HERALD_FEATURE_BROADCASTS": "true",
        "HERALD_EMAIL_PROVIDER": "mock",
        "HERALD_SCHEDULER_LEASE_SECONDS": "2",
        "HERALD_SCHEDULER_TICK_SECONDS": "0.2",
        "HERALD_FANOUT_BATCH_SIZE": "25",
    }
    sql(database_url, "DELETE FROM scheduler_lease")
    created = run_cli(["keys", "create", "--tenant", tenant, "--scopes", "*"], env)
    assert created.returncode == 0, created.stderr
    key = {"Authorization": f"Bearer {last_line(created.stdout)}"}
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    api = HeraldProcess(["api", "--port", str(port)], env, tmp_path / "api.log")
    scheduler = HeraldProcess(["scheduler"], env, tmp_path / "scheduler.log")
    worker: HeraldProcess | None = None
    try:
        api.wait_until_healthy(base_url)
        scheduler.wait_for_output("scheduler started")
        with httpx.Client(base_url=base_url, timeout=30) as http:
            role = http.put(
                "/v1/roles/officer",
                json={
                    "name": "Officer",
                    "scopeKind": "staff",
                    "permissions": list(vocabulary.BROADCAST_PERMISSIONS),
                },
                headers=key,
            )
            assert role.status_code in (200, 201), role.text
            parents = [{"externalId": f"parent-{n}", "fullName": f"Parent {n}"} for n in range(3)]
            staff = [
                {"externalId": name, "fullName": name.title(), "roles": ["officer"]}
                for name in ("alice", "bob")
            ]
            batch = http.post("/v1/people:batch", json={"people": parents + staff}, headers=key)
            assert batch.status_code in (200, 201), batch.text
            alice, bob = (
                {
                    "Authorization": "Bearer "
                    + auth.sign_token(settings, tenant_id=tenant, subject=who, role="officer")
                }
                for who in ("alice", "bob")
            )
            draft = {
                "title": "Closed tomorrow",
                "kind": "announcement.posted",
                "variables": {"title": "Closed", "message": "The school is closed tomorrow."},
                "channels": ["in_app", "email"],
                "audience": {
                    "kind": "users",
                    "userIds": [p["externalId"] for p in parents] + ["late"],
                },
            }
            first = http.post("/v1/admin/broadcasts", json=draft, headers=alice)
            assert first.status_code == 201, first.text
            url = f"/v1/admin/broadcasts/{first.json()['id']}"
            own = http.post(f"{url}/approve", json={"version": 1}, headers=alice)
            assert own.status_code == 409
            assert own.json()["error"]["code"] == "NOTIFICATION_BROADCAST_SELF_APPROVAL"
            keyed = http.post(f"{url}/approve", json={"version": 1}, headers=key)
            assert keyed.status_code == 403
            assert keyed.json()["error"]["code"] == "NOTIFICATION_BROADCAST_APPROVER_NOT_PERSON"
            ok = http.post(f"{url}/approve", json={"version": 1}, headers=bob)
            assert ok.status_code == 200 and ok.json()["approvedBy"] == "person:bob"
            # No worker yet: the scheduler releases (freezes) and nothing fans out.
            released = _wait(
                lambda: http.get(url, headers=bob).json()["state"] == "sending", "the release"
            )
            assert released
            late = http.put("/v1/people/late", json={"fullName": "Late Joiner"}, headers=key)
            assert late.status_code in (200, 201), late.text
            worker = HeraldProcess(["worker"], env, tmp_path / "worker.log")
            done = _wait(
                lambda: (got := http.get(url, headers=bob).json())["state"] == "completed" and got,
                "the first broadcast to complete",
            )
            assert done["recipientCount"] == 3 and sum(done["counts"].values()) == 6
            # Each process names its connections, for pg_stat_activity and the server's logs.
            names = sql(
                database_url,
                "SELECT DISTINCT application_name FROM pg_stat_activity "
                "WHERE datname = current_database()",
            )
            assert {"herald-api", "herald-scheduler", "herald-worker"} <= {n for (n,) in names}
            late_token = auth.sign_token(settings, tenant_id=tenant, subject="late")
            inbox = http.get(
                "/v1/me/notifications", headers={"Authorization": f"Bearer {late_token}"}
            )
            assert inbox.status_code == 200 and inbox.json()["items"] == []

            crowd = [{"externalId": f"c-{n:05d}", "fullName": f"Crowd {n}"} for n in range(CROWD)]
            for start in range(0, CROWD, 1000):
                put = http.post(
                    "/v1/people:batch", json={"people": crowd[start : start + 1000]}, headers=key
                )
                assert put.status_code in (200, 201), put.text
            big = http.post(
                "/v1/admin/broadcasts",
                json={**draft, "title": "Everyone", "audience": {"kind": "all_users"}},
                headers=bob,
            )
            assert big.status_code == 201, big.text
            big_url = f"/v1/admin/broadcasts/{big.json()['id']}"
            assert http.post(f"{big_url}/approve", json={"version": 1}, headers=alice).is_success
            _wait(
                lambda: http.get(big_url, headers=alice).json()["recipientCount"] > 0,
                "the fan-out to start",
            )
            cancelled = http.post(f"{big_url}/cancel", headers=alice)
            assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
            status = run_cli(
                ["broadcasts", "status", big.json()["id"], "--tenant", tenant, "--follow"], env
            )
            assert status.returncode == 0, status.stderr
            assert last_line(status.stdout) == "cancelled"
            final = http.get(big_url, headers=alice).json()
            assert final["settledAt"] is not None
            assert set(final["counts"]) <= FINAL, final["counts"]
            report = http.get(f"{big_url}/report", headers=alice).json()
            audience_size = CROWD + 3 + 2 + 1
            assert report["deliveryCount"] == 2 * report["recipientCount"]
            assert report["recipientCount"] < audience_size or final["counts"].get("cancelled")
            recipients_then = report["recipientCount"]
            time.sleep(1)
            again = http.get(f"{big_url}/report", headers=alice).json()
            assert again["recipientCount"] == recipients_then  # nothing written after the cancel
    finally:
        for process in (worker, scheduler, api):
            if process is not None:
                process.stop()
