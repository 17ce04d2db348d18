"""The console's routes: sign-in, sign-out, and the screens (herald api serves them under /console).

Every screen takes the signed-in operator from the session cookie and calls the admin services
with that operator, exactly as the API routes do with a JWT: the permission checks are the
services' own (an empty list, or a 404), and the console adds only one thing of its own — a
screen the operator may not use at all (dead letters without NotificationFailure_READ) is a 404
page, and its link is not shown.

Every response carries a Content-Security-Policy that allows scripts from /console/static only
(no inline script, no eval), and every state-changing request must carry the session's CSRF token
(a form field or, for htmx, the X-CSRF-Token header) or is refused with 403.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import jinja2
from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse
from fastapi.routing import APIRoute
from markupsafe import Markup
from sqlalchemy.ext.asyncio import AsyncConnection
from typing_extensions import override

from herald import vocabulary
from herald.admin.dead_letters import service as dead_letters
from herald.admin.history import service as history
from herald.admin.templates import service as templates
from herald.admin.templates.schemas import (
    PreviewRequest,
    TemplateCreate,
    TemplateTransition,
    TemplateUpdate,
)
from herald.admin.trace import reasons
from herald.admin.trace import service as trace
from herald.admin.trace.queries import PersonDeliveryFilters
from herald.auth import queries as auth_queries
from herald.auth import service as auth
from herald.auth.deps import state
from herald.console import audit_trail, outcomes, sessions
from herald.db import tenancy
from herald.errors import HeraldError, NotFound, Unauthenticated, ValidationFailed
from herald.feed import service as feed
from herald.kinds import Template
from herald.preferences.service import locked_categories
from herald.scheduling.broadcasts import service as broadcasts
from herald.scheduling.reminders import service as reminders

STATIC_DIR: Final = Path(__file__).with_name("static")
TEMPLATES_DIR: Final = Path(__file__).with_name("templates")

# name → media type: the only files served, so no request path reaches the file system.
STATIC_FILES: Final[Mapping[str, str]] = {
    "htmx.min.js": "text/javascript; charset=utf-8",
    "uPlot.iife.min.js": "text/javascript; charset=utf-8",
    "uPlot.min.css": "text/css; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS: Final[Mapping[str, str]] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}

ENV: Final = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


class SignInRequired(Exception):
    """No live session: the browser is sent to the sign-in page."""


class CsrfRefused(Exception):
    """A state-changing request without the session's CSRF token."""


class ConsoleRoute(APIRoute):
    """Renders the console's refusals as pages (not the API's JSON) and puts the security
    headers on every console response."""

    @override
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        original = super().get_route_handler()

        async def handler(request: Request) -> Response:
            try:
                response = await original(request)
            except SignInRequired:
                response = _to_sign_in(request)
            except CsrfRefused:
                response = _error_page(403, "This form has expired or did not come from here.")
            except NotFound:
                response = _error_page(404, "Not found.")
            except HeraldError as exc:
                response = _error_page(exc.status, exc.message)
            for name, value in SECURITY_HEADERS.items():
                response.headers.setdefault(name, value)
            return response

        return handler


router = APIRouter(prefix="/console", include_in_schema=False, route_class=ConsoleRoute)


def _to_sign_in(request: Request) -> Response:
    if request.headers.get("HX-Request"):
        return Response(status_code=401, headers={"HX-Redirect": "/console/sign-in"})
    return RedirectResponse("/console/sign-in", status_code=303)


def _error_page(status: int, message: str) -> HTMLResponse:
    html = ENV.get_template("error.html").render(status=status, message=message)
    return HTMLResponse(html, status_code=status)


# ---------------------------------------------------------------------------------------------
# The signed-in operator.


@dataclass(frozen=True)
class Console:
    request: Request
    operator: auth.Operator
    token: str
    csrf: str
    zone: ZoneInfo

    @property
    def may_history(self) -> bool:
        return self.operator.may(history.READ)

    @property
    def may_failures(self) -> bool:
        return self.operator.may(dead_letters.READ)

    @property
    def may_replay(self) -> bool:
        return self.operator.may(dead_letters.REPLAY)

    @property
    def may_templates(self) -> bool:
        return self.operator.may(templates.READ)

    def may(self, permission: str) -> bool:
        return self.operator.may(permission)

    @property
    def may_broadcasts(self) -> bool:
        """The screen appears when the feature is on and the role may read broadcasts."""
        return state(self.request).settings.feature_broadcasts and self.may(broadcasts.READ)

    @property
    def may_reminders(self) -> bool:
        return state(self.request).settings.feature_reminders and self.may(reminders.READ)


