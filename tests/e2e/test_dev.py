"""`herald dev`: one process with the demo school, a key, a token and the API + worker; twice."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import httpx

from herald.demo.dev import absence_followup
from tests.e2e.harness import HeraldProcess, banner_value, free_port, wait_for_inbox

BANNER_END = "Ctrl-C stops."


def test_dev_serves_the_demo_school_and_reruns_with_the_same_key(
    e2e_env: dict[str, str], tmp_path: Path
) -> None:
    """`herald dev` loads the demo directory idempotently (a second run works), keeps its key
    and generated JWT secret in HERALD_DATA_DIR/dev.json, runs the scheduler with reminders on
    and one demo weekday reminder (R-REMIND-16 flag turned on by dev), sweeps follow-ups (the
    printed attendance loop: the guardian is told, then reminded once; R-FOLLOW-53), and stops
    cleanly on Ctrl-C."""
    env = {k: v for k, v in e2e_env.items() if k != "HERALD_JWT_SECRET"}
    env["HERALD_DATA_DIR"] = str(tmp_path / "dev-data")
    keys: list[str] = []
    for run in range(2):
        port = free_port()
        dev = HeraldProcess(["dev", "--port", str(port)], env, tmp_path / f"dev-{run}.log")
        try:
            text = dev.wait_for_output(BANNER_END)
            base_url = banner_value("API", text)
            assert base_url == f"http://127.0.0.1:{port}"
            key = banner_value("API key", text)
            token = banner_value("token", text)
            keys.append(key)
            assert "curl -sS -X POST" in text and "/v1/me/notifications" in text
            # Two console sign-in links: the principal (every permission) and the deputy (the
            # broadcast approver, without dead letters); the token rides in the fragment.
            links = re.findall(r"^\s+console\s+(\S+)", text, re.MULTILINE)
            assert len(links) == 2, text
            assert all(link.startswith(f"{base_url}/console/sign-in#token=") for link in links)
            operator, approver = (link.split("#token=", 1)[1] for link in links)
            for console_token, dead_letters in ((operator, 200), (approver, 404)):
                with httpx.Client(base_url=base_url, timeout=10) as browser:
                    signed = browser.post(
                        "/console/session", headers={"Authorization": f"Bearer {console_token}"}
                    )
                    assert signed.status_code == 303, signed.text
                    assert browser.get("/console/history").status_code == 200
                    assert browser.get("/console/dead-letters").status_code == dead_letters
            if run == 0:
                # What the first printed curl command does.
                sent = httpx.post(
                    f"{base_url}/v1/events",
                    headers={"Authorization": f"Bearer {key}"},
                    json={
                        "kind": "announcement.posted",
                        "audience": {"kind": "guardians_of_group", "groupIds": ["class-7a"]},
                        "channels": ["in_app", "email"],
                        "variables": {"title": "Sports day moved", "message": "It is now Friday."},
                    },
                    timeout=10,
                )
                assert sent.status_code == 201, sent.text
            # The demo guardian (a parent in 7A) sees it in their inbox, on both runs.
            items = wait_for_inbox(
                base_url,
                token,
                until=lambda got: any(i["title"] == "Sports day moved" for i in got),
            )
            assert "Sports day moved" in [item["title"] for item in items]
            # The scheduler runs in the process, reminders are on, and the demo school has its
            # one weekday reminder (once, however often dev starts).
            reminders = httpx.get(
                f"{base_url}/v1/admin/reminders",
                headers={"Authorization": f"Bearer {key}"},
                timeout=10,
            )
            assert reminders.status_code == 200, reminders.text
            assert [(r["kind"], r["weekdays"]) for r in reminders.json()["items"]] == [
                ("reminder.notice", [1, 2, 3, 4, 5])
            ]
            assert "scheduler started" in dev.output()
            assert "/v1/followups" in text
            if run == 0:
                # The printed attendance loop, with a shorter grace and delay: the demo
                # guardian (Aarav's father) is told of the absence, then reminded once.
                absent = {**absence_followup("2026-09-01"), "graceSeconds": 1}
                absent["reminderDelaySeconds"] = 2
                armed = httpx.post(
                    f"{base_url}/v1/followups",
                    headers={"Authorization": f"Bearer {key}"},
                    json=absent,
                    timeout=10,
                )
                assert armed.status_code == 201, armed.text
                items = wait_for_inbox(
                    base_url,
                    token,
                    at_least=3,
                    until=lambda got: got[0]["kind"] == "attendance.reminder",
                )
                assert [i["kind"] for i in items[:2]] == [
                    "attendance.reminder",
                    "attendance.event",
                ]
        finally:
            exit_status = dev.stop(signal.SIGINT)
        assert exit_status == 0, dev.describe()
        assert "herald dev stopped" in dev.output()
    assert keys[0] == keys[1]
    assert (tmp_path / "dev-data" / "dev.json").stat().st_mode & 0o077 == 0
