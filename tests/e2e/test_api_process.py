"""`herald api` as a real process: health, docs, authentication, and directory writes over HTTP
with a key that `herald keys create` made."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx

from tests.e2e.harness import HeraldProcess, free_port, last_line, run_cli


def test_api_process_answers_health_and_docs(api_url: str) -> None:
    """R-OPS-7: the API runs as its own process; it answers health, readiness and its docs."""
    with httpx.Client(base_url=api_url, timeout=10) as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        # /readyz runs a statement, so it proves the process reached its database.
        assert http.get("/readyz").json() == {
            "status": "ready",
            "checks": {"database": "ok", "migrations": "ok"},
        }
        docs = http.get("/docs")
        assert docs.status_code == 200
        assert "swagger" in docs.text.lower()
        assert "/v1/events" in http.get("/openapi.json").json()["paths"]


def test_api_process_refuses_calls_without_a_key(api_url: str) -> None:
    with httpx.Client(base_url=api_url, timeout=10) as http:
        response = http.post("/v1/events", json={"kind": "announcement.posted"})
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "UNAUTHENTICATED"
        forged = http.post(
            "/v1/events",
            json={"kind": "announcement.posted"},
            headers={"Authorization": "Bearer hk_not-a-key-herald-issued"},
        )
        assert forged.status_code == 401


def test_directory_writes_over_http_with_a_cli_created_key(
    api_url: str, e2e_env: dict[str, str], tenant: str
) -> None:
    """A key from `herald keys create` works over real HTTP, for its scope and no other."""
    created = run_cli(
        ["keys", "create", "--tenant", tenant, "--scopes", "directory:write"], e2e_env
    )
    assert created.returncode == 0, created.stderr
    key = last_line(created.stdout)

    with httpx.Client(
        base_url=api_url, timeout=10, headers={"Authorization": f"Bearer {key}"}
    ) as http:
        role = http.put("/v1/roles/guardian", json={"name": "Guardian", "scopeKind": "guardian"})
        assert role.status_code == 201, role.text
        person = http.put(
            "/v1/people/asha-rai",
            json={"fullName": "Asha Rai", "email": "asha.rai@example.com", "roles": ["guardian"]},
        )
        assert person.status_code == 201, person.text
        assert person.json()["externalId"] == "asha-rai"
        # The same PUT again is an update of the same row, not a second person.
        again = http.put("/v1/people/asha-rai", json={"fullName": "Asha Rai", "roles": []})
        assert again.status_code == 200, again.text
        assert again.json()["id"] == person.json()["id"]

        refused = http.post(
            "/v1/events",
            json={
                "kind": "account.welcome",
                "audience": {"kind": "users", "userIds": ["asha-rai"]},
            },
        )
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "FORBIDDEN"


def test_api_process_stops_cleanly_on_sigterm(e2e_env: dict[str, str], tmp_path: Path) -> None:
    """R-OPS-7: the API process is started and stopped on its own; SIGTERM is a clean exit."""
    port = free_port()
    api = HeraldProcess(["api", "--port", str(port)], e2e_env, tmp_path / "api.log")
    try:
        api.wait_until_healthy(f"http://127.0.0.1:{port}")
    finally:
        exit_status = api.stop(signal.SIGTERM)
    assert exit_status == 0, api.describe()
    assert "Finished server process" in api.output()