def _zone(name: str | None) -> ZoneInfo:
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    return ZoneInfo("UTC")


async def signed_in(request: Request) -> Console:
    """The session the cookie names, and the operator it stands for, with the permissions their
    role grants now (read afresh on every request, as authenticate_operator does for a JWT)."""
    token = request.cookies.get(sessions.SESSION_COOKIE)
    if not token:
        raise SignInRequired()
    async with state(request).engine.begin() as conn:
        session = await sessions.find(conn, token)
        if session is None:
            raise SignInRequired()
        found = await auth_queries.find_actor(
            conn, session.tenant_id, session.external_id, session.role_code
        )
        if found is None:
            raise SignInRequired()
        person_id, role_id, _scope, holds = found
        granted: list[str] = []
        superadmin = False
        if role_id is not None and holds:
            granted, superadmin = await auth_queries.role_grants(conn, role_id)
    operator = auth.Operator(
        tenant_id=session.tenant_id,
        actor_kind="person",
        actor_id=session.external_id,
        person_id=person_id,
        permissions=frozenset(granted),
        superadmin=superadmin,
    )
    return Console(
        request=request,
        operator=operator,
        token=token,
        csrf=sessions.csrf_for(token),
        zone=_zone(session.timezone),
    )


ConsoleDep = Annotated[Console, Depends(signed_in)]


@asynccontextmanager
async def tenant_transaction(console: Console) -> AsyncIterator[AsyncConnection]:
    """As herald.auth.deps.transaction: role herald_app, under the operator's tenant."""
    async with state(console.request).engine.begin() as conn:
        await tenancy.enter_tenant(conn, console.operator.tenant_id)
        yield conn


async def form_of(console: Console) -> dict[str, str]:
    """The posted form, refused unless it carries the session's CSRF token."""
    form = await console.request.form()
    values = {key: value for key, value in form.items() if isinstance(value, str)}
    given = values.get("csrf") or console.request.headers.get("X-CSRF-Token")
    if not sessions.same(given, console.csrf):
        raise CsrfRefused()
    return values


def when(zone: ZoneInfo) -> Callable[[datetime | None], Markup]:
    """A time in the operator's zone, with UTC on hover."""

    def render(moment: datetime | None) -> Markup:
        if moment is None:
            return Markup("—")
        utc = moment.astimezone(UTC)
        local = moment.astimezone(zone)
        return Markup('<time datetime="{iso}" title="{utc} UTC">{local}</time>').format(
            iso=utc.isoformat(),
            utc=utc.strftime("%Y-%m-%d %H:%M:%S"),
            local=local.strftime("%Y-%m-%d %H:%M %Z"),
        )

    return render


def render(console: Console, name: str, status: int = 200, **values: Any) -> HTMLResponse:
    request = console.request

    def page_url(cursor: str | None) -> str:
        return str(request.url.include_query_params(cursor=cursor)) if cursor else ""

    html = ENV.get_template(name).render(
        console=console,
        when=when(console.zone),
        page_url=page_url,
        path=request.url.path,
        **values,
    )
    return HTMLResponse(html, status_code=status)


def _blank(value: str | None) -> str | None:
    return value.strip() or None if value is not None else None


# ---------------------------------------------------------------------------------------------
# Static files, sign-in and sign-out.


@router.get("/static/{name}")
async def static(name: str) -> Response:
    media_type = STATIC_FILES.get(name)
    if media_type is None:
        raise NotFound()
    return FileResponse(
        STATIC_DIR / name, media_type=media_type, headers={"Cache-Control": "no-cache"}
    )


@router.get("/sign-in")
async def sign_in_page(request: Request) -> Response:
    """The sign-in form. Its double-submit token lives in a cookie of its own until sign-in."""
    token = request.cookies.get(sessions.SIGN_IN_COOKIE) or sessions.new_token()
    html = ENV.get_template("sign_in.html").render(csrf=token, message=None)
    response = HTMLResponse(html)
    _set_cookie(request, response, sessions.SIGN_IN_COOKIE, token, max_age=3600)
    return response


