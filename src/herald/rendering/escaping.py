"""Escaping for the places a caller-controlled value can land."""

from __future__ import annotations

import html
import re

_CRLF = re.compile(r"[\r\n]+")


def escape_html(value: str) -> str:
    """Replace exactly `&` `<` `>` `"` `'` (R-RENDER-20); nothing else."""
    return html.escape(value, quote=True)


def escape_header(value: str) -> str:
    """Collapse every run of CR/LF to one space, so a value cannot split a mail header (R-RENDER-12)."""
    return _CRLF.sub(" ", value)
