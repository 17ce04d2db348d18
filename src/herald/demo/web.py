"""The demo page and the outbox: routes `herald dev` adds to its API, and only `herald dev`.

`herald api` never includes this router: it hands out end-user tokens for anyone in the demo
school and shows the dev API key and every recorded message to whoever asks, which is what a
laptop demo needs and what no deployment may expose.

- `GET /` — the demo page (static HTML + JavaScript under demo/static/, no build step): pick a
  person, watch their inbox and unread badge change live, mark items read, switch preferences,
  send a test announcement.
- `GET /outbox` — what the mock providers "sent", per channel, newest first.
- `GET /dev/people`, `POST /dev/token`, `GET /dev/config`, `GET /dev/outbox` — the JSON behind
  them.

The outbox reads the SAME provider instances the worker sends through (R-PROVIDER-3): a second
MockProvider would record into a list nobody reads. The mock keeps no send time, so messages are
ordered newest first within each channel.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Final

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse

from herald import vocabulary
from herald.auth import service as auth
from herald.channels import email
from herald.channels.base import Message, Provider
from herald.channels.mock import MockProvider
from herald.channels.teams import webhook_host
from herald.config import Settings
from herald.demo.schemas import (
    DemoConfig,
    DemoGroup,
    DemoIdentity,
    DemoPeople,
    DemoToken,
    Outbox,
    OutboxChannel,
    OutboxMessage,
    TokenRequest,
)
from herald.demo.school import School
from herald.errors import Forbidden, NotFound, PersonNotFound
from herald.kinds.sample import ANNOUNCEMENT
from herald.preferences import service as preferences

STATIC_DIR: Final = Path(__file__).with_name("static")
WILDCARD_HOSTS: Final = frozenset({"0.0.0.0", "::", ""})
LOCAL_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "::1"})
TOKEN_TTL: Final = timedelta(hours=12)

# name → media type: the only files served, so no request path ever reaches the file system.
STATIC_FILES: Final[Mapping[str, str]] = {
    "style.css": "text/css; charset=utf-8",
    "common.js": "text/javascript; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "outbox.js": "text/javascript; charset=utf-8",
}

# The pages load their own scripts and styles only; the email previews are srcdoc iframes with
# sandbox="" (no script, opaque origin), and inherit this policy as defence in depth. Inline
# styles stay allowed because rendered emails carry them.
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-src 'self'; object-src 'none'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
PAGE_HEADERS: Final[Mapping[str, str]] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # A development page: always serve the file on disk as it is now.
    "Cache-Control": "no-store",
}


def build_router(
    settings: Settings,
    *,
    school: School,
    api_key: str,
    providers: Mapping[str, Provider],
    default_identity: tuple[str, str],
    listen_host: str,
) -> APIRouter:
    """The dev-only router over the demo school, the dev key and the process's providers.

    `default_identity` is the (external id, role) the page opens first. `listen_host` is the
    address `herald dev` listens on: unless it is a wildcard (the developer chose to expose the
    demo), the routes answer only requests addressed to it or to localhost, so a web page that
    re-points its own name at 127.0.0.1 (DNS rebinding) cannot read the dev key or mint tokens.
    """
    allowed = allowed_hosts(listen_host)

    async def addressed_to_this_machine(request: Request) -> None:
        if allowed is not None and _host_name(request.headers.get("host", "")) not in allowed:
            raise Forbidden("the demo routes answer only requests addressed to this machine")

    router = APIRouter(include_in_schema=False, dependencies=[Depends(addressed_to_this_machine)])
    identities = demo_identities(school)
    by_key = {(i.external_id, i.role): i for i in identities}

    @router.get("/")
    async def demo_page() -> FileResponse:
        return _page("index.html")

    @router.get("/outbox")
    async def outbox_page() -> FileResponse:
        return _page("outbox.html")

    @router.get("/dev/static/{name}")
    async def static_file(name: str) -> FileResponse:
        media_type = STATIC_FILES.get(name)
        if media_type is None:
            raise NotFound("no such file")
        return FileResponse(STATIC_DIR / name, media_type=media_type, headers=dict(PAGE_HEADERS))

    @router.get("/dev/people", response_model=DemoPeople)
    async def people() -> DemoPeople:
        return DemoPeople(
            tenant=school.tenant_id,
            people=identities,
            default_external_id=default_identity[0],
            default_role=default_identity[1],
        )

    @router.post("/dev/token", response_model=DemoToken)
    async def token(body: TokenRequest) -> DemoToken:
        identity = by_key.get((body.external_id, body.role))
        if identity is None:
            raise PersonNotFound("no demo person with that id holds that role")
        signed = auth.sign_token(
            settings,
            tenant_id=school.tenant_id,
            subject=identity.external_id,
            role=identity.role,
            ttl=TOKEN_TTL,
        )
        return DemoToken(
            token=signed, external_id=identity.external_id, role=identity.role, name=identity.name
        )

    @router.get("/dev/config", response_model=DemoConfig)
    async def config() -> DemoConfig:
        return DemoConfig(
            tenant=school.tenant_id,
            api_key=api_key,
            groups=[DemoGroup(id=g.external_id, name=g.name) for g in school.groups],
            # The channels the page's test announcement may pick: announcement.posted's.
            channels=[c for c in vocabulary.CHANNELS if c in ANNOUNCEMENT.channels],
            preference_defaults={
                category: {
                    channel: preferences.category_default(category, channel)
                    for channel in vocabulary.CHANNELS
                }
                for category in vocabulary.CATEGORIES
            },
        )

    @router.get("/dev/outbox", response_model=Outbox)
    async def outbox() -> Outbox:
        return read_outbox(settings, providers)

    return router


def allowed_hosts(listen_host: str) -> frozenset[str] | None:
    """Host names the demo routes answer to; None (any) when listening on every address."""
    if listen_host in WILDCARD_HOSTS:
        return None
    return LOCAL_HOSTS | {listen_host.strip("[]").lower()}


def _host_name(header: str) -> str:
    """The name part of a Host header: `127.0.0.1:8000` → `127.0.0.1`, `[::1]:80` → `::1`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _page(name: str) -> FileResponse:
    return FileResponse(
        STATIC_DIR / name, media_type="text/html; charset=utf-8", headers=dict(PAGE_HEADERS)
    )


