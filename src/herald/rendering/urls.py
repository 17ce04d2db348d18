"""Action-URL safety: absolute https: URLs or app-relative paths, nothing else (R-RENDER-21..24)."""

from __future__ import annotations

from urllib.parse import urlsplit

MAX_ACTION_URL_LENGTH = 2048


def is_safe_action_url(url: str) -> bool:
    if not url or len(url) > MAX_ACTION_URL_LENGTH:
        return False
    # Control characters and whitespace let a URL mean different things to different parsers.
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        return False
    if url.startswith("/"):
        # `//evil.example` and `/\evil.example` are protocol-relative to a browser (R-RENDER-22).
        return not url.startswith(("//", "/\\"))
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    # Decide on the parsed scheme: javascript: and data: parse fine (R-RENDER-23); http: is
    # refused everywhere, development included (R-RENDER-24).
    return parts.scheme.lower() == "https" and bool(parts.hostname) and "\\" not in url


def safe_action_url_or_none(url: str | None) -> str | None:
    """The render-time re-check: an unsafe URL is dropped and the send goes ahead (R-RENDER-25)."""
    return url if url is not None and is_safe_action_url(url) else None
