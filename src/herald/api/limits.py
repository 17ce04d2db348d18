"""The request body cap: a body past it is refused with 413 REQUEST_TOO_LARGE before it is parsed.

The largest legitimate body is a directory batch of 1,000 people (a few hundred KiB); a cap far
above it keeps one request from making the API buffer and parse megabytes of JSON. A declared
Content-Length over the cap is refused before a byte is read; a chunked body is counted as it
arrives and refused as soon as it passes the cap.
"""

from __future__ import annotations

import json
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from herald.errors import RequestTooLarge

MAX_BODY_BYTES: Final = 1024 * 1024


class BodySizeLimit:
    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await _refuse(send, self.max_bytes)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # Raised inside the route's body read: the app's handler renders it.
                    raise RequestTooLarge(_message(self.max_bytes))
            return message

        await self.app(scope, counted, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _message(max_bytes: int) -> str:
    return f"the request body is larger than {max_bytes} bytes"


async def _refuse(send: Send, max_bytes: int) -> None:
    body = json.dumps(
        {"error": {"code": RequestTooLarge.code, "message": _message(max_bytes)}}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": RequestTooLarge.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
