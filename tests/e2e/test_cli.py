"""The `herald` commands other programs read: the answer alone on the last line of stdout."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import jwt
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.auth import service as auth
from herald.errors import Unauthenticated
from herald.sending import service as sending
from tests.conftest import JWT_SECRET
from tests.e2e.harness import herald_env, last_line, run_cli


def test_token_prints_a_token_signed_with_the_secret(e2e_env: dict[str, str]) -> None:
    signed = run_cli(
        ["token", "--tenant", "demo", "--sub", "ramesh-shrestha", "--role", "guardian"], e2e_env
    )
    assert signed.returncode == 0, signed.stderr
    claims = jwt.decode(last_line(signed.stdout), JWT_SECRET, algorithms=["HS256"])
    assert (claims["tid"], claims["sub"], claims["role"]) == ("demo", "ramesh-shrestha", "guardian")
    assert claims["exp"] > claims.get("iat", 0)


def test_token_without_a_secret_fails_and_prints_no_token(tmp_path: Path) -> None:
    env = herald_env(HERALD_DATA_DIR=str(tmp_path))
    refused = run_cli(["token", "--tenant", "demo", "--sub", "someone"], env)
    assert refused.returncode == 1
    assert refused.stdout.strip() == ""
    assert "HERALD_JWT_SECRET" in refused.stderr


async def test_keys_create_prints_a_key_that_authenticates(
    e2e_env: dict[str, str], engine: AsyncEngine, tenant: str
) -> None:
    created = run_cli(
        ["keys", "create", "--tenant", tenant, "--scopes", "events:write, events:read"], e2e_env
    )
    assert created.returncode == 0, created.stderr
    key = last_line(created.stdout)
    assert key.startswith(auth.KEY_PREFIX)
    async with engine.begin() as conn:
        caller = await auth.authenticate_key(conn, key)
    assert caller.tenant_id == tenant
    assert caller.scopes == {"events:write", "events:read"}


async def test_keys_create_with_all_scopes(
    e2e_env: dict[str, str], engine: AsyncEngine, tenant: str
) -> None:
    created = run_cli(["keys", "create", "--tenant", tenant, "--scopes", "*"], e2e_env)
    assert created.returncode == 0, created.stderr
    async with engine.begin() as conn:
        caller = await auth.authenticate_key(conn, last_line(created.stdout))
    assert caller.allows("directory:write") and caller.allows("admin")


def test_keys_create_refuses_an_unknown_scope(e2e_env: dict[str, str], tenant: str) -> None:
    refused = run_cli(["keys", "create", "--tenant", tenant, "--scopes", "everything"], e2e_env)
    assert refused.returncode == 1
    assert refused.stdout.strip() == ""
    assert "VALIDATION_FAILED" in refused.stderr


def test_out_of_range_setting_stops_the_process(e2e_env: dict[str, str]) -> None:
    """R-OPS-14: an out-of-range value is refused at start-up, naming the variable."""
    env = {**e2e_env, "HERALD_LEASE_SECONDS": "1"}
    refused = run_cli(["migrate"], env)
    assert refused.returncode == 2
    assert "HERALD_LEASE_SECONDS" in refused.stderr


def test_migrate_is_idempotent(e2e_env: dict[str, str]) -> None:
    """The session database is already at head; migrating it again succeeds and changes nothing."""
    migrated = run_cli(["migrate"], e2e_env)
    assert migrated.returncode == 0, migrated.stderr
    assert "up to date" in migrated.stderr


async def test_send_records_an_event_and_prints_its_id(
    e2e_env: dict[str, str], engine: AsyncEngine, tenant: str
) -> None:
    args = [
        "send",
        "announcement.posted",
        "--tenant",
        tenant,
        "--audience",
        '{"kind": "all_users"}',
        "--var",
        "title=Sports day moved",
        "--var",
        "message=It is now on Friday.",
        "--channel",
        "in_app",
    ]
    first = run_cli(args, e2e_env)
    assert first.returncode == 0, first.stderr
    event_id = uuid.UUID(last_line(first.stdout))
    async with engine.begin() as conn:
        event = await sending.get_event(conn, tenant, event_id)
    assert event["kind"] == "announcement.posted"

    # announcement.posted collapses: the same facts again fold into the same event.
    again = run_cli(args, e2e_env)
    assert again.returncode == 0, again.stderr
    assert uuid.UUID(last_line(again.stdout)) == event_id
    assert "folded" in again.stderr


def test_send_refuses_malformed_arguments(e2e_env: dict[str, str], tenant: str) -> None:
    base = ["send", "announcement.posted", "--tenant", tenant]
    no_pair = run_cli([*base, "--audience", '{"kind": "all_users"}', "--var", "title"], e2e_env)
    assert no_pair.returncode == 2
    assert "key=value" in no_pair.stderr
    not_json = run_cli([*base, "--audience", "everyone"], e2e_env)
    assert not_json.returncode == 2
    unknown = run_cli(["send", "no.such.kind", "--tenant", tenant, "--audience", "{}"], e2e_env)
    assert unknown.returncode == 1
    assert "NOTIFICATION_TEMPLATE_NOT_FOUND" in unknown.stderr


def test_unreachable_database_is_one_line_not_a_traceback(e2e_env: dict[str, str]) -> None:
    env = {**e2e_env, "HERALD_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/nowhere"}
    refused = run_cli(["migrate"], env)
    assert refused.returncode == 1
    assert "cannot reach the database" in refused.stderr
    assert "Traceback" not in refused.stderr


async def test_keys_list_shows_prefixes_never_keys(
    e2e_env: dict[str, str], engine: AsyncEngine, tenant: str
) -> None:
    """R-SEC-1: `herald keys list` shows each key of the tenant — id, prefix, name, scopes,
    state — and never the key itself; another tenant's keys are not listed."""
    async with engine.begin() as conn:
        first = await auth.create_api_key(
            conn, tenant_id=tenant, scopes=["events:write"], name="app"
        )
        second = await auth.create_api_key(conn, tenant_id=tenant, scopes=["*"], name="ops")
        foreign = await auth.create_api_key(conn, tenant_id=f"{tenant}-other", scopes=["*"])
    listed = run_cli(["keys", "list", "--tenant", tenant], e2e_env)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].split("\t")[1:5] == [f"{first[:10]}…", "app", "events:write", "live"]
    assert lines[1].split("\t")[1:5] == [f"{second[:10]}…", "ops", "*", "live"]
    as_json = run_cli(["keys", "list", "--tenant", tenant, "--json"], e2e_env)
    rows = json.loads(last_line(as_json.stdout))
    assert [row["prefix"] for row in rows] == [first[:10], second[:10]]
    for output in (listed.stdout + listed.stderr, as_json.stdout + as_json.stderr):
        for key in (first, second, foreign):
            assert key not in output
            assert key[10:] not in output  # nothing past the prefix
        assert foreign[:10] not in output