def read_outbox(settings: Settings, providers: Mapping[str, Provider]) -> Outbox:
    """Every remote channel's recording, newest first; a channel with a real provider is listed
    as not recording."""
    channels: list[OutboxChannel] = []
    for channel in vocabulary.CHANNELS:
        provider = providers.get(channel)
        if provider is None:
            continue
        recorded = provider.sent_messages if isinstance(provider, MockProvider) else None
        channels.append(
            OutboxChannel(
                channel=channel,
                provider=provider.name,
                recording=recorded is not None,
                # A snapshot first: the worker may append while this answer is built.
                messages=[_message(settings, m) for m in reversed(list(recorded or ()))],
            )
        )
    return Outbox(channels=channels)


def _message(settings: Settings, message: Message) -> OutboxMessage:
    sender, body, body_html, to = None, message.body, message.body_html, message.to
    title = message.title
    if message.template is not None:
        # WhatsApp sends the approved template, not the words: name it beside the text it has.
        template = message.template
        title = f"template {template.name} ({template.language})"
    if message.channel == "teams":
        # A Teams webhook URL is a credential: the outbox names its host only.
        to = f"webhook on {webhook_host(message.to) or '?'}"
    if message.channel == "email":
        # The email as the email providers would build it: the HTML layout and the text part.
        built = email.build_email(message, settings)
        sender, body, body_html = built.sender, built.text, built.html
    return OutboxMessage(
        channel=message.channel,
        sender=sender,
        to=to,
        title=title,
        body=body,
        body_html=body_html,
        action_url=message.action_url,
        platform=message.platform,
        kind=message.kind,
        priority=message.priority,
    )


def demo_identities(school: School) -> list[DemoIdentity]:
    """One picker entry per (person, role), guardians first (they are who the demo is about)."""
    roles = {r.code: r for r in school.roles}
    groups = {g.external_id: g.name for g in school.groups}
    names = {p.external_id: p.full_name for p in school.people}
    class_of = {m.person: m.group for m in school.memberships if m.member_role == "student"}
    teaches = {m.person: m.group for m in school.memberships if m.member_role == "teacher"}
    children: dict[str, list[str]] = {}
    for g in school.guardianships:
        children.setdefault(g.guardian, []).append(g.student)
    with_device = {d.person for d in school.devices}
    order = {"guardian": 0, "teacher": 1, "principal": 2, "student": 3}

    def describe(external_id: str, role: str) -> str:
        if role == "guardian":
            kids = [
                f"{names[c].split()[0]} ({groups.get(class_of.get(c, ''), '?')})"
                for c in children.get(external_id, [])
            ]
            return "parent of " + ", ".join(kids)
        if role == "teacher":
            return f"teaches {groups.get(teaches.get(external_id, ''), '?')}"
        if role == "student":
            return groups.get(class_of.get(external_id, ""), "student")
        return roles[role].name if role in roles else role

    identities: list[DemoIdentity] = []
    for person in school.people:
        reachable = []
        if person.email:
            reachable.append("email")
        if person.phone:
            reachable.append("sms")
        if person.external_id in with_device:
            reachable.append("push")
        if person.telegram_chat_id:
            reachable.append("telegram")
        if person.slack_id:
            reachable.append("slack")
        for role in person.roles:
            identities.append(
                DemoIdentity(
                    external_id=person.external_id,
                    name=person.full_name,
                    role=role,
                    role_name=roles[role].name if role in roles else role,
                    description=describe(person.external_id, role),
                    reachable=reachable,
                )
            )
    identities.sort(key=lambda i: (order.get(i.role, 9), i.name))
    return identities
