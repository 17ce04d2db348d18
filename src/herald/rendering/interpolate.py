"""`{{name}}` interpolation from a flat record, and nothing more (R-RENDER-8).

One regex pass with a function replacement: values are inserted verbatim, so `$'`, `\\1`,
`\\g<0>` or `{{other}}` inside a value stay literal and never splice template text
(R-RENDER-10), and a value is never re-scanned for placeholders.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def placeholders(template: str) -> set[str]:
    return set(PLACEHOLDER.findall(template))


def interpolate(
    template: str,
    values: Mapping[str, str],
    escape: Callable[[str], str] | None = None,
) -> str | None:
    """Fill every placeholder; return None if any is unresolved (R-RENDER-9).

    A None return means "suppress the send": the literal `{{name}}` is never delivered.
    """
    unresolved = False

    def substitute(match: re.Match[str]) -> str:
        nonlocal unresolved
        value = values.get(match.group(1))
        if value is None:
            unresolved = True
            return ""
        return escape(value) if escape else value

    result = PLACEHOLDER.sub(substitute, template)
    return None if unresolved else result