async def test_keys_revoke_by_prefix_or_id_stops_the_key(
    e2e_env: dict[str, str], engine: AsyncEngine, tenant: str
) -> None:
    """R-SEC-1: `herald keys revoke --tenant T PREFIX_OR_ID` revokes one key, which stops
    authenticating at once; the list shows it revoked; revoking it again, or naming another
    tenant's key, fails with NOT_FOUND and revokes nothing."""
    async with engine.begin() as conn:
        by_prefix = await auth.create_api_key(conn, tenant_id=tenant, scopes=["events:write"])
        by_id = await auth.create_api_key(conn, tenant_id=tenant, scopes=["events:read"])
        kept = await auth.create_api_key(conn, tenant_id=tenant, scopes=["events:read"])
        foreign = await auth.create_api_key(conn, tenant_id=f"{tenant}-other", scopes=["*"])
    rows = json.loads(
        last_line(run_cli(["keys", "list", "--tenant", tenant, "--json"], e2e_env).stdout)
    )
    id_of = {row["prefix"]: row["id"] for row in rows}

    revoked = run_cli(["keys", "revoke", "--tenant", tenant, f"{by_prefix[:10]}…"], e2e_env)
    assert revoked.returncode == 0, revoked.stderr
    assert last_line(revoked.stdout) == id_of[by_prefix[:10]]
    revoked = run_cli(["keys", "revoke", "--tenant", tenant, id_of[by_id[:10]]], e2e_env)
    assert revoked.returncode == 0, revoked.stderr

    for key in (by_prefix, by_id):
        async with engine.begin() as conn:
            with pytest.raises(Unauthenticated):
                await auth.authenticate_key(conn, key)
    async with engine.begin() as conn:
        assert (await auth.authenticate_key(conn, kept)).tenant_id == tenant
        assert (await auth.authenticate_key(conn, foreign)).tenant_id == f"{tenant}-other"

    again = run_cli(["keys", "revoke", "--tenant", tenant, by_prefix[:10]], e2e_env)
    assert again.returncode == 1 and "NOT_FOUND" in again.stderr
    cross = run_cli(["keys", "revoke", "--tenant", tenant, foreign[:10]], e2e_env)
    assert cross.returncode == 1 and "NOT_FOUND" in cross.stderr
    listed = json.loads(
        last_line(run_cli(["keys", "list", "--tenant", tenant, "--json"], e2e_env).stdout)
    )
    states = {row["prefix"]: row["revokedAt"] is not None for row in listed}
    assert states == {by_prefix[:10]: True, by_id[:10]: True, kept[:10]: False}


def test_keys_revoke_refuses_something_that_is_not_a_key(
    e2e_env: dict[str, str], tenant: str
) -> None:
    """Bad input is a clear error with a code, not a traceback."""
    refused = run_cli(["keys", "revoke", "--tenant", tenant, "whatever"], e2e_env)
    assert refused.returncode == 1
    assert "VALIDATION_FAILED" in refused.stderr and "Traceback" not in refused.stderr