@router.post("/session")
async def start_session(request: Request) -> Response:
    """Exchange the host's operator JWT for a session: from the sign-in form (with its
    double-submit token), or as `Authorization: Bearer <JWT>` (a header no foreign page can
    set)."""
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("bearer "):
        credential = header[7:].strip()
    else:
        form = await request.form()
        given = form.get("csrf")
        expected = request.cookies.get(sessions.SIGN_IN_COOKIE)
        if not isinstance(given, str) or not expected or not sessions.same(given, expected):
            raise CsrfRefused()
        raw = form.get("token")
        credential = raw.strip() if isinstance(raw, str) else ""
    if not credential or credential.startswith(auth.KEY_PREFIX):
        return _sign_in_refused(request, "Paste an operator sign-in token (a JWT), not an API key.")
    app = state(request)
    try:
        async with app.engine.begin() as conn:
            claims = await auth.verify_token_async(app.settings, credential)
            operator = await auth.authenticate_operator(conn, app.settings, credential)
            if operator.person_id is None:
                raise Unauthenticated("not a person")
            expires = min(
                datetime.fromtimestamp(int(claims["exp"]), UTC),
                datetime.now(UTC) + sessions.MAX_SESSION,
            )
            role = claims.get("role")
            token = await sessions.start(
                conn,
                tenant_id=operator.tenant_id,
                person_id=operator.person_id,
                role_code=str(role) if role else None,
                expires_at=expires,
            )
    except Unauthenticated:
        return _sign_in_refused(request, "That sign-in token is not valid or has expired.")
    previous = request.cookies.get(sessions.SESSION_COOKIE)
    if previous:
        # A new sign-in replaces the browser's old session rather than leaving it alive.
        async with app.engine.begin() as conn:
            await sessions.end(conn, previous)
    response = RedirectResponse("/console/history", status_code=303)
    max_age = max(1, int((expires - datetime.now(UTC)).total_seconds()))
    _set_cookie(request, response, sessions.SESSION_COOKIE, token, max_age=max_age)
    response.delete_cookie(sessions.SIGN_IN_COOKIE, path="/console")
    return response


def _sign_in_refused(request: Request, message: str) -> HTMLResponse:
    token = request.cookies.get(sessions.SIGN_IN_COOKIE) or sessions.new_token()
    html = ENV.get_template("sign_in.html").render(csrf=token, message=message)
    response = HTMLResponse(html, status_code=401)
    _set_cookie(request, response, sessions.SIGN_IN_COOKIE, token, max_age=3600)
    return response


def _set_cookie(request: Request, response: Response, name: str, value: str, max_age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path="/console",
        httponly=True,
        samesite="strict",
        # Behind a TLS-terminating proxy the request arrives as http; the proxy's header only
        # ever makes the cookie stricter.
        secure=request.url.scheme == "https"
        or request.headers.get("X-Forwarded-Proto", "").lower() == "https",
    )


@router.post("/sign-out")
async def sign_out(console: ConsoleDep) -> Response:
    await form_of(console)
    async with state(console.request).engine.begin() as conn:
        await sessions.end(conn, console.token)
    response = RedirectResponse("/console/sign-in", status_code=303)
    response.delete_cookie(sessions.SESSION_COOKIE, path="/console")
    return response


@router.get("")
@router.get("/")
async def home(console: ConsoleDep) -> Response:
    return RedirectResponse("/console/history", status_code=303)


# ---------------------------------------------------------------------------------------------
# History, events and the trace.


@router.get("/history")
async def history_page(
    console: ConsoleDep,
    kind: str | None = None,
    category: str | None = None,
    status: str | None = None,
    cursor: str | None = None,
) -> Response:
    query = console.request.query_params
    filters = history.parse_event_filters(
        kind=_blank(kind),
        category=_blank(category),
        status=_blank(status),
        occurred_from=_blank(query.get("from")),
        occurred_to=_blank(query.get("to")),
    )
    page = history.parse_page(limit=20, cursor=_blank(cursor), pagination=None)
    async with tenant_transaction(console) as conn:
        listed = await history.list_history(conn, console.operator, filters, page)
    return render(
        console,
        "history.html",
        page=listed,
        filters={
            "kind": kind or "",
            "category": category or "",
            "status": status or "",
            "from": query.get("from", ""),
            "to": query.get("to", ""),
        },
        categories=vocabulary.CATEGORIES,
        states=vocabulary.EVENT_STATES,
    )


