"""`{{name}}` interpolation from a flat record, and nothing more (R-RENDER-8).

Each template is split once (cached) into its literal text and names; values are joined in
verbatim, so `$'`, `\\1`, `\\g<0>` or `{{other}}` inside a value stay literal and never splice
template text (R-RENDER-10), and a value is never re-scanned for placeholders.

Anything braced that is not a flat name (`{{a.b}}`, `{{ f() }}`, `{{}}`) is never evaluated: it
counts as unresolved, so the send is suppressed rather than delivering the literal (R-RENDER-9).
"""

from __future__ import annotations

import functools
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


@functools.lru_cache(maxsize=1024)
def _compiled(template: str) -> tuple[tuple[str, ...], tuple[str | None, ...]]:
    """The template split once into its literal text and the names between: literals[i] comes
    before names[i], the last literal after the last name; a malformed span's name is None.
    Templates are few (the registry's and the operators' overrides) and sends many, so each is
    scanned once per process instead of once per send."""
    pieces = _BRACED.split(template)  # literal, inside, literal, inside, …, literal
    names = tuple(
        match.group(1) if (match := _NAME.fullmatch(inside)) else None for inside in pieces[1::2]
    )
    return tuple(pieces[0::2]), names


def interpolate(
    template: str,
    values: Mapping[str, str],
    escape: Callable[[str], str] | None = None,
) -> str | None:
    """Fill every placeholder; return None if any is unresolved (R-RENDER-9).

    A None return means "suppress the send": the literal `{{name}}` is never delivered. Values
    are joined in verbatim (escaped when asked), never scanned again for placeholders.
    """
    literals, names = _compiled(template)
    out = [literals[0]]
    for name, literal in zip(names, literals[1:], strict=True):
        value = values.get(name) if name is not None else None
        if value is None:
            return None
        out.append(escape(value) if escape else value)
        out.append(literal)
    return "".join(out)
