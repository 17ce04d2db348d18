"""The inbox web component's script, served by `herald api` (and `herald dev`).

- `GET /v1/widget/herald-inbox.<hash>.js` — the script, its content hash in the URL, cached for a
  year as immutable: a new Herald with a changed script has a new URL.
- `GET /v1/widget/herald-inbox.js` — a redirect to that URL, cached for five minutes: the stable
  address a host puts in its script tag.
- `GET /v1/widget/herald-push-sw.js` — the Web Push handler a host's service worker loads with
  `importScripts` (a service worker's own script must be the host's, so this one cannot be
  registered directly). Served in place, not redirected: `importScripts` of a service worker is
  checked for updates by its URL. Cached for five minutes.

Both are public (the script holds no secret) and left out of the OpenAPI document, which describes
the JSON API. A host page on another origin loads it with a plain `<script>` tag; as a module
script it needs that origin in HERALD_CORS_ORIGINS, which its API calls need anyway.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Final

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from herald.errors import NotFound

SCRIPT: Final = Path(__file__).with_name("static") / "herald-inbox.js"
PUSH_WORKER: Final = Path(__file__).with_name("static") / "herald-push-sw.js"
MEDIA_TYPE: Final = "text/javascript; charset=utf-8"
IMMUTABLE: Final = "public, max-age=31536000, immutable"
SHORT: Final = "public, max-age=300"

router = APIRouter(prefix="/v1/widget", include_in_schema=False)


@functools.cache
def script() -> tuple[bytes, str]:
    """The script's bytes and the first 16 hex digits of their SHA-256."""
    content = SCRIPT.read_bytes()
    return content, hashlib.sha256(content).hexdigest()[:16]


def script_path() -> str:
    """The hashed URL path of the script (what the stable address redirects to)."""
    return f"/v1/widget/herald-inbox.{script()[1]}.js"


@router.get("/herald-inbox.js")
async def stable() -> Response:
    return RedirectResponse(script_path(), status_code=302, headers={"Cache-Control": SHORT})


@router.get("/herald-push-sw.js")
async def push_worker() -> Response:
    content = _push_worker()
    return Response(
        content,
        media_type=MEDIA_TYPE,
        headers={
            "Cache-Control": SHORT,
            "X-Content-Type-Options": "nosniff",
            "Cross-Origin-Resource-Policy": "cross-origin",
        },
    )


@functools.cache
def _push_worker() -> bytes:
    return PUSH_WORKER.read_bytes()


@router.get("/herald-inbox.{digest}.js")
async def hashed(digest: str) -> Response:
    content, current = script()
    if digest != current:
        raise NotFound("no such version of the widget; load /v1/widget/herald-inbox.js")
    return Response(
        content,
        media_type=MEDIA_TYPE,
        headers={
            "Cache-Control": IMMUTABLE,
            "ETag": f'"{current}"',
            "X-Content-Type-Options": "nosniff",
            # Host pages on other origins embed it (a plain <script> tag needs no CORS).
            "Cross-Origin-Resource-Policy": "cross-origin",
        },
    )
