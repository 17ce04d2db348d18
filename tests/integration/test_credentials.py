"""JWTs: one pinned key source, `exp` required, `aud`/`iss` when configured, a small leeway, and
`alg: none` and algorithm confusion refused — each tried against a real API over a real database,
the JWKS case against a local HTTP server that rotates its keys."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from httpx import ASGITransport, AsyncClient
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.api.app import create_app
from herald.config import Settings
from herald.kinds import Registry
from tests import seed
from tests.conftest import JWT_SECRET
from tests.providers.servers import JwksTestServer, jwks_server

INBOX = "/v1/me/notifications"


def _pem(private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> str:
    return (
        private.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forge(header: dict[str, Any], claims: dict[str, Any], hmac_key: bytes | None = None) -> str:
    """A token built by hand, as an attacker would: PyJWT refuses to make these."""
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = b""
    if hmac_key is not None:
        signature = hmac.new(hmac_key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(signature)}"


def claims(tenant: str, subject: str, **extra: Any) -> dict[str, Any]:
    found: dict[str, Any] = {
        "sub": subject,
        "tid": tenant,
        "exp": int((datetime.now(UTC) + timedelta(minutes=5)).timestamp()),
    }
    found.update(extra)
    return {k: v for k, v in found.items() if v is not None}


@asynccontextmanager
async def api(
    settings: Settings, engine: AsyncEngine, registry: Registry, **update: Any
) -> AsyncIterator[AsyncClient]:
    configured = settings.model_copy(update=update)
    app = create_app(configured, engine, registry)
    async with AsyncClient(transport=ASGITransport(app=app), base_url="http://herald.test") as http:
        yield http


async def status(http: AsyncClient, token: str) -> tuple[int, str]:
    answer = await http.get(INBOX, headers={"Authorization": f"Bearer {token}"})
    code = answer.json()["error"]["code"] if answer.status_code != 200 else ""
    return answer.status_code, code


@pytest.fixture
async def person(engine: AsyncEngine, tenant: str) -> str:
    async with engine.begin() as conn:
        await seed.person(conn, tenant, "ana")
    return "ana"


# ---------------------------------------------------------------------------------------------
# HS256 with HERALD_JWT_SECRET


async def test_hs256_token_signed_with_the_secret_is_accepted(
    client: AsyncClient, tenant: str, person: str
) -> None:
    """R-SEC-1: a token the host signed with HERALD_JWT_SECRET authenticates its person."""
    token = jwt.encode(claims(tenant, person), JWT_SECRET, algorithm="HS256")
    assert await status(client, token) == (200, "")


async def test_wrong_key_expired_missing_exp_and_alg_none_are_401(
    client: AsyncClient, tenant: str, person: str
) -> None:
    """R-SEC-1: signed with another secret, expired beyond the leeway, without `exp`, or
    `alg: none` (unsigned) — each is 401 UNAUTHENTICATED."""
    now = datetime.now(UTC)
    refused = {
        "wrong key": jwt.encode(claims(tenant, person), "another-secret-" * 3, algorithm="HS256"),
        "expired": jwt.encode(
            claims(tenant, person, exp=int((now - timedelta(minutes=2)).timestamp())),
            JWT_SECRET,
            algorithm="HS256",
        ),
        "no exp": jwt.encode({"sub": person, "tid": tenant}, JWT_SECRET, algorithm="HS256"),
        "alg none": forge({"alg": "none", "typ": "JWT"}, claims(tenant, person)),
        "alg None": forge({"alg": "None", "typ": "JWT"}, claims(tenant, person)),
        "tid not a string": jwt.encode(
            claims(tenant, person, tid=[tenant]), JWT_SECRET, algorithm="HS256"
        ),
    }
    answers = {name: await status(client, token) for name, token in refused.items()}
    assert answers == {name: (401, "UNAUTHENTICATED") for name in refused}


async def test_a_small_leeway_forgives_clock_skew_only(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str, person: str
) -> None:
    """R-SEC-1: a token that expired 10 s ago passes within HERALD_JWT_LEEWAY_SECONDS (30 by
    default); one that expired 60 s ago does not; with the leeway at 0 neither does the first."""
    now = datetime.now(UTC)

    def expired(seconds: int) -> str:
        exp = int((now - timedelta(seconds=seconds)).timestamp())
        return jwt.encode(claims(tenant, person, exp=exp), JWT_SECRET, algorithm="HS256")

    async with api(settings, engine, registry) as http:
        assert await status(http, expired(10)) == (200, "")
        assert await status(http, expired(60)) == (401, "UNAUTHENTICATED")
    async with api(settings, engine, registry, jwt_leeway_seconds=0) as http:
        assert await status(http, expired(10)) == (401, "UNAUTHENTICATED")


async def test_audience_and_issuer_are_checked_when_configured(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str, person: str
) -> None:
    """R-SEC-1: with HERALD_JWT_AUDIENCE and HERALD_JWT_ISSUER set, a token must carry both,
    exactly; a missing or different one is 401."""

    def signed(**extra: Any) -> str:
        return jwt.encode(claims(tenant, person, **extra), JWT_SECRET, algorithm="HS256")

    async with api(
        settings, engine, registry, jwt_audience="herald", jwt_issuer="https://id.example"
    ) as http:
        assert await status(http, signed(aud="herald", iss="https://id.example")) == (200, "")
        for extra in (
            {"iss": "https://id.example"},
            {"aud": "herald"},
            {"aud": "someone-else", "iss": "https://id.example"},
            {"aud": "herald", "iss": "https://evil.example"},
        ):
            assert await status(http, signed(**extra)) == (401, "UNAUTHENTICATED"), extra


# ---------------------------------------------------------------------------------------------
# RS256 / ES256 with HERALD_JWT_PUBLIC_KEY


async def test_rs256_public_key_accepts_its_tokens_and_refuses_confusion(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str, person: str
) -> None:
    """R-SEC-1: with an RSA public key the algorithm is RS256 and nothing else: a token signed
    by the matching private key passes; one signed by another RSA key, an HS256 token "signed"
    with the public key's PEM as the HMAC secret (algorithm confusion), one signed with the old
    shared secret, and `alg: none` are all 401."""
    public_pem = _pem(RSA_KEY)
    good = jwt.encode(claims(tenant, person), RSA_KEY, algorithm="RS256")
    refused = {
        "other key": jwt.encode(claims(tenant, person), OTHER_RSA_KEY, algorithm="RS256"),
        "confusion": forge(
            {"alg": "HS256", "typ": "JWT"}, claims(tenant, person), public_pem.encode()
        ),
        "shared secret": jwt.encode(claims(tenant, person), JWT_SECRET, algorithm="HS256"),
        "alg none": forge({"alg": "none"}, claims(tenant, person)),
        "es256": jwt.encode(claims(tenant, person), EC_KEY, algorithm="ES256"),
    }
    async with api(settings, engine, registry, jwt_secret=None, jwt_public_key=public_pem) as http:
        assert await status(http, good) == (200, "")
        answers = {name: await status(http, token) for name, token in refused.items()}
    assert answers == {name: (401, "UNAUTHENTICATED") for name in refused}


async def test_es256_public_key_pins_es256(
    settings: Settings, engine: AsyncEngine, registry: Registry, tenant: str, person: str
) -> None:
    """R-SEC-1: an EC P-256 public key pins ES256: its tokens pass, RS256 and HS256-with-the-PEM
    tokens are 401."""
    public_pem = _pem(EC_KEY)
    async with api(settings, engine, registry, jwt_secret=None, jwt_public_key=public_pem) as http:
        good = jwt.encode(claims(tenant, person), EC_KEY, algorithm="ES256")
        assert await status(http, good) == (200, "")
        rs256 = jwt.encode(claims(tenant, person), RSA_KEY, algorithm="RS256")
        confusion = forge({"alg": "HS256"}, claims(tenant, person), public_pem.encode())
        assert await status(http, rs256) == (401, "UNAUTHENTICATED")
        assert await status(http, confusion) == (401, "UNAUTHENTICATED")


def test_two_key_sources_refuse_to_start() -> None:
    """R-SEC-1: a secret beside a public key (or a JWKS URL) would let a token's header pick
    the verifier; the configuration is refused, naming both."""
    with pytest.raises(ValidationError, match="HERALD_JWT_SECRET and HERALD_JWT_PUBLIC_KEY"):
        Settings(jwt_secret=JWT_SECRET, jwt_public_key=_pem(RSA_KEY))
    with pytest.raises(ValidationError, match="HERALD_JWT_JWKS_URL"):
        Settings(jwt_public_key=_pem(RSA_KEY), jwt_jwks_url="https://id.example/jwks")


def test_a_public_key_herald_cannot_use_refuses_to_start() -> None:
    """R-OPS-14: a value that is not a PEM public key, or a key of another kind (EC P-384), is
    refused at start-up, naming the variable, rather than failing every request."""
    with pytest.raises(ValidationError, match="not a PEM public key"):
        Settings(jwt_public_key="-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----")
    with pytest.raises(ValidationError, match="RSA or an EC P-256"):
        Settings(jwt_public_key=_pem(ec.generate_private_key(ec.SECP384R1())))


# ---------------------------------------------------------------------------------------------
# JWKS with HERALD_JWT_JWKS_URL


def _jwk(private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, kid: str) -> dict[str, Any]:
    if isinstance(private, rsa.RSAPrivateKey):
        found: dict[str, Any] = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key()))
    else:
        found = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(private.public_key()))
    return {**found, "kid": kid, "use": "sig"}


@pytest.fixture
def jwks() -> Iterator[JwksTestServer]:
    with jwks_server() as server:
        yield server


async def test_jwks_keys_are_cached_and_a_rotated_kid_is_fetched(
    settings: Settings,
    engine: AsyncEngine,
    registry: Registry,
    tenant: str,
    person: str,
    jwks: JwksTestServer,
) -> None:
    """R-SEC-1: keys come from HERALD_JWT_JWKS_URL, chosen by `kid`; the set is fetched once and
    cached; after the identity provider rotates to a new key, a token with the new `kid` makes
    Herald fetch the set again and passes, and a token of the retired key is 401."""
    jwks.keys = [_jwk(RSA_KEY, "key-1")]
    old = jwt.encode(claims(tenant, person), RSA_KEY, algorithm="RS256", headers={"kid": "key-1"})
    async with api(
        settings,
        engine,
        registry,
        jwt_secret=None,
        jwt_jwks_url=jwks.url,
        jwt_jwks_refresh_cooldown_seconds=0,
    ) as http:
        assert await status(http, old) == (200, "")
        assert await status(http, old) == (200, "")
        assert jwks.fetches == 1  # the second request used the cached set

        jwks.keys = [_jwk(EC_KEY, "key-2")]
        new = jwt.encode(
            claims(tenant, person), EC_KEY, algorithm="ES256", headers={"kid": "key-2"}
        )
        assert await status(http, new) == (200, "")
        assert jwks.fetches == 2  # the unknown kid fetched the rotated set
        assert await status(http, old) == (401, "UNAUTHENTICATED")


async def test_jwks_refuses_confusion_none_and_symmetric_keys(
    settings: Settings,
    engine: AsyncEngine,
    registry: Registry,
    tenant: str,
    person: str,
    jwks: JwksTestServer,
) -> None:
    """R-SEC-1: against a JWKS, an HS256 token "signed" with the published public key, an
    unsigned `alg: none` token, a token whose `kid` names an `oct` (shared-secret) key in the set,
    a token of an unknown key and one without `kid` are all 401."""
    secret = b"shared-secret-published-by-mistake"
    jwks.keys = [
        _jwk(RSA_KEY, "rsa"),
        {"kty": "oct", "kid": "oct", "k": _b64(secret), "alg": "HS256"},
    ]
    public_pem = _pem(RSA_KEY)
    refused = {
        "confusion": forge(
            {"alg": "HS256", "kid": "rsa"}, claims(tenant, person), public_pem.encode()
        ),
        "alg none": forge({"alg": "none", "kid": "rsa"}, claims(tenant, person)),
        "oct key": forge({"alg": "HS256", "kid": "oct"}, claims(tenant, person), secret),
        "unknown kid": jwt.encode(
            claims(tenant, person), OTHER_RSA_KEY, algorithm="RS256", headers={"kid": "other"}
        ),
        "no kid": jwt.encode(claims(tenant, person), RSA_KEY, algorithm="RS256"),
    }
    async with api(
        settings,
        engine,
        registry,
        jwt_secret=None,
        jwt_jwks_url=jwks.url,
        jwt_jwks_refresh_cooldown_seconds=0,
    ) as http:
        answers = {name: await status(http, token) for name, token in refused.items()}
    assert answers == {name: (401, "UNAUTHENTICATED") for name in refused}
