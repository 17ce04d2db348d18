"""Credentials: API keys for the host's server-side calls, JWTs for end users and operators."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.auth import queries
from herald.config import Settings
from herald.db.compiled import Driver
from herald.errors import (
    ConfigurationError,
    Conflict,
    Forbidden,
    JwksUnavailable,
    NotFound,
    Unauthenticated,
    ValidationFailed,
)

KEY_PREFIX = "hk_"


@dataclass(frozen=True)
class ApiCaller:
    tenant_id: str
    scopes: frozenset[str]
    # The key's public id (what `herald keys list` shows): the per-key rate limit's identity.
    key_id: str = ""

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
    tenant_id, scopes, public_id = found
    return ApiCaller(tenant_id=tenant_id, scopes=frozenset(scopes), key_id=str(public_id))


async def list_api_keys(conn: AsyncConnection, tenant_id: str) -> list[queries.ApiKeyRow]:
    """The tenant's keys, live and revoked: id, name, prefix, scopes and dates, never the key."""
    return await queries.list_api_keys(conn, tenant_id)


async def revoke_api_key(
    conn: AsyncConnection, tenant_id: str, prefix_or_id: str
) -> queries.ApiKeyRow:
    """Revoke one live key of the tenant, named by its public id or by its prefix (`hk_…`, as
    `keys list` shows it). A key of another tenant is not found; a prefix shared by two live
    keys is refused (name the key by its id instead); a revoked key stops authenticating at
    once (authenticate_key reads revoked_at on every request)."""
    wanted = prefix_or_id.strip()
    public_id: uuid.UUID | None = None
    prefix: str | None = None
    try:
        public_id = uuid.UUID(wanted)
    except ValueError:
        prefix = wanted
    if prefix is not None:
        if not prefix.startswith(KEY_PREFIX):
            raise ValidationFailed(f"expected a key id or a prefix starting {KEY_PREFIX}")
        if await queries.count_live_keys_with_prefix(conn, tenant_id, prefix) > 1:
            raise Conflict(f"more than one live key starts {prefix}; revoke it by its id")
    revoked = await queries.revoke_api_keys(conn, tenant_id, public_id=public_id, prefix=prefix)
    if not revoked:
        raise NotFound(f"tenant {tenant_id!r} has no live API key {wanted!r}")
    return revoked[0]


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


# Asymmetric algorithms a public key or a JWKS key may pin; never an HMAC one (a public key used
# as an HMAC secret is the algorithm-confusion attack) and never `none`.
_ASYMMETRIC = {"RSA": "RS256", "EC": "ES256"}


def verify_token(settings: Settings, token: str, key: Any = None) -> dict[str, Any]:
    """Verify a JWT against the one configured key source, with its algorithm pinned.

    `exp`, `sub` and `tid` are required; `aud` and `iss` are checked (and required) when
    HERALD_JWT_AUDIENCE / HERALD_JWT_ISSUER are set; HERALD_JWT_LEEWAY_SECONDS of clock skew is
    tolerated. `key` is a JWKS key already chosen by the token's `kid` (see verify_token_async).
    """
    if key is not None:
        verifying_key, algorithms = key.key, [_jwk_algorithm(key)]
    elif settings.jwt_jwks_url:
        raise ConfigurationError("a JWKS key is fetched by verify_token_async")
    elif settings.jwt_public_key:
        verifying_key, algorithms = _public_key(settings.jwt_public_key)
    elif settings.jwt_secret:
        verifying_key, algorithms = settings.jwt_secret, ["HS256"]
    else:
        raise Unauthenticated("this Herald has no JWT key configured")
    required = ["sub", "tid", "exp"]
    required += ["aud"] if settings.jwt_audience else []
    required += ["iss"] if settings.jwt_issuer else []
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            verifying_key,
            algorithms=algorithms,
            audience=settings.jwt_audience,
            issuer=settings.jwt_issuer,
            leeway=settings.jwt_leeway_seconds,
            options={"require": required},
        )
    except jwt.PyJWTError as exc:
        raise Unauthenticated(f"invalid token: {exc}") from None
    for claim in ("sub", "tid"):
        if not isinstance(claims[claim], str) or not claims[claim]:
            raise Unauthenticated(f"invalid token: {claim} must be a non-empty string")
    return claims


class VerifiedTokens:
    """Tokens this process has verified lately, so that a client's next request with the same
    token skips the signature check (its largest per-request cost after the database).

    Only for the keys fixed by the settings (HERALD_JWT_SECRET, HERALD_JWT_PUBLIC_KEY); tokens
    checked against a JWKS set are verified every time, so a retired key is refused at once. An
    entry is kept at most `seconds` and never past the token's own expiry (with the configured
    leeway), so a cached token is refused exactly when a fresh check would refuse it for its age.
    Keyed by the token and every setting that decides verification, so two configurations in one
    process never share an answer. Refusals are never cached. At most `size` tokens, least
    recently used evicted first."""

    def __init__(self, *, size: int = 10_000, seconds: float = 60.0) -> None:
        self.size, self.seconds = size, seconds
        self.clock = time.time
        self._entries: OrderedDict[tuple[object, ...], tuple[float, dict[str, Any]]] = OrderedDict()

    @staticmethod
    def key(settings: Settings, token: str) -> tuple[object, ...]:
        return (
            token,
            settings.jwt_secret,
            settings.jwt_public_key,
            settings.jwt_jwks_url,
            settings.jwt_audience,
            settings.jwt_issuer,
            settings.jwt_leeway_seconds,
        )

    def get(self, key: tuple[object, ...]) -> dict[str, Any] | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self.clock() >= entry[0]:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return dict(entry[1])

    def put(self, key: tuple[object, ...], claims: dict[str, Any], leeway: float) -> None:
        until = min(float(claims["exp"]) + leeway, self.clock() + self.seconds)
        self._entries[key] = (until, dict(claims))
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()


