"""Console sessions: an operator JWT exchanged for a server-side session (POST /console/session).

The cookie carries a random token (256 bits); the table keeps only its sha256, the tenant, the
person and the active role's code. A session lasts as long as the JWT it was exchanged for, and
never more than MAX_SESSION. Sign-out deletes the row, so a copied cookie dies with it; retention
deletes expired rows; erasing the person deletes theirs (foreign key CASCADE).

The CSRF token of a session is an HMAC of the session token: the server recomputes it from the
cookie, a cross-site page cannot (the cookie is HttpOnly and SameSite=Strict), and nothing more is
stored. Before sign-in, the sign-in form is protected by a double-submit token in a cookie of its
own (also SameSite=Strict), so a foreign page cannot sign a browser into someone else's session.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from herald.console import queries

SESSION_COOKIE = "herald_console"
SIGN_IN_COOKIE = "herald_console_sign_in"
MAX_SESSION = timedelta(hours=12)


def new_token() -> str:
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def csrf_for(token: str) -> str:
    return hmac.new(token.encode(), b"herald-console-csrf", hashlib.sha256).hexdigest()


def same(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


@dataclass(frozen=True)
class Session:
    tenant_id: str
    person_id: int
    external_id: str
    role_code: str | None
    timezone: str | None
    expires_at: datetime


async def start(
    conn: AsyncConnection,
    *,
    tenant_id: str,
    person_id: int,
    role_code: str | None,
    expires_at: datetime,
) -> str:
    """A new session; returns the cookie's token (only its hash is stored)."""
    token = new_token()
    await queries.insert_session(
        conn,
        tenant_id=tenant_id,
        token_hash=token_hash(token),
        person_id=person_id,
        role_code=role_code,
        expires_at=expires_at,
    )
    return token


async def find(conn: AsyncConnection, token: str) -> Session | None:
    """The live session a cookie names, across tenants (run as the owner, as key lookup is): the
    tenant is what the session says, never what the request says."""
    row = await queries.find_live_session(conn, token_hash(token))
    if row is None:
        return None
    return Session(
        tenant_id=row["tenant_id"],
        person_id=row["person_id"],
        external_id=row["external_id"],
        role_code=row["role_code"],
        timezone=row["timezone"],
        expires_at=row["expires_at"],
    )


async def end(conn: AsyncConnection, token: str) -> bool:
    return await queries.delete_session(conn, token_hash(token)) > 0
