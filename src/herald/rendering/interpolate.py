"""`{{name}}` interpolation from a flat record, and nothing more (R-RENDER-8).

One regex pass with a function replacement: values are inserted verbatim, so `$'`, `\\1`,
`\\g<0>` or `{{other}}` inside a value stay literal and never splice template text
(R-RENDER-10), and a value is never re-scanned for placeholders.

Anything braced that is not a flat name (`{{a.b}}`, `{{ f() }}`, `{{}}`) is never evaluated: it
counts as unresolved, so the send is suppressed rather than delivering the literal (R-RENDER-9).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

# A well-formed placeholder: a flat name, optionally padded with spaces.
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
# Every `{{…}}` span, well-formed or not; the inside decides whether it is a name.
_BRACED = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_NAME = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*")


def placeholders(template: str) -> set[str]:
    """The flat names a template refers to (malformed spans are reported by malformed_placeholders)."""
    return set(PLACEHOLDER.findall(template))


def malformed_placeholders(template: str) -> list[str]:
    """Every `{{…}}` span that is not a flat name: these never render (R-RENDER-8, R-RENDER-9)."""
    return [m.group(0) for m in _BRACED.finditer(template) if not _NAME.fullmatch(m.group(1))]


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
        name = _NAME.fullmatch(match.group(1))
        value = values.get(name.group(1)) if name else None
        if value is None:
            unresolved = True
            return ""
        # A function replacement's return value is inserted as-is: no backreference expansion.
        return escape(value) if escape else value

    result = _BRACED.sub(substitute, template)
    return None if unresolved else result