@router.get("/events/{event_id}")
async def event_page(
    console: ConsoleDep,
    event_id: str,
    channel: str | None = None,
    status: str | None = None,
    cursor: str | None = None,
) -> Response:
    channel, status = _blank(channel), _blank(status)
    if channel is not None and channel not in vocabulary.CHANNELS:
        raise ValidationFailed("unknown channel")
    if status is not None and status not in vocabulary.DELIVERY_STATUSES:
        raise ValidationFailed("unknown status")
    page = history.parse_page(limit=50, cursor=_blank(cursor), pagination=None)
    async with tenant_transaction(console) as conn:
        event = await history.get_history_event(conn, console.operator, event_id)
        deliveries = await history.list_event_deliveries(
            conn, console.operator, event_id, page, channel=channel, status=status
        )
    return render(
        console,
        "event.html",
        event=event,
        deliveries=deliveries,
        filters={"channel": channel or "", "status": status or ""},
        channels=vocabulary.CHANNELS,
        statuses=vocabulary.DELIVERY_STATUSES,
    )


@router.get("/events/{event_id}/people")
async def event_person_lookup(console: ConsoleDep, event_id: str, externalId: str = "") -> Response:
    """The "look up a person in this event" form's target."""
    external_id = externalId.strip()
    if not external_id:
        return RedirectResponse(f"/console/events/{event_id}", status_code=303)
    return RedirectResponse(
        str(console.request.url_for("recipient_page", event_id=event_id, external_id=external_id)),
        status_code=303,
    )


@router.get("/events/{event_id}/people/{external_id}")
async def recipient_page(console: ConsoleDep, event_id: str, external_id: str) -> Response:
    async with tenant_transaction(console) as conn:
        traced = await trace.trace_recipient(
            conn, console.operator, state(console.request).registry, event_id, external_id
        )
    return render(console, "trace.html", trace=traced, channel_word=reasons.channel_word)


@router.get("/deliveries/{delivery_id}")
async def delivery_why(console: ConsoleDep, delivery_id: str) -> Response:
    """A delivery row's "why?" link: the trace of the person it was for."""
    async with tenant_transaction(console) as conn:
        event_public_id, external_id = await trace.locate_delivery(
            conn, console.operator, delivery_id
        )
    if external_id is None:
        return _error_page(404, "The person this delivery was for has been erased.")
    return RedirectResponse(
        str(
            console.request.url_for(
                "recipient_page", event_id=str(event_public_id), external_id=external_id
            )
        ),
        status_code=303,
    )


@router.get("/deliveries/{delivery_id}/status")
async def delivery_status(console: ConsoleDep, delivery_id: str) -> Response:
    """A delivery's status as a fragment; polls itself while the delivery is still in flight,
    so a replay's result appears without a reload."""
    async with tenant_transaction(console) as conn:
        found = await trace.delivery_status(conn, console.operator, delivery_id)
    return render(console, "_delivery_status.html", delivery=found)


# ---------------------------------------------------------------------------------------------
# People.


@router.get("/people")
async def person_page(
    console: ConsoleDep,
    externalId: str = "",
    kind: str | None = None,
    channel: str | None = None,
    status: str | None = None,
    cursor: str | None = None,
) -> Response:
    external_id = externalId.strip()
    values: dict[str, Any] = {
        "external_id": external_id,
        "filters": {"kind": kind or "", "channel": channel or "", "status": status or ""},
        "channels": vocabulary.CHANNELS,
        "statuses": vocabulary.DELIVERY_STATUSES,
        "categories": vocabulary.CATEGORIES,
        "deliveries": None,
        "matrix": None,
    }
    if not external_id:
        return render(console, "person.html", **values)
    kind, channel, status = _blank(kind), _blank(channel), _blank(status)
    if kind is not None and not history.KIND_FILTER.match(kind):
        raise ValidationFailed("kind must be 1 to 200 printable characters")
    if channel is not None and channel not in vocabulary.CHANNELS:
        raise ValidationFailed("unknown channel")
    if status is not None and status not in vocabulary.DELIVERY_STATUSES:
        raise ValidationFailed("unknown status")
    page = history.parse_page(limit=20, cursor=_blank(cursor), pagination=None)
    registry = state(console.request).registry
    async with tenant_transaction(console) as conn:
        values["deliveries"] = await trace.person_deliveries(
            conn,
            console.operator,
            registry,
            external_id,
            PersonDeliveryFilters(kind=kind, channel=channel, status=status),
            page,
        )
        person = await trace.readable_person(conn, console.operator, external_id)
        view = await reasons.PreferenceView.load(conn, console.operator.tenant_id, person["id"])
    locked = locked_categories(registry)
    values["matrix"] = [
        (
            category,
            category in locked,
            [
                (channel_name, *view.rule(category, channel_name))
                for channel_name in vocabulary.CHANNELS
            ],
        )
        for category in vocabulary.CATEGORIES
    ]
    return render(console, "person.html", **values)


