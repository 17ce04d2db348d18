"""Two `herald scheduler` processes racing, with `herald api` and `herald worker`: a due
reminder reaches each recipient's inbox once; SIGKILL the leader and the other fires the next
occurrence; SIGTERM stops the survivor cleanly.

The schedule is created over HTTP. To have an occurrence come due inside the test rather than at
tomorrow's minute, the test moves the schedule's `next_run_at` (the occurrence boundary,
R-REMIND-5) to the instant that should fire, directly in the database.
"""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from herald.auth import service as auth
from herald.config import Settings
from tests.e2e.harness import (
    all_scopes_key,
    api_worker_and_two_schedulers,
    reminder_leader_pid,
    sql,
    wait_for_inbox,
)

LEASE_SECONDS = 2


def _inbox(base_url: str, token: str) -> list[dict[str, Any]]:
    answer = httpx.get(
        f"{base_url}/v1/me/notifications", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    assert answer.status_code == 200, answer.text
    items: list[dict[str, Any]] = answer.json()["items"]
    return items


def test_two_schedulers_fire_each_occurrence_once_and_survive_a_killed_leader(
    e2e_env: dict[str, str], database_url: str, settings: Settings, tenant: str, tmp_path: Path
) -> None:
    """R-OPS-7, R-OPS-8, R-OPS-9, R-OPS-12, R-OPS-13, R-REMIND-5, R-REMIND-6, R-REMIND-7: api,
    worker and two schedulers as separate processes; the due occurrence becomes one event and one
    inbox item per recipient however the schedulers race; after SIGKILL of the lease holder the
    other takes the lease (within two lease periods) and fires the next occurrence; SIGTERM
    stops a scheduler cleanly (exit 0, lease handed back)."""
    env = {
        **e2e_env,
        "HERALD_FEATURE_REMINDERS": "true",
        "HERALD_SCHEDULER_LEASE_SECONDS": str(LEASE_SECONDS),
        "HERALD_SCHEDULER_TICK_SECONDS": "0.2",
    }
    # Whatever an earlier test left: start with the lease free.
    sql(database_url, "DELETE FROM scheduler_lease")
    headers = all_scopes_key(tenant, env)
    with api_worker_and_two_schedulers(env, tmp_path, "scheduler started") as (base_url, processes):
        with httpx.Client(base_url=base_url, headers=headers, timeout=10) as http:
            people = ("p-1", "p-2")
            for external_id in people:
                put = http.put(f"/v1/people/{external_id}", json={"fullName": external_id})
                assert put.status_code in (200, 201), put.text
            now = datetime.now(UTC).replace(second=0, microsecond=0)
            reminder = http.post(
                "/v1/admin/reminders",
                json={
                    "name": "Every day",
                    "kind": "reminder.notice",
                    "variables": {"title": "Homework", "message": "Check the diary."},
                    "channels": ["in_app"],
                    "audience": {"kind": "users", "userIds": list(people)},
                    "timezone": "UTC",
                    "localTime": now.strftime("%H:%M"),
                    "weekdays": [1, 2, 3, 4, 5, 6, 7],
                },
            )
            assert reminder.status_code == 201, reminder.text
            reminder_id = reminder.json()["id"]
            # Today's occurrence (this minute, already begun) is the one due now.
            sql(
                database_url,
                "UPDATE reminder_schedule SET next_run_at = %s WHERE public_id = %s",
                now,
                reminder_id,
            )
            tokens = [auth.sign_token(settings, tenant_id=tenant, subject=p) for p in people]
            for token in tokens:
                [item] = wait_for_inbox(base_url, token)
                assert item["kind"] == "reminder.notice" and item["title"] == "Homework"
            runs = http.get(f"/v1/admin/reminders/{reminder_id}/runs").json()["items"]
            assert [(r["state"], r["occurrence"]) for r in runs] == [
                ("fired", now.strftime("%Y-%m-%dT%H:%M:%SZ"))
            ]
            next_run = http.get(f"/v1/admin/reminders/{reminder_id}").json()["nextRunAt"]
            assert next_run == (now + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")

            # Kill the leader without a chance to hand its lease back.
            leader_pid = reminder_leader_pid(database_url)
            leader = next(n for n in ("a", "b") if processes[n].proc.pid == leader_pid)
            survivor = "b" if leader == "a" else "a"
            processes[leader].proc.send_signal(signal.SIGKILL)
            processes[leader].kill()
            killed_at = time.monotonic()
            # The next occurrence comes due: move the boundary to it.
            second = datetime.now(UTC).replace(microsecond=0)
            sql(
                database_url,
                "UPDATE reminder_schedule SET next_run_at = %s WHERE public_id = %s",
                second,
                reminder_id,
            )
            for token in tokens:
                items = wait_for_inbox(base_url, token, at_least=2)
                assert len(items) == 2
            assert processes[survivor].proc.pid == reminder_leader_pid(database_url)
            taken_over_in = time.monotonic() - killed_at
            runs = http.get(f"/v1/admin/reminders/{reminder_id}/runs").json()["items"]
            assert [r["state"] for r in runs] == ["fired", "fired"]
            # Each occurrence once per inbox: no late duplicate from either scheduler.
            time.sleep(1.0)
            for token in tokens:
                assert len(_inbox(base_url, token)) == 2
            events = sql(
                database_url,
                "SELECT count(*) FROM notification_event WHERE tenant_id = %s",
                tenant,
            )
            assert events == [(2,)]
        # Generous bound (a loaded machine), still far inside "never".
        assert taken_over_in < 10 * LEASE_SECONDS
        exit_status = processes[survivor].stop(signal.SIGTERM)
        assert exit_status == 0, processes[survivor].describe()
        assert "scheduler stopped" in processes[survivor].output()
        assert sql(database_url, "SELECT holder FROM scheduler_lease") == []
