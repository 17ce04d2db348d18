"""Action URLs: absolute https: or an app-relative path, decided on the parsed scheme."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.rendering.urls import (
    MAX_ACTION_URL_LENGTH,
    is_safe_action_url,
    safe_action_url_or_none,
)

SAFE = [
    "https://school.example/notices/42",
    "https://school.example",
    "https://school.example:8443/a?b=c#d",
    "https://[2001:db8::1]/x",
    "HTTPS://school.example/upper-case-scheme-is-still-https",
    "/notices/42",
    "/",
    "/path?with=query#and-fragment",
    "/a//b",
]

UNSAFE = [
    # R-RENDER-22: protocol-relative, and the backslash form browsers read the same way.
    "//evil.example",
    "//evil.example/path",
    "/\\evil.example",
    "\\\\evil.example",
    "\\/evil.example",
    # R-RENDER-23: these parse fine; the scheme decides.
    "javascript:alert(1)",
    "JavaScript:alert(1)",
    "JAVASCRIPT:alert(1)",
    "jAvAsCrIpT:alert(document.domain)",
    "data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==",
    "DATA:text/html,<script>alert(1)</script>",
    "vbscript:msgbox(1)",
    "file:///etc/passwd",
    "ftp://files.example/x",
    "mailto:someone@example.com",
    # R-RENDER-24: plain http is refused everywhere, development included.
    "http://school.example/notices/42",
    "HTTP://school.example",
    "Http://localhost:8000/",
    "http://127.0.0.1/",
    # https without an authority is not an absolute URL to anywhere.
    "https:evil.example",
    "https:/evil.example",
    "https:///evil.example",
    "https://",
    "https://school.example\\@evil.example",
    # Whitespace and control characters make parsers disagree.
    " https://school.example",
    "https://school.example ",
    "\thttps://school.example",
    "java\tscript:alert(1)",
    "java\nscript:alert(1)",
    "https://school\r\n.example",
    "/\t/evil.example",
    "/ /evil.example",
    "\x00https://school.example",
    "https://school.example/\x7f",
    "https://school.example/\x85",
    "https://school.example/\u200b",
    "https://school.example/\u202e",
    "https://school\u00a0.example",
    "/path\u2028",
    # Not absolute, not app-relative.
    "",
    "notices/42",
    "school.example/path",
    "?q=1",
    "#fragment",
    "https//school.example",
    "https://[::1",
]


@pytest.mark.parametrize("url", SAFE)
def test_https_and_app_relative_paths_are_accepted(url: str) -> None:
    """R-RENDER-21, R-SEND-11: absolute https: URLs and `/path` pass; the scheme is
    case-insensitive, as a browser reads it."""
    assert is_safe_action_url(url)
    assert safe_action_url_or_none(url) == url


@pytest.mark.parametrize("url", UNSAFE)
def test_unsafe_urls_are_rejected(url: str) -> None:
    """R-RENDER-21, R-RENDER-22, R-RENDER-23, R-RENDER-24, R-SEND-11: protocol-relative,
    javascript:, data:, http:, mixed-case schemes, whitespace and control characters fail."""
    assert not is_safe_action_url(url)


@pytest.mark.parametrize("url", UNSAFE)
def test_render_time_check_drops_unsafe_urls(url: str) -> None:
    """R-RENDER-25: the render-time re-check drops an unsafe URL (no button) instead of failing."""
    assert safe_action_url_or_none(url) is None


def test_no_url_stays_no_url() -> None:
    """R-RENDER-25: a notification without an action URL renders without one."""
    assert safe_action_url_or_none(None) is None


def test_overlong_url_is_rejected() -> None:
    """R-RENDER-21: a bounded length; an absurd URL is not a link anybody should follow."""
    base = "https://school.example/"
    assert is_safe_action_url(base + "a" * (MAX_ACTION_URL_LENGTH - len(base)))
    assert not is_safe_action_url(base + "a" * (MAX_ACTION_URL_LENGTH - len(base) + 1))


@given(st.text(max_size=60))
def test_anything_accepted_is_https_or_a_single_slash_path(url: str) -> None:
    """R-RENDER-21, R-RENDER-22: for any string, acceptance implies `https:` with a host, or a
    path whose second character is not another slash or backslash."""
    if not is_safe_action_url(url):
        return
    if url.startswith("/"):
        assert not url.startswith(("//", "/\\"))
    else:
        assert url[:8].lower() == "https://"
    assert not any(ch.isspace() or ord(ch) < 0x20 for ch in url)


@given(st.text(max_size=40))
def test_prefixing_http_or_javascript_is_always_rejected(rest: str) -> None:
    """R-RENDER-23, R-RENDER-24: whatever follows, these schemes never pass."""
    for scheme in ("http:", "javascript:", "data:", "HTTP:", "JavaScript:", "//", "/\\"):
        assert not is_safe_action_url(scheme + rest)