# ---------------------------------------------------------------------------------------------
# Dead letters: a screen only for operators who may read them; a 404 for everyone else.


def _failures_only(console: Console) -> None:
    if not console.may_failures:
        raise NotFound()


@router.get("/dead-letters")
async def dead_letters_page(
    console: ConsoleDep, channel: str | None = None, cursor: str | None = None
) -> Response:
    _failures_only(console)
    channel = _blank(channel)
    if channel is not None and channel not in vocabulary.CHANNELS:
        raise ValidationFailed("unknown channel")
    page = history.parse_page(limit=20, cursor=_blank(cursor), pagination=None)
    async with tenant_transaction(console) as conn:
        listed = await dead_letters.list_dead_letters(conn, console.operator, page, channel=channel)
    return render(
        console,
        "dead_letters.html",
        page=listed,
        channel=channel or "",
        channels=vocabulary.CHANNELS,
    )


@router.post("/dead-letters/{dead_letter_id}/replay")
async def replay(console: ConsoleDep, dead_letter_id: str) -> Response:
    _failures_only(console)
    await form_of(console)
    async with tenant_transaction(console) as conn:
        result = await dead_letters.replay_dead_letter(conn, console.operator, dead_letter_id)
    if console.request.headers.get("HX-Request"):
        return render(console, "_replayed.html", delivery_id=result.delivery_id)
    return RedirectResponse("/console/dead-letters", status_code=303)


# ---------------------------------------------------------------------------------------------
# Template overrides.


def _templates_only(console: Console) -> None:
    if not console.may_templates:
        raise NotFound()


@router.get("/templates")
async def templates_page(console: ConsoleDep, cursor: str | None = None) -> Response:
    _templates_only(console)
    page = templates.parse_page(limit=20, cursor=_blank(cursor), pagination=None)
    async with tenant_transaction(console) as conn:
        kinds = await templates.list_kinds(
            conn, console.operator, state(console.request).registry, page
        )
    return render(console, "templates.html", kinds=kinds)


def _registry_wording(
    console: Console, kind_name: str, channel: str, locale: str
) -> tuple[str | None, str | None]:
    kind = state(console.request).registry.get(kind_name)
    if kind is None or channel not in kind.channels:
        raise NotFound()
    builder = kind.templates.get(channel, {}).get(locale) or kind.templates.get(channel, {}).get(
        kind.default_locale
    )
    if isinstance(builder, Template):
        return builder.title, builder.body
    return None, None


@router.get("/templates/new")
async def template_new(console: ConsoleDep, kind: str, channel: str, locale: str) -> Response:
    _templates_only(console)
    title, body = _registry_wording(console, kind, channel, locale)
    return render(
        console,
        "template_edit.html",
        template=None,
        kind=kind,
        channel=channel,
        locale=locale,
        title=title or "",
        body=body or "",
        registry_title=title,
        registry_body=body,
        trail=[],
        error=None,
    )


@router.post("/templates")
async def template_create(console: ConsoleDep) -> Response:
    _templates_only(console)
    form = await form_of(console)
    data = TemplateCreate(
        kind=form.get("kind", ""),
        channel=form.get("channel", ""),
        locale=form.get("locale", ""),
        title=_blank(form.get("title")),
        body=form.get("body", ""),
    )
    async with tenant_transaction(console) as conn:
        created = await templates.create_template(
            conn, console.operator, state(console.request).registry, data
        )
    return RedirectResponse(f"/console/templates/{created.id}", status_code=303)


@router.get("/templates/{template_id}")
async def template_page(console: ConsoleDep, template_id: str) -> Response:
    _templates_only(console)
    async with tenant_transaction(console) as conn:
        found = await templates.get_template(conn, console.operator, template_id)
        trail = await audit_trail.template_trail(conn, console.operator, str(found.id))
    registry_title, registry_body = _registry_wording(
        console, found.kind, found.channel, found.locale
    )
    return render(
        console,
        "template_edit.html",
        template=found,
        kind=found.kind,
        channel=found.channel,
        locale=found.locale,
        title=found.title or "",
        body=found.body,
        registry_title=registry_title,
        registry_body=registry_body,
        trail=trail,
        error=None,
    )


