"""The per-person rate limit's key (herald.auth.deps.enforce_person_limit): the tenant and the
token's subject, each quoted, since the limiter joins a key's parts with "/" and an external id
may contain one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from herald.auth.deps import enforce_person_limit
from herald.config import Settings
from herald.errors import RateLimited
from herald.ratelimit import RateLimits


def _request(limits: RateLimits) -> Any:
    settings = Settings(database_url="postgresql://x@y/z", rate_limit_per_person="1/minute")
    herald = SimpleNamespace(settings=settings, rate_limits=limits)
    return SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(herald=herald)))


async def test_people_whose_joined_keys_would_match_have_limits_of_their_own() -> None:
    request = _request(RateLimits.build(None))
    await enforce_person_limit(request, "a", "b/c")
    # Joined naively, tenant "a/b" and person "c" is the same key as tenant "a" and "b/c".
    await enforce_person_limit(request, "a/b", "c")
    with pytest.raises(RateLimited):
        await enforce_person_limit(request, "a", "b/c")
