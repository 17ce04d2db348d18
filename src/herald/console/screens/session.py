"""Signing in and out: the sign-in form, exchanging the host's operator JWT for a session
cookie, and ending the session."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from herald.auth import service as auth
from herald.auth.deps import state
from herald.console import core, sessions
from herald.console.core import ENV, ConsoleDep, CsrfRefused, form_of
from herald.errors import Unauthenticated

router = core.screen_router()


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