@router.post("/templates/preview")
async def template_preview(console: ConsoleDep) -> Response:
    """The live preview beside the editor (htmx, on input): renders with sample values, writes
    nothing."""
    _templates_only(console)
    form = await form_of(console)
    data = PreviewRequest(
        kind=form.get("kind", ""),
        channel=form.get("channel", ""),
        locale=form.get("locale", ""),
        title=_blank(form.get("title")),
        body=form.get("body") or None,
    )
    try:
        async with tenant_transaction(console) as conn:
            shown = await templates.preview(
                conn, console.operator, state(console.request).registry, data
            )
    except ValidationFailed as exc:
        return render(console, "_preview.html", preview=None, error=exc.message)
    return render(console, "_preview.html", preview=shown, error=None)


@router.post("/templates/{template_id}")
async def template_update(console: ConsoleDep, template_id: str) -> Response:
    _templates_only(console)
    form = await form_of(console)
    action = form.get("action", "save")
    version = templates.parse_version(form.get("version"))
    if version is None:
        raise ValidationFailed("version is required")
    registry = state(console.request).registry
    async with tenant_transaction(console) as conn:
        if action == "publish":
            await templates.publish_template(
                conn, console.operator, registry, template_id, TemplateTransition(version=version)
            )
        elif action == "archive":
            await templates.archive_template(
                conn, console.operator, template_id, TemplateTransition(version=version)
            )
        else:
            await templates.update_template(
                conn,
                console.operator,
                registry,
                template_id,
                TemplateUpdate(
                    version=version, title=_blank(form.get("title")), body=form.get("body", "")
                ),
            )
    return RedirectResponse(f"/console/templates/{template_id}", status_code=303)


# ---------------------------------------------------------------------------------------------
# The operations feed.


@router.get("/feed")
async def feed_page(console: ConsoleDep, cursor: str | None = None) -> Response:
    params = feed.parse_list_params(
        limit=20, cursor=_blank(cursor), unread_only=None, pagination=None
    )
    async with tenant_transaction(console) as conn:
        page = await feed.list_feed(conn, console.operator, params)
    return render(console, "feed.html", page=page)


@router.get("/feed/badge")
async def feed_badge(console: ConsoleDep) -> Response:
    async with tenant_transaction(console) as conn:
        unread = await feed.unread_count(conn, console.operator)
    return render(console, "_badge.html", count=unread.count)


@router.post("/feed/read-all")
async def feed_read_all(console: ConsoleDep) -> Response:
    await form_of(console)
    async with tenant_transaction(console) as conn:
        await feed.mark_all_read(conn, console.operator)
    return RedirectResponse("/console/feed", status_code=303)


@router.post("/feed/{notification_id}/read")
async def feed_read(console: ConsoleDep, notification_id: str) -> Response:
    await form_of(console)
    async with tenant_transaction(console) as conn:
        await feed.mark_read(conn, console.operator, notification_id)
    return RedirectResponse("/console/feed", status_code=303)


# ---------------------------------------------------------------------------------------------
# Outcomes per channel over time, and queue depth.


@router.get("/outcomes")
async def outcomes_page(console: ConsoleDep) -> Response:
    if not console.may_history:
        raise NotFound()
    async with tenant_transaction(console) as conn:
        depth = await outcomes.queue_depth(conn, console.operator)
    return render(console, "outcomes.html", depth=depth, channels=vocabulary.CHANNELS)


@router.get("/outcomes/data")
async def outcomes_data(console: ConsoleDep, hours: int = 24) -> Response:
    if not console.may_history:
        raise NotFound()
    async with tenant_transaction(console) as conn:
        series = await outcomes.outcome_series(conn, console.operator, hours=hours)
    return JSONResponse(series.model_dump(by_alias=True))


# ---------------------------------------------------------------------------------------------
# Broadcasts: draft, the second person's approval, cancel, live progress.


def _broadcasts_only(console: Console) -> None:
    if not console.may_broadcasts:
        raise NotFound()


def _json_field(form: Mapping[str, str], name: str, default: object) -> object:
    raw = (form.get(name) or "").strip()
    if not raw:
        return default
    try:
        return json.loads(raw)
    except ValueError:
        raise ValidationFailed(f"{name} must be JSON") from None


