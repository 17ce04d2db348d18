"""The per-process cache of verified JWTs (auth.service.VerifiedTokens): a cached token is
answered without the signature check, but never past its own expiry, never for another key or
audience, never for a refusal, and never in JWKS mode (where a retired key must refuse at once)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import jwt
import pytest

from herald.auth import service
from herald.auth.service import VERIFIED_TOKENS, VerifiedTokens, verify_token_async
from herald.config import Settings
from herald.errors import Unauthenticated

SECRET = "s" * 40


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    VERIFIED_TOKENS.clear()
    yield
    VERIFIED_TOKENS.clear()
    VERIFIED_TOKENS.clock = time.time


def token(exp: float, secret: str = SECRET, **extra: object) -> str:
    return jwt.encode({"sub": "u1", "tid": "t1", "exp": int(exp), **extra}, secret, "HS256")


def counting_decode(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = jwt.decode

    def decode(value: str, *args: object, **kwargs: object) -> object:
        calls.append(value)
        return real(value, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(jwt, "decode", decode)
    return calls


async def test_a_token_verified_once_is_answered_from_the_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = counting_decode(monkeypatch)
    settings = Settings(jwt_secret=SECRET)
    value = token(time.time() + 600)
    first = await verify_token_async(settings, value)
    second = await verify_token_async(settings, value)
    assert first == second and first["sub"] == "u1"
    assert calls == [value]
    second["sub"] = "changed"  # a caller's change never reaches the next answer
    assert (await verify_token_async(settings, value))["sub"] == "u1"


async def test_a_cached_token_is_refused_once_it_expires() -> None:
    settings = Settings(jwt_secret=SECRET, jwt_leeway_seconds=0)
    expires = int(time.time()) + 2
    value = token(expires)
    await verify_token_async(settings, value)
    await verify_token_async(settings, value)  # cached
    await asyncio.sleep(max(0.0, expires - time.time()) + 0.05)
    with pytest.raises(Unauthenticated):
        await verify_token_async(settings, value)


def test_an_entry_lives_no_longer_than_the_token_nor_the_bound() -> None:
    cache = VerifiedTokens(seconds=60)
    cache.clock = lambda: 1_000.0
    settings = Settings(jwt_secret=SECRET)
    short, long = ("a",), ("b",)
    cache.put(short, {"exp": 1_010}, leeway=5)  # valid until 1,015
    cache.put(long, {"exp": 9_999}, leeway=5)  # bounded at 1,060
    cache.clock = lambda: 1_014.9
    assert cache.get(short) is not None
    cache.clock = lambda: 1_015.0
    assert cache.get(short) is None
    cache.clock = lambda: 1_059.9
    assert cache.get(long) is not None
    cache.clock = lambda: 1_060.0
    assert cache.get(long) is None
    assert VerifiedTokens.key(settings, "x") != VerifiedTokens.key(
        Settings(jwt_secret="t" * 40), "x"
    )


def test_the_least_recently_used_token_is_evicted_first() -> None:
    cache = VerifiedTokens(size=2)
    for name in ("a", "b"):
        cache.put((name,), {"exp": time.time() + 600}, leeway=0)
    assert cache.get(("a",)) is not None  # a is now the most recent
    cache.put(("c",), {"exp": time.time() + 600}, leeway=0)
    assert cache.get(("b",)) is None
    assert cache.get(("a",)) is not None and cache.get(("c",)) is not None


async def test_other_settings_and_refusals_are_never_answered_from_the_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = counting_decode(monkeypatch)
    value = token(time.time() + 600, aud="herald")
    await verify_token_async(Settings(jwt_secret=SECRET, jwt_audience="herald"), value)
    with pytest.raises(Unauthenticated):
        await verify_token_async(Settings(jwt_secret=SECRET, jwt_audience="other"), value)
    with pytest.raises(Unauthenticated):
        await verify_token_async(Settings(jwt_secret="t" * 40, jwt_audience="herald"), value)
    forged = token(time.time() + 600, secret="f" * 40)
    for _ in range(2):
        with pytest.raises(Unauthenticated):
            await verify_token_async(Settings(jwt_secret=SECRET), forged)
    assert calls.count(forged) == 2  # a refusal is checked again every time
    assert len(calls) == 5


async def test_jwks_tokens_are_never_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    async def uncached(settings: Settings, value: str) -> dict[str, object]:
        seen.append(value)
        return {"sub": "u1", "tid": "t1", "exp": time.time() + 600}

    monkeypatch.setattr(service, "_verify_token_async", uncached)
    settings = Settings(jwt_jwks_url="https://idp.example/jwks.json")
    for _ in range(2):
        await verify_token_async(settings, "any")
    assert seen == ["any", "any"]
