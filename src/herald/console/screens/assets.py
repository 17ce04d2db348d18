"""The console's static files: the vendored htmx and uPlot and the console's own script and
stylesheet, served from a fixed list so no request path reaches the file system."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

from fastapi import Response
from fastapi.responses import FileResponse

from herald.console import core
from herald.errors import NotFound

STATIC_DIR: Final = Path(__file__).parent.parent / "static"

# name → media type: the only files served, so no request path reaches the file system.
STATIC_FILES: Final[Mapping[str, str]] = {
    "htmx.min.js": "text/javascript; charset=utf-8",
    "uPlot.iife.min.js": "text/javascript; charset=utf-8",
    "uPlot.min.css": "text/css; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}

router = core.screen_router()


@router.get("/static/{name}")
async def static(name: str) -> Response:
    media_type = STATIC_FILES.get(name)
    if media_type is None:
        raise NotFound()
    return FileResponse(
        STATIC_DIR / name, media_type=media_type, headers={"Cache-Control": "no-cache"}
    )
