"""What every console screen shares: the route class that turns refusals into pages and puts the
security headers on, the signed-in operator read from the session cookie, the CSRF check of a
posted form, the tenant transaction, and rendering a Jinja template.

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

from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import jinja2
from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.routing import APIRoute
from markupsafe import Markup
from sqlalchemy.ext.asyncio import AsyncConnection
from typing_extensions import override

from herald.admin.dead_letters import service as dead_letters
from herald.admin.history import service as history
from herald.admin.providers import service as provider_accounts
from herald.admin.templates import service as templates
from herald.auth import queries as auth_queries
from herald.auth import service as auth
from herald.auth.deps import state
from herald.console import sessions
from herald.db import tenancy
from herald.errors import HeraldError, NotFound
from herald.scheduling.broadcasts import service as broadcasts
from herald.scheduling.reminders import service as reminders

TEMPLATES_DIR: Final = Path(__file__).with_name("templates")

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
                response = to_sign_in(request)
            except CsrfRefused:
                response = error_page(403, "This form has expired or did not come from here.")
            except HeraldError as exc:
                if wants_json(request):
                    response = error_json(exc)
                elif isinstance(exc, NotFound):
                    response = error_page(404, "Not found.")
                else:
                    response = error_page(exc.status, exc.message)
            for name, value in SECURITY_HEADERS.items():
                response.headers.setdefault(name, value)
            return response

        return handler


def screen_router() -> APIRouter:
    """A screen's router: under /console, out of the OpenAPI document, with ConsoleRoute."""
    return APIRouter(prefix="/console", include_in_schema=False, route_class=ConsoleRoute)


def to_sign_in(request: Request) -> Response:
    if request.headers.get("HX-Request"):
        return Response(status_code=401, headers={"HX-Redirect": "/console/sign-in"})
    return RedirectResponse("/console/sign-in", status_code=303)


def wants_json(request: Request) -> bool:
    """console.js's own calls ask for JSON: their refusals are the API's envelope, code and all."""
    return "application/json" in request.headers.get("accept", "")


def error_json(error: HeraldError) -> JSONResponse:
    # The API's envelope (herald.api.app.error_body), which this surface may not import.
    body = {"error": {"code": error.code, "message": error.message}}
    return JSONResponse(body, status_code=error.status)


def error_page(status: int, message: str) -> HTMLResponse:
    html = ENV.get_template("error.html").render(status=status, message=message)
    return HTMLResponse(html, status_code=status)


# ---------------------------------------------------------------------------------------------
# The signed-in operator, the CSRF check and rendering.


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
    def may_providers(self) -> bool:
        return self.operator.may(provider_accounts.READ)

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


def blank(value: str | None) -> str | None:
    return value.strip() or None if value is not None else None
