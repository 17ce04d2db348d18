"""What `herald dev` keeps between runs, and the credentials and examples it prints.

The state file (HERALD_DATA_DIR/dev.json, readable by its owner only) holds the dev JWT secret
and the all-scope API key, so a second `herald dev` prints the same key and tokens signed by an
earlier run still verify. Both are for a laptop; a deployment sets HERALD_JWT_SECRET and creates
its keys with `herald keys create`.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shlex
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from herald.auth import service as auth
from herald.config import Settings
from herald.errors import Unauthenticated

STATE_FILE = "dev.json"
DEV_KEY_NAME = "herald dev"
# The demo token's active role: role-scoped rows (guardians_of_group) show only under it.
GUARDIAN_ROLE = "guardian"
MOCKED_CHANNELS = ("email", "sms", "push", "telegram", "slack", "teams", "whatsapp")
DEMO_SWEEP_SECONDS = 2
# The attendance loop (seed 004): Aarav (7A, the demo guardian's son) marked absent; his
# guardians hear of it after a 10 s grace and are reminded 30 s later unless someone
# acknowledges in between.
DEMO_STUDENT = ("aarav-shrestha", "Aarav Shrestha")
DEMO_GRACE_SECONDS = 10
DEMO_REMINDER_DELAY_SECONDS = 30


@dataclass
class DevState:
    jwt_secret: str | None = None
    api_key: str | None = None


def state_path(data_dir: Path) -> Path:
    return data_dir / STATE_FILE


def load_state(data_dir: Path) -> DevState:
    path = state_path(data_dir)
    if not path.exists():
        return DevState()
    raw: dict[str, Any] = json.loads(path.read_text())
    return DevState(jwt_secret=raw.get("jwt_secret"), api_key=raw.get("api_key"))


def save_state(data_dir: Path, state: DevState) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    path = state_path(data_dir)
    # Created owner-only before anything secret is written into it.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(asdict(state), handle, indent=2)


def dev_jwt_secret(configured: str | None, state: DevState) -> str:
    """HERALD_JWT_SECRET when set; otherwise the one generated on the first run."""
    if configured:
        return configured
    if not state.jwt_secret:
        state.jwt_secret = secrets.token_urlsafe(48)
    return state.jwt_secret


def dev_settings(settings: Settings, state: DevState) -> Settings:
    """The environment's settings, completed for a laptop: a JWT secret, the features on, and
    the `mock` provider for every remote channel whose provider is unset (it records instead of
    sending)."""
    update: dict[str, Any] = {"jwt_secret": dev_jwt_secret(settings.jwt_secret, state)}
    # DESIGN.md §5.2: `herald dev` turns the features on, unless the environment says otherwise.
    for flag in ("feature_reminders", "feature_broadcasts"):
        if flag not in settings.model_fields_set:
            update[flag] = True
    # Webhooks to a receiver on the same laptop (http://127.0.0.1:…).
    if "webhook_allow_loopback" not in settings.model_fields_set:
        update["webhook_allow_loopback"] = True
    # The attendance loop is watched live: sweep follow-ups every 2 s unless told otherwise.
    if settings.followup_sweep_seconds is None:
        update["followup_sweep_seconds"] = DEMO_SWEEP_SECONDS
    for channel in MOCKED_CHANNELS:
        # A failover list (HERALD_EMAIL_PROVIDERS, HERALD_SMS_PROVIDERS) is a provider set too.
        listed = getattr(settings, f"{channel}_providers", "")
        if getattr(settings, f"{channel}_provider") is None and not listed:
            update[f"{channel}_provider"] = "mock"
    return settings.model_copy(update=update)


async def ensure_dev_key(conn: AsyncConnection, tenant_id: str, state: DevState) -> str:
    """Reuse the stored all-scope key while it still authenticates; otherwise create one.

    A key stops authenticating when the database behind it was reset (or pointed elsewhere).
    """
    if state.api_key:
        try:
            caller = await auth.authenticate_key(conn, state.api_key)
        except Unauthenticated:
            caller = None
        if caller is not None and caller.tenant_id == tenant_id and "*" in caller.scopes:
            return state.api_key
    state.api_key = await auth.create_api_key(
        conn, tenant_id=tenant_id, scopes=["*"], name=DEV_KEY_NAME
    )
    return state.api_key


def curl_examples(base_url: str, api_key: str, token: str, *, day: str | None = None) -> list[str]:
    """Commands to paste: send an announcement to 7A's guardians, read one guardian's inbox,
    mark Aarav absent (a follow-up: notified after the grace, reminded after the delay) and
    acknowledge his absence (which suppresses the reminder if it has not gone yet)."""
    event = {
        "kind": "announcement.posted",
        "audience": {"kind": "guardians_of_group", "groupIds": ["class-7a"]},
        "channels": ["in_app", "email"],
        "variables": {"title": "Sports day moved", "message": "It is now on Friday."},
    }
    auth_header = shlex.quote("Authorization: Bearer " + api_key)
    send = (
        f"curl -sS -X POST {base_url}/v1/events -H {auth_header}"
        " -H 'Content-Type: application/json'"
        f" -d {shlex.quote(json.dumps(event, separators=(',', ':')))}"
    )
    inbox = (
        f"curl -sS {base_url}/v1/me/notifications"
        f" -H {shlex.quote('Authorization: Bearer ' + token)}"
    )
    absent = absence_followup(day or date.today().isoformat())
    arm = (
        f"curl -sS -X POST {base_url}/v1/followups -H {auth_header}"
        " -H 'Content-Type: application/json'"
        f" -d {shlex.quote(json.dumps(absent, separators=(',', ':')))}"
    )
    acknowledge = (
        f"curl -sS -X POST {base_url}/v1/followups/{absent['key']}/acknowledge -H {auth_header}"
    )
    return [send, inbox, arm, acknowledge]


def absence_followup(day: str) -> dict[str, Any]:
    """The demo's follow-up body: Aarav absent on `day`, for his guardians."""
    student, name = DEMO_STUDENT
    return {
        "key": f"absence:{day}:{student}",
        "kind": "attendance.event",
        "reminderKind": "attendance.reminder",
        "audience": {"kind": "guardians_of_users", "userIds": [student]},
        "variables": {"studentName": name, "date": day, "eventType": "absent"},
        "graceSeconds": DEMO_GRACE_SECONDS,
        "reminderDelaySeconds": DEMO_REMINDER_DELAY_SECONDS,
    }


