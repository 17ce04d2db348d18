"""Credentials: API keys for the host's server-side calls, JWTs for end users and operators."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.auth import queries
from herald.config import Settings
from herald.errors import (
    ConfigurationError,
    Forbidden,
    NotFound,
    Unauthenticated,
    ValidationFailed,
)

KEY_PREFIX = "hk_"


@dataclass(frozen=True)
class ApiCaller:
    tenant_id: str
    scopes: frozenset[str]

    def allows(self, scope: str) -> bool:
        return "*" in self.scopes or scope in self.scopes


@dataclass(frozen=True)
class Actor:
    """An end user (or operator) as the verified token says: who, in which tenant, as which role."""

    tenant_id: str
    external_id: str
    person_id: int
    role_code: str | None
    # The active role's id, or None when the token names no role (or one that does not exist).
    role_id: int | None
    role_scope_kind: str | None
    holds_role: bool


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


async def create_api_key(
    conn: AsyncConnection, *, tenant_id: str, scopes: Sequence[str], name: str = "default"
) -> str:
    """Create a key and return it; only its hash is stored, so this is the one time it is seen."""
    unknown = [s for s in scopes if s != "*" and s not in vocabulary.API_SCOPES]
    if unknown or not scopes:
        raise ValidationFailed(
            f"unknown scope(s) {unknown}; known: {', '.join(vocabulary.API_SCOPES)} or *"
        )
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    await queries.insert_api_key(
        conn, tenant_id=tenant_id, name=name, prefix=key[:10], key_hash=hash_key(key), scopes=scopes
    )
    return key


async def authenticate_key(conn: AsyncConnection, key: str) -> ApiCaller:
    if not key.startswith(KEY_PREFIX):
        raise Unauthenticated("an API key is required")
    found = await queries.find_api_key(conn, hash_key(key))
    if found is None:
        raise Unauthenticated("unknown or revoked API key")
    tenant_id, scopes = found
    return ApiCaller(tenant_id=tenant_id, scopes=frozenset(scopes))


def sign_token(
    settings: Settings,
    *,
    tenant_id: str,
    subject: str,
    role: str | None = None,
    ttl: timedelta = timedelta(hours=12),
) -> str:
    """Sign an HS256 token as a host would; for development and tests."""
    if not settings.jwt_secret:
        raise ConfigurationError("HERALD_JWT_SECRET is required to sign tokens")
    claims: dict[str, Any] = {"sub": subject, "tid": tenant_id, "exp": datetime.now(UTC) + ttl}
    if role:
        claims["role"] = role
    return jwt.encode(claims, settings.jwt_secret, algorithm="HS256")


def verify_token(settings: Settings, token: str) -> dict[str, Any]:
    if settings.jwt_public_key:
        key, algorithms = settings.jwt_public_key, ["RS256"]
    elif settings.jwt_secret:
        key, algorithms = settings.jwt_secret, ["HS256"]
    else:
        raise Unauthenticated("this Herald has no JWT key configured")
    try:
        claims: dict[str, Any] = jwt.decode(
            token, key, algorithms=algorithms, options={"require": ["sub", "tid", "exp"]}
        )
    except jwt.PyJWTError as exc:
        raise Unauthenticated(f"invalid token: {exc}") from None
    return claims


async def authenticate_actor(conn: AsyncConnection, settings: Settings, token: str) -> Actor:
    claims = verify_token(settings, token)
    tenant_id, subject = str(claims["tid"]), str(claims["sub"])
    role_code = claims.get("role")
    role_code = str(role_code) if role_code else None
    found = await queries.find_actor(conn, tenant_id, subject, role_code)
    if found is None:
        # A deleted or unknown person holds no session here.
        raise Unauthenticated("unknown person")
    person_id, role_id, scope_kind, holds = found
    return Actor(
        tenant_id=tenant_id,
        external_id=subject,
        person_id=person_id,
        role_code=role_code,
        role_id=role_id,
        role_scope_kind=scope_kind,
        holds_role=holds,
    )


@dataclass(frozen=True)
class Operator:
    """Someone using the admin surface: a person acting through their active role, or an API key
    with the `admin` scope (which acts as a superadmin of its tenant).

    Permissions come from the directory at request time, so the history screen and the live feed
    can never disagree about who may see what.
    """

    tenant_id: str
    actor_kind: str  # "person" | "api_key"
    actor_id: str  # the person's external id, or the key's public id
    person_id: int | None
    permissions: frozenset[str]
    superadmin: bool

    def may(self, permission: str) -> bool:
        return self.superadmin or permission in self.permissions


async def authenticate_operator(
    conn: AsyncConnection, settings: Settings, credential: str
) -> Operator:
    if credential.startswith(KEY_PREFIX):
        caller = await authenticate_key(conn, credential)
        if not caller.allows("admin"):
            raise Forbidden("this API key lacks the admin scope")
        key_id = await queries.api_key_public_id(conn, hash_key(credential))
        return Operator(
            tenant_id=caller.tenant_id,
            actor_kind="api_key",
            actor_id=key_id or "api_key",
            person_id=None,
            permissions=frozenset(),
            superadmin=True,
        )
    actor = await authenticate_actor(conn, settings, credential)
    permissions: frozenset[str] = frozenset()
    superadmin = False
    # Only a role the person still holds grants anything; no active role grants nothing.
    if actor.role_id is not None and actor.holds_role:
        granted, superadmin = await queries.role_grants(conn, actor.role_id)
        permissions = frozenset(granted)
    return Operator(
        tenant_id=actor.tenant_id,
        actor_kind="person",
        actor_id=actor.external_id,
        person_id=actor.person_id,
        permissions=permissions,
        superadmin=superadmin,
    )


def require_permission(operator: Operator, permission: str) -> None:
    """For id-addressed admin routes and mutations: a caller without `permission` is told the
    row does not exist (404), never 403, which would confirm it does (R-SEC-7). List routes
    instead answer an empty page."""
    if not operator.may(permission):
        raise NotFound()
