"""Escaping for the places a caller-controlled value can land."""

from __future__ import annotations

import html
import re

# CR and LF (R-RENDER-12), plus every other character str.splitlines() breaks on: a mail library
# or relay that splits on one of those would otherwise see a second header line.
_LINE_BREAKS = re.compile(r"[\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]+")


def escape_html(value: str) -> str:
    """Replace exactly `&` `<` `>` `"` `'` (R-RENDER-20); nothing else.

    The standard library's html.escape with quote=True replaces exactly these five, `'` as
    `&#x27;`, with a chain of C replaces: a quarter of the time str.translate took."""
    return html.escape(value, quote=True)


def escape_header(value: str) -> str:
    """Collapse every run of line breaks to one space, so a value cannot split a mail header
    (R-RENDER-12, R-RENDER-19)."""
    # Every line break above is a control or separator character, none of which is printable:
    # a printable value (nearly every subject) has none to collapse. The check is one C pass,
    # 0.09 µs for a subject against 0.50 µs for the expression's search.
    if value.isprintable():
        return value
    return _LINE_BREAKS.sub(" ", value)