def broadcast_curl(base_url: str, principal: str, deputy: str) -> list[str]:
    """The two-person flow: the principal drafts a broadcast to every guardian, the deputy
    approves it (the principal's own approval would be refused), and anyone watches it."""
    draft = {
        "title": "School closed tomorrow",
        "kind": "announcement.posted",
        "audience": {"kind": "role", "roles": ["guardian"]},
        "channels": ["in_app", "email"],
        "variables": {"title": "School closed", "message": "The school is closed tomorrow."},
    }
    create = (
        f"ID=$(curl -sS -X POST {base_url}/v1/admin/broadcasts"
        f" -H {shlex.quote('Authorization: Bearer ' + principal)}"
        " -H 'Content-Type: application/json'"
        f" -d {shlex.quote(json.dumps(draft, separators=(',', ':')))}"
        " | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"id\"])')"
    )
    approve = (
        f"curl -sS -X POST {base_url}/v1/admin/broadcasts/$ID/approve"
        f" -H {shlex.quote('Authorization: Bearer ' + deputy)}"
        " -H 'Content-Type: application/json' -d '{\"version\":1}'"
    )
    watch = "herald broadcasts status $ID --tenant demo --follow"
    return [create, approve, watch]


@dataclass(frozen=True)
class DevInfo:
    """What `herald dev` tells the person at the keyboard once the API is listening."""

    base_url: str
    api_key: str
    guardian: str
    guardian_role: str
    token: str
    curl: list[str]
    # Draft (the principal), approve (the deputy), watch: the two-person broadcast flow.
    broadcast_curl: list[str] = field(default_factory=list)
    # Console sign-in links: the principal (a superadmin) and the deputy (the broadcast
    # approver, who has no dead-letter permission). The token rides in the fragment, which a
    # browser never sends to a server.
    console_operator: str = ""
    console_approver: str = ""

    @property
    def demo_url(self) -> str:
        """The demo page: pick a person, watch their inbox live (herald.demo.web)."""
        return f"{self.base_url}/"

    @property
    def outbox_url(self) -> str:
        """What the mock providers recorded instead of sending."""
        return f"{self.base_url}/outbox"