@router.get("/broadcasts")
async def broadcasts_page(console: ConsoleDep, cursor: str | None = None) -> Response:
    _broadcasts_only(console)
    page = templates.parse_page(limit=20, cursor=_blank(cursor), pagination=None)
    async with tenant_transaction(console) as conn:
        listed = await broadcasts.list_broadcasts(conn, console.operator, page)
    return render(console, "broadcasts.html", page=listed)


@router.get("/broadcasts/new")
async def broadcast_new(console: ConsoleDep) -> Response:
    _broadcasts_only(console)
    if not console.may(broadcasts.CREATE):
        raise NotFound()
    kinds = sorted(kind.name for kind in state(console.request).registry)
    return render(console, "broadcast_new.html", kinds=kinds, channels=vocabulary.CHANNELS)


@router.post("/broadcasts")
async def broadcast_create(console: ConsoleDep) -> Response:
    _broadcasts_only(console)
    form = await console.request.form()
    values = await form_of(console)
    raw: dict[str, object] = {
        "title": values.get("title", ""),
        "kind": values.get("kind", ""),
        "audience": _json_field(values, "audience", {}),
        "variables": _json_field(values, "variables", {}),
        "channels": [c for c in form.getlist("channels") if isinstance(c, str)] or None,
    }
    if _blank(values.get("scheduledFor")):
        raw["scheduledFor"] = values["scheduledFor"].strip()
    async with tenant_transaction(console) as conn:
        created = await broadcasts.create_broadcast(
            conn, console.operator, state(console.request).registry, raw
        )
    return RedirectResponse(f"/console/broadcasts/{created.id}", status_code=303)


@router.get("/broadcasts/{broadcast_id}")
async def broadcast_page(console: ConsoleDep, broadcast_id: str) -> Response:
    _broadcasts_only(console)
    async with tenant_transaction(console) as conn:
        found = await broadcasts.get_broadcast(conn, console.operator, broadcast_id)
    return render(
        console,
        "broadcast.html",
        broadcast=found,
        mine=found.created_by == f"person:{console.operator.actor_id}",
    )


@router.get("/broadcasts/{broadcast_id}/progress")
async def broadcast_progress(console: ConsoleDep, broadcast_id: str) -> Response:
    """The live counts (polls itself while the broadcast is still on its way)."""
    _broadcasts_only(console)
    async with tenant_transaction(console) as conn:
        found = await broadcasts.get_broadcast(conn, console.operator, broadcast_id)
    return render(console, "_broadcast_progress.html", broadcast=found)


@router.post("/broadcasts/{broadcast_id}/approve")
async def broadcast_approve(console: ConsoleDep, broadcast_id: str) -> Response:
    _broadcasts_only(console)
    form = await form_of(console)
    version = templates.parse_version(form.get("version"))
    async with tenant_transaction(console) as conn:
        await broadcasts.approve_broadcast(
            conn,
            console.operator,
            state(console.request).registry,
            broadcast_id,
            {"version": version},
        )
    return RedirectResponse(f"/console/broadcasts/{broadcast_id}", status_code=303)


@router.post("/broadcasts/{broadcast_id}/cancel")
async def broadcast_cancel(console: ConsoleDep, broadcast_id: str) -> Response:
    _broadcasts_only(console)
    await form_of(console)
    async with tenant_transaction(console) as conn:
        await broadcasts.cancel_broadcast(conn, console.operator, broadcast_id)
    return RedirectResponse(f"/console/broadcasts/{broadcast_id}", status_code=303)


# ---------------------------------------------------------------------------------------------
# Reminders, with their next occurrences.

NEXT_OCCURRENCES = 3


@router.get("/reminders")
async def reminders_page(console: ConsoleDep, cursor: str | None = None) -> Response:
    if not console.may_reminders:
        raise NotFound()
    page = templates.parse_page(limit=20, cursor=_blank(cursor), pagination=None)
    async with tenant_transaction(console) as conn:
        listed = await reminders.list_reminders(conn, console.operator, page)
        upcoming = {
            item.id: (
                await reminders.preview_occurrences(
                    conn, console.operator, str(item.id), None, NEXT_OCCURRENCES
                )
            ).items
            if item.enabled
            else []
            for item in listed.items
        }
    return render(console, "reminders.html", page=listed, upcoming=upcoming)
