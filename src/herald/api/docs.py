"""The API reference at /docs (Swagger UI), from files Herald ships.

FastAPI's own page loads Swagger UI from a CDN, so an air-gapped install showed a blank page.
Here the bundle comes from the `fastapi-offline` package (Swagger UI 5), the page starts it from
a script file of Herald's own, and the page carries the console's kind of
Content-Security-Policy: scripts, styles, images and requests from this origin only, no inline
script. (Redoc is not served: its page draws its maker's logo from a CDN.)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

import fastapi_offline
from fastapi import APIRouter, Response
from fastapi.responses import FileResponse, HTMLResponse

from herald.errors import NotFound

BUNDLES: Final = Path(fastapi_offline.__file__).parent / "static"
OWN: Final = Path(__file__).with_name("docs_static")
ASSETS: Final = "/docs/assets"

# name → (directory, media type): the only files served, so no request path reaches the disk.
FILES: Final[Mapping[str, tuple[Path, str]]] = {
    "swagger-ui-bundle.js": (BUNDLES, "text/javascript; charset=utf-8"),
    "swagger-ui.css": (BUNDLES, "text/css; charset=utf-8"),
    "favicon.png": (BUNDLES, "image/png"),
    "swagger-init.js": (OWN, "text/javascript; charset=utf-8"),
    "docs.css": (OWN, "text/css; charset=utf-8"),
}

# The console's policy; Swagger UI draws its icons as data: URLs.
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
HEADERS: Final[Mapping[str, str]] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

SWAGGER_PAGE: Final = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title} — API reference</title>
<link rel="icon" type="image/png" href="{assets}/favicon.png">
<link rel="stylesheet" href="{assets}/swagger-ui.css">
<link rel="stylesheet" href="{assets}/docs.css">
</head>
<body>
<div id="swagger-ui" data-openapi-url="{openapi_url}"></div>
<script src="{assets}/swagger-ui-bundle.js"></script>
<script src="{assets}/swagger-init.js"></script>
</body>
</html>
"""


def router(title: str, openapi_url: str) -> APIRouter:
    """GET /docs and /docs/assets/{name}; neither is in the OpenAPI document."""
    docs = APIRouter(include_in_schema=False)
    values = {"title": title, "openapi_url": openapi_url, "assets": ASSETS}

    @docs.get("/docs")
    async def swagger_ui() -> HTMLResponse:
        return HTMLResponse(SWAGGER_PAGE.format(**values), headers=dict(HEADERS))

    @docs.get(ASSETS + "/{name}")
    async def asset(name: str) -> Response:
        found = FILES.get(name)
        if found is None:
            raise NotFound()
        directory, media_type = found
        return FileResponse(
            directory / name,
            media_type=media_type,
            headers={**HEADERS, "Cache-Control": "public, max-age=3600"},
        )

    return docs
