"""Action-URL safety: absolute https: URLs or app-relative paths, nothing else (R-RENDER-21..24)."""

from __future__ import annotations

import functools
import unicodedata
from urllib.parse import urlsplit

MAX_ACTION_URL_LENGTH = 2048

# Control (Cc), format (Cf: zero-width and bidi overrides), and separator (Z*) characters let a
# URL mean different things to different parsers, or look like something else to a reader.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})


# Pure, and asked again for every delivery of an event (at render time, and by the email
# provider as it builds the message): 8 µs for a 70-character URL, most of it each character's
# Unicode category, twice a delivery of a broadcast with a link. Cached per process; the URLs
# are an event's, few against its deliveries.
@functools.lru_cache(maxsize=1024)
def is_safe_action_url(url: str) -> bool:
    if not url or len(url) > MAX_ACTION_URL_LENGTH:
        return False
    if any(ch.isspace() or unicodedata.category(ch) in _REFUSED_CATEGORIES for ch in url):
        return False
    if url.startswith("/"):
        # `//evil.example` and `/\evil.example` are protocol-relative to a browser (R-RENDER-22).
        return not url.startswith(("//", "/\\"))
    # Browsers read `\` as `/` in special-scheme URLs, so it could move the authority.
    if "\\" in url:
        return False
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    # Decide on the parsed scheme: javascript: and data: parse fine (R-RENDER-23); http: is
    # refused everywhere, development included (R-RENDER-24). The scheme is case-insensitive
    # (RFC 3986 §3.1), so `HTTPS://host` is https and `JavaScript:` is still javascript.
    return parts.scheme.lower() == "https" and bool(parts.hostname)


def safe_action_url_or_none(url: str | None) -> str | None:
    """The render-time re-check: an unsafe URL is dropped and the send goes ahead (R-RENDER-25)."""
    return url if url is not None and is_safe_action_url(url) else None
