"""Paging of the admin lists (R-ADMIN-9): a page is a limit and an opaque cursor, parsed from
the query string before any transaction opens; every refusal is a 400 with a code.

Cursors are opaque: base64 of a JSON array tagged with the list that issued it, so a cursor from
one list is refused by another instead of silently meaning something else.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from herald.errors import CursorInvalid, PaginationRequired, ValidationFailed

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
_MAX_BIGINT = 2**63 - 1


@dataclass(frozen=True)
class Page:
    limit: int
    cursor: str | None


def parse_page(*, limit: str | int | None, cursor: str | None, pagination: str | None) -> Page:
    """R-ADMIN-9: lists are always paged; `pagination=…` in any spelling is refused."""
    if pagination is not None:
        raise PaginationRequired("admin lists are paged; pagination cannot be disabled")
    if limit is None:
        return Page(DEFAULT_LIMIT, cursor)
    try:
        value = int(limit)
    except ValueError:
        raise ValidationFailed(f"limit must be an integer from 1 to {MAX_LIMIT}") from None
    if not 1 <= value <= MAX_LIMIT:
        raise ValidationFailed(f"limit must be an integer from 1 to {MAX_LIMIT}")
    return Page(value, cursor)


def parse_version(raw: str | int | None) -> int | None:
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValidationFailed("version must be a positive integer") from None
    if value < 1:
        raise ValidationFailed("version must be a positive integer")
    return value


def encode_cursor(tag: str, *values: str | int) -> str:
    raw = json.dumps([tag, *values], separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, tag: str, shape: tuple[type, ...]) -> list[Any]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise CursorInvalid() from None
    if not isinstance(value, list) or len(value) != len(shape) + 1 or value[0] != tag:
        raise CursorInvalid()
    items = value[1:]
    for item, expected in zip(items, shape, strict=True):
        # type() rather than isinstance(): a JSON true is not the integer 1.
        if type(item) is not expected:
            raise CursorInvalid()
        if isinstance(item, int) and not 1 <= item <= _MAX_BIGINT:
            raise CursorInvalid()
        if isinstance(item, str) and "\x00" in item:
            raise CursorInvalid()  # text cannot hold NUL; refused here, not by the database
    return items
