"""Escalation with real processes: `herald api`, `herald worker` and two `herald scheduler`s.

An escalating event (announcement.urgent: in-app now, email 30 minutes unread, SMS 2 hours after
that) read in the inbox before the email step sends no email; one left unread gets exactly one
email and then one SMS, even with the scheduler holding the escalation lease SIGKILLed between
the two steps. The test moves a step's due time into the past directly in the database (the
DB-nudge idiom of tests/e2e/test_scheduler_process.py), never waits 30 minutes.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx

from herald.auth import service as auth
from herald.config import Settings
from tests.e2e.harness import (
    START_TIMEOUT,
    all_scopes_key,
    api_worker_and_two_schedulers,
    sql,
    wait_for_inbox,
)

LEASE_SECONDS = 2


def _deliveries(url: str, tenant: str, person: str) -> list[tuple[str, ...]]:
    return sql(
        url,
        "SELECT d.channel FROM notification_delivery d JOIN person p ON p.id = d.user_id "
        "WHERE d.tenant_id = %s AND p.external_id = %s ORDER BY d.channel",
        tenant,
        person,
    )


def _nudge(url: str, tenant: str, step: int) -> None:
    sql(
        url,
        "UPDATE notification_escalation_step SET due_at = now() - interval '1 second' "
        "WHERE tenant_id = %s AND step_index = %s AND state = 'pending'",
        tenant,
        step,
    )


def _wait_decided(url: str, tenant: str, step: int, count: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        rows = sql(
            url,
            "SELECT count(*) FROM notification_escalation_step "
            "WHERE tenant_id = %s AND step_index = %s AND state <> 'pending'",
            tenant,
            step,
        )
        if rows[0][0] >= count:
            return
        time.sleep(0.1)
    raise AssertionError(f"step {step} was never decided")


def _escalation_leader_pid(url: str) -> int:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        rows = sql(
            url,
            "SELECT holder FROM scheduler_lease WHERE name = 'escalation' AND expires_at > now()",
        )
        if rows:
            return int(str(rows[0][0]).split(":")[1])
        time.sleep(0.1)
    raise AssertionError("no scheduler took the escalation lease")


def test_read_stops_unread_escalates_once_per_step_across_a_killed_scheduler(
    e2e_env: dict[str, str], database_url: str, settings: Settings, tenant: str, tmp_path: Path
) -> None:
    env = {
        **e2e_env,
        "HERALD_SCHEDULER_LEASE_SECONDS": str(LEASE_SECONDS),
        "HERALD_SCHEDULER_TICK_SECONDS": "0.2",
    }
    sql(database_url, "DELETE FROM scheduler_lease")
    headers = all_scopes_key(tenant, env)
    with api_worker_and_two_schedulers(env, tmp_path, "scheduler started") as (base_url, processes):
        with httpx.Client(base_url=base_url, headers=headers, timeout=10) as http:
            for external_id in ("reader", "away"):
                put = http.put(
                    f"/v1/people/{external_id}",
                    json={
                        "fullName": external_id,
                        "email": f"{external_id}@example.com",
                        "phone": "+9779800000000",
                    },
                )
                assert put.status_code in (200, 201), put.text
            # SMS is off by default for announcements (R-PREF-11): both people switch it on.
            sql(
                database_url,
                "INSERT INTO notification_channel_preference (tenant_id, person_id, channel, "
                "enabled) SELECT tenant_id, id, 'sms', true FROM person WHERE tenant_id = %s",
                tenant,
            )
            sent = http.post(
                "/v1/events",
                json={
                    "kind": "announcement.urgent",
                    "audience": {"kind": "users", "userIds": ["reader", "away"]},
                    "channels": ["in_app", "email", "sms"],
                    "variables": {"title": "School closed", "message": "Heavy rain."},
                },
            )
            assert sent.status_code in (200, 201, 202), sent.text
        reader = auth.sign_token(settings, tenant_id=tenant, subject="reader")
        away = auth.sign_token(settings, tenant_id=tenant, subject="away")
        [item] = wait_for_inbox(base_url, reader)
        wait_for_inbox(base_url, away)
        read = httpx.post(
            f"{base_url}/v1/me/notifications/{item['id']}/read",
            headers={"Authorization": f"Bearer {reader}"},
            timeout=10,
        )
        assert read.status_code == 200, read.text

        _nudge(database_url, tenant, 1)
        _wait_decided(database_url, tenant, 1, 2)
        assert _deliveries(database_url, tenant, "reader") == [("in_app",)]
        assert _deliveries(database_url, tenant, "away") == [("email",), ("in_app",)]

        # Kill the scheduler holding the escalation lease; the other takes over the SMS step.
        leader_pid = _escalation_leader_pid(database_url)
        leader = next(n for n in ("a", "b") if processes[n].proc.pid == leader_pid)
        survivor = "b" if leader == "a" else "a"
        processes[leader].proc.send_signal(signal.SIGKILL)
        processes[leader].kill()
        _nudge(database_url, tenant, 2)
        _wait_decided(database_url, tenant, 2, 2)
        assert processes[survivor].proc.pid == _escalation_leader_pid(database_url)
        time.sleep(1.0)  # no late duplicate from either scheduler
        assert _deliveries(database_url, tenant, "reader") == [("in_app",)]
        assert _deliveries(database_url, tenant, "away") == [("email",), ("in_app",), ("sms",)]
        states = sql(
            database_url,
            "SELECT p.external_id, st.step_index, st.state, st.reason "
            "FROM notification_escalation_step st JOIN person p ON p.id = st.person_id "
            "WHERE st.tenant_id = %s ORDER BY 1, 2",
            tenant,
        )
        assert states == [
            ("away", 1, "sent", None),
            ("away", 2, "sent", None),
            ("reader", 1, "stopped", "read"),
            ("reader", 2, "stopped", "read"),
        ]
        assert processes[survivor].stop(signal.SIGTERM) == 0, processes[survivor].describe()
        assert sql(database_url, "SELECT holder FROM scheduler_lease") == []