VERIFIED_TOKENS = VerifiedTokens()


async def verify_token_async(settings: Settings, token: str) -> dict[str, Any]:
    """verify_token (answered from VERIFIED_TOKENS when this process verified the same token
    lately and the key is fixed by the settings), fetching the signing key from HERALD_JWT_JWKS_URL first when that is the key source
    (PyJWKClient caches the set and refetches it once for an unknown `kid`, which is how a
    rotated key is picked up)."""
    if settings.jwt_jwks_url:
        # Not cached: a key the identity provider retires must refuse its tokens as soon as the
        # refetched set lacks it.
        return await _verify_token_async(settings, token)
    key = VerifiedTokens.key(settings, token)
    cached = VERIFIED_TOKENS.get(key)
    if cached is not None:
        return cached
    claims = await _verify_token_async(settings, token)
    VERIFIED_TOKENS.put(key, claims, settings.jwt_leeway_seconds)
    return claims


async def _verify_token_async(settings: Settings, token: str) -> dict[str, Any]:
    if not settings.jwt_jwks_url:
        return verify_token(settings, token)
    client = _jwks_client(
        settings.jwt_jwks_url,
        settings.jwt_jwks_cache_seconds,
        settings.jwt_jwks_refresh_cooldown_seconds,
    )
    try:
        # PyJWKClient fetches with urllib, synchronously: off the event loop.
        key = await asyncio.to_thread(client.get_signing_key_from_jwt, token)
    except jwt.PyJWKClientConnectionError:
        raise JwksUnavailable() from None
    except jwt.PyJWTError as exc:
        raise Unauthenticated(f"invalid token: {exc}") from None
    return verify_token(settings, token, key)


@functools.lru_cache(maxsize=8)
def _jwks_client(url: str, cache_seconds: int, cooldown_seconds: int) -> jwt.PyJWKClient:
    # One client per URL per process, so its cache of the key set outlives a request.
    return jwt.PyJWKClient(
        url,
        cache_jwk_set=True,
        lifespan=cache_seconds,
        cooldown_duration=cooldown_seconds,
        timeout=5,
    )


def _jwk_algorithm(key: jwt.PyJWK) -> str:
    algorithm = _ASYMMETRIC.get(str(key.key_type))
    if algorithm is None or key.algorithm_name != algorithm:
        raise Unauthenticated("invalid token: the key set offers no RS256 or ES256 key for it")
    return algorithm


@functools.lru_cache(maxsize=4)
def _public_key(pem: str) -> tuple[Any, list[str]]:
    """The PEM key and the one algorithm its type allows (RSA: RS256, EC P-256: ES256)."""
    try:
        key = serialization.load_pem_public_key(pem.encode())
    except ValueError:
        raise ConfigurationError("HERALD_JWT_PUBLIC_KEY is not a PEM public key") from None
    if isinstance(key, rsa.RSAPublicKey):
        return key, ["RS256"]
    if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return key, ["ES256"]
    raise ConfigurationError("HERALD_JWT_PUBLIC_KEY must be an RSA or an EC P-256 public key")


@dataclass(frozen=True)
class ActorClaims:
    """What a verified end-user JWT says: whose session, in which tenant, under which role code.
    Not yet an Actor: the person and the role are read from the database (liveness)."""

    tenant_id: str
    subject: str
    role_code: str | None


async def verify_actor_token(settings: Settings, token: str) -> ActorClaims:
    claims = await verify_token_async(settings, token)
    role_code = claims.get("role")
    return ActorClaims(
        tenant_id=str(claims["tid"]),
        subject=str(claims["sub"]),
        role_code=str(role_code) if role_code else None,
    )


# What a verified token whose person is unknown or deleted is answered (401).
UNKNOWN_PERSON = "unknown person"


async def live_actor(
    conn: AsyncConnection | Driver, claims: ActorClaims, *, enter_tenant: bool = False
) -> Actor:
    """The Actor behind verified claims, read now: a deleted or unknown person is refused. With
    `enter_tenant`, the same statement enters the claims' tenant (queries.find_actor)."""
    found = await queries.find_actor(
        conn, claims.tenant_id, claims.subject, claims.role_code, enter_tenant=enter_tenant
    )
    if found is None:
        # A deleted or unknown person holds no session here.
        raise Unauthenticated(UNKNOWN_PERSON)
    person_id, role_id, scope_kind, holds = found
    return Actor(
        tenant_id=claims.tenant_id,
        external_id=claims.subject,
        person_id=person_id,
        role_code=claims.role_code,
        role_id=role_id,
        role_scope_kind=scope_kind,
        holds_role=holds,
    )


async def authenticate_actor(conn: AsyncConnection, settings: Settings, token: str) -> Actor:
    return await live_actor(conn, await verify_actor_token(settings, token))


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