def console_link(base_url: str, token: str) -> str:
    return f"{base_url}/console/sign-in#token={token}"


def display_url(host: str, port: int) -> str:
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


async def run_dev(
    settings: Settings,
    database_url: str,
    state: DevState,
    *,
    host: str,
    port: int,
    announce: Callable[[DevInfo], None],
) -> None:
    """Load the demo school (and its reminder), make sure of the dev key, then run the API, the
    worker and the scheduler together until SIGINT/SIGTERM. The database must already be migrated.

    The providers are built once and shared (R-PROVIDER-3): the worker sends through them and the
    demo router's outbox reads the mocks' recordings from the very same instances.
    """
    from herald.api.app import create_app
    from herald.channels.providers import build_providers, close_providers
    from herald.db.engine import make_async_engine
    from herald.demo import web
    from herald.demo.loader import load_reachability, load_reminders, load_school
    from herald.demo.school import DEMO_GUARDIAN, DEPUTY, PRINCIPAL, SCHOOL
    from herald.kinds import get_registry
    from herald.realtime.hub import build_hub
    from herald.runtime import server
    from herald.runtime.scheduler import run_scheduler
    from herald.runtime.worker import run_worker

    registry = get_registry()
    engine = make_async_engine(
        database_url, pool_size=settings.db_pool_size, application_name="herald-dev"
    )
    providers = build_providers(settings)
    try:
        async with engine.begin() as conn:
            await load_school(conn, SCHOOL)
            await load_reachability(conn, settings, registry, SCHOOL)
            await load_reminders(conn, registry, SCHOOL)
            api_key = await ensure_dev_key(conn, SCHOOL.tenant_id, state)
        save_state(settings.data_dir, state)

        base_url = display_url(host, port)
        token = auth.sign_token(
            settings,
            tenant_id=SCHOOL.tenant_id,
            subject=DEMO_GUARDIAN,
            role=GUARDIAN_ROLE,
            ttl=timedelta(days=1),
        )
        principal = auth.sign_token(
            settings,
            tenant_id=SCHOOL.tenant_id,
            subject=PRINCIPAL[0],
            role="principal",
            ttl=timedelta(days=1),
        )
        deputy = auth.sign_token(
            settings,
            tenant_id=SCHOOL.tenant_id,
            subject=DEPUTY[0],
            role="deputy",
            ttl=timedelta(days=1),
        )
        info = DevInfo(
            base_url=base_url,
            api_key=api_key,
            guardian=DEMO_GUARDIAN,
            guardian_role=GUARDIAN_ROLE,
            token=token,
            curl=curl_examples(base_url, api_key, token),
            broadcast_curl=broadcast_curl(base_url, principal, deputy),
            console_operator=console_link(base_url, principal),
            console_approver=console_link(base_url, deputy),
        )

        hub = build_hub(settings, engine)
        app = create_app(settings, engine, registry, realtime=hub)
        # Dev only: `herald api` never mounts this router (see herald.demo.web).
        app.include_router(
            web.build_router(
                settings,
                school=SCHOOL,
                api_key=api_key,
                providers=providers,
                default_identity=(DEMO_GUARDIAN, GUARDIAN_ROLE),
                listen_host=host,
            )
        )

        stop, listening = asyncio.Event(), asyncio.Event()

        async def announce_when_listening() -> None:
            await listening.wait()
            announce(info)

        async def end_streams_on_stop() -> None:
            # Uvicorn waits for open connections before it shuts the app down, and a live
            # stream (the demo page's) never ends by itself: end them all once asked to stop,
            # or Ctrl-C would wait on the browser tab. Closing the hub is idempotent.
            await stop.wait()
            await hub.aclose()

        with server.stop_on_signals(stop):
            announcer = asyncio.create_task(announce_when_listening())
            try:
                await server.run_roles(
                    stop,
                    server.serve_api(
                        app, host=host, port=port, stop=stop, listening=listening, freeze=True
                    ),
                    run_worker(settings, engine, registry, stop, providers=providers),
                    run_scheduler(settings, engine, registry, stop),
                    end_streams_on_stop(),
                )
            finally:
                announcer.cancel()
    finally:
        # The worker closes only providers it built itself; these are ours.
        await close_providers(providers)
        await engine.dispose()
