"""Follow-ups against real processes: `herald api`, `herald worker` and two `herald scheduler`
processes sweeping the same database every second, with graces of 1–2 s and delays of 2–3 s.

Over 200 follow-ups each gets exactly one notify and one reminder event, although one scheduler
is killed with SIGKILL in the middle of a sweep; acknowledged before armAt → nothing; between
the notify and the reminder → the notify only; reopened after an acknowledgement → notified
again (and reminded again); covered → never; another tenant's key → 404.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from herald.auth import service as auth
from herald.config import Settings
from herald.sending.service import build_occurrence_dedupe_key
from tests.e2e.harness import (
    all_scopes_key,
    api_worker_and_two_schedulers,
    last_line,
    run_cli,
    sql,
    wait_for_inbox,
)

BULK = 200
VARIABLES = {"studentName": "Asha Rai", "date": "2026-09-01", "eventType": "absent"}


def _body(key: str, person: str, grace: int, delay: int, **extra: Any) -> dict[str, Any]:
    return {
        "key": key,
        "kind": "attendance.event",
        "reminderKind": "attendance.reminder",
        "audience": {"kind": "users", "userIds": [person]},
        "variables": VARIABLES,
        "graceSeconds": grace,
        "reminderDelaySeconds": delay,
        **extra,
    }


def _wait_state(http: httpx.Client, key: str, state: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found: dict[str, Any] = http.get(f"/v1/followups/{key}").json()
        if found["state"] == state:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{key} never reached {state}")


def _expected_keys(
    database_url: str, tenant: str, legs: dict[str, list[tuple[int, str]]]
) -> Counter[str]:
    rows = sql(database_url, "SELECT key, id FROM followup WHERE tenant_id = %s", tenant)
    ids = dict(rows)
    return Counter(
        build_occurrence_dedupe_key(f"followup:{ids[key]}:{cycle}:{leg}")
        for key, transitions in legs.items()
        for cycle, leg in transitions
    )


def test_two_sweeping_schedulers_send_each_transition_once(
    e2e_env: dict[str, str], database_url: str, settings: Settings, tenant: str, tmp_path: Path
) -> None:
    """R-FOLLOW-9, R-FOLLOW-12, R-FOLLOW-13, R-FOLLOW-14, R-FOLLOW-29, R-FOLLOW-35, R-FOLLOW-42,
    R-FOLLOW-43, R-FOLLOW-44, R-FOLLOW-50, R-FOLLOW-52, R-FOLLOW-57, DESIGN §5.2, §7 (one
    event per transition across crashes): real processes, two schedulers sweeping every second,
    one of them SIGKILLed mid-sweep; the guardian's inbox shows the notify, then the reminder."""
    env = {**e2e_env, "HERALD_FOLLOWUP_SWEEP_SECONDS": "1"}
    headers = all_scopes_key(tenant, env)
    with api_worker_and_two_schedulers(env, tmp_path, "follow-up sweeps every 1 s") as (
        base_url,
        processes,
    ):
        with httpx.Client(base_url=base_url, headers=headers, timeout=10) as http:
            for person in ("g-bulk", "g-watch"):
                put = http.put(f"/v1/people/{person}", json={"fullName": person})
                assert put.status_code in (200, 201), put.text
            legs: dict[str, list[tuple[int, str]]] = {}

            # Acknowledged before armAt, and covered: nothing, ever.
            for i in range(10):
                key = f"early-{i}"
                assert (
                    http.post("/v1/followups", json=_body(key, "g-bulk", 2, 2)).status_code == 201
                )
                assert (
                    http.post(f"/v1/followups/{key}/acknowledge").json()["state"] == "acknowledged"
                )
                covered = http.post(
                    "/v1/followups", json=_body(f"covered-{i}", "g-bulk", 1, 2, covered=True)
                )
                assert covered.json()["state"] == "not_required"

            # The bulk, armed from several threads so that it falls due within about a second:
            # notified and reminded, while a scheduler dies in the middle of sweeping it.
            def arm(i: int) -> None:
                key = f"bulk-{i:03d}"
                answer = http.post("/v1/followups", json=_body(key, "g-bulk", 1 + i % 2, 2 + i % 2))
                assert answer.status_code == 201, answer.text

            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(arm, range(BULK)))
            for i in range(BULK):
                legs[f"bulk-{i:03d}"] = [(1, "notify"), (1, "remind")]
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                [(done,)] = sql(
                    database_url,
                    "SELECT count(*) FROM followup WHERE tenant_id = %s AND key LIKE 'bulk-%%' "
                    "AND state <> 'armed'",
                    tenant,
                )
                if done:
                    break
                time.sleep(0.01)
            processes["a"].proc.send_signal(signal.SIGKILL)
            processes["a"].kill()
            killed_with = done

            # Acknowledged between the notify and the reminder; and reopened after that.
            for key in ("between", "reopen"):
                answer = http.post(
                    "/v1/followups",
                    json=_body(key, "g-watch" if key == "between" else "g-bulk", 1, 3),
                )
                assert answer.status_code == 201
            for key in ("between", "reopen"):
                _wait_state(http, key, "notified")
                assert (
                    http.post(f"/v1/followups/{key}/acknowledge").json()["state"] == "acknowledged"
                )
            legs["between"] = [(1, "notify")]
            reopened = http.post("/v1/followups/reopen/reopen").json()
            assert reopened["state"] == "armed" and reopened["notifiedAt"] is None
            legs["reopen"] = [(1, "notify"), (2, "notify"), (2, "remind")]

            deadline = time.monotonic() + 45
            while time.monotonic() < deadline:
                [(left,)] = sql(
                    database_url,
                    "SELECT count(*) FROM followup WHERE tenant_id = %s "
                    "AND state IN ('armed', 'notified')",
                    tenant,
                )
                if left == 0:
                    break
                time.sleep(0.2)
            assert left == 0, "follow-ups were left behind"
            time.sleep(2.5)  # any late duplicate would have shown by now

            found = Counter(
                key
                for (key,) in sql(
                    database_url,
                    "SELECT dedupe_key FROM notification_event WHERE tenant_id = %s",
                    tenant,
                )
            )
            assert found == _expected_keys(database_url, tenant, legs)
            kinds = Counter(
                kind
                for (kind,) in sql(
                    database_url, "SELECT kind FROM notification_event WHERE tenant_id = %s", tenant
                )
            )
            assert kinds == {"attendance.event": BULK + 3, "attendance.reminder": BULK + 1}
            states = dict(
                sql(
                    database_url,
                    "SELECT state, count(*) FROM followup WHERE tenant_id = %s GROUP BY 1",
                    tenant,
                )
            )
            assert states == {"follow_up": BULK + 1, "acknowledged": 11, "not_required": 10}
            bulk = http.get("/v1/followups/bulk-000").json()
            assert (
                bulk["state"] == "follow_up" and bulk["notifyEventId"] and bulk["reminderEventId"]
            )
            assert bulk["escalateAt"] > bulk["notifiedAt"] > bulk["armAt"]

            # The guardian's inbox: the notify (the reminder was suppressed by the ack).
            token = auth.sign_token(settings, tenant_id=tenant, subject="g-watch")
            [item] = wait_for_inbox(base_url, token)
            assert item["kind"] == "attendance.event"

            other = run_cli(
                ["keys", "create", "--tenant", f"x-{uuid.uuid4().hex[:6]}", "--scopes", "*"], env
            )
            stranger = {"Authorization": f"Bearer {last_line(other.stdout)}"}
            assert (
                httpx.get(f"{base_url}/v1/followups/bulk-000", headers=stranger).status_code == 404
            )
        assert 0 < killed_with < BULK, "the scheduler was not killed while the bulk was swept"
        assert processes["b"].stop(signal.SIGTERM) == 0, processes["b"].describe()
