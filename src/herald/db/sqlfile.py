"""Load a stage's queries.sql: named blocks (`-- name: claim_event`), each with its guarantee.

A block opened by `-- fragment: ended_outbox` is not a statement but a piece that statements of
the same file share: `{{ended_outbox}}` in a statement is replaced by its text, so two statements
that end deliveries write their webhook messages and dead letters with one piece of SQL. A
fragment must be defined before it is used, and every `{{…}}` must name one.
"""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy import TextClause, text

_BLOCK = re.compile(r"^--\s*(name|fragment):\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_USE = re.compile(r"\{\{([a-z_][a-z0-9_]*)\}\}")


def load(path: Path) -> dict[str, TextClause]:
    return {name: text(body) for name, body in load_text(path).items()}


def load_text(path: Path) -> dict[str, str]:
    """Each statement's SQL text, fragments put in."""
    source = path.read_text(encoding="utf-8")
    pieces = _BLOCK.split(source)
    statements: dict[str, str] = {}
    fragments: dict[str, str] = {}
    for kind, name, body in zip(pieces[1::3], pieces[2::3], pieces[3::3], strict=True):
        if name in statements or name in fragments:
            raise ValueError(f"{path.name}: {name!r} is defined twice")
        body = _USE.sub(lambda use: _fragment(path, fragments, use.group(1)), body.strip())
        if kind == "fragment":
            fragments[name] = body.rstrip(";")
        else:
            statements[name] = body.rstrip(";")
    return statements


def _fragment(path: Path, fragments: dict[str, str], name: str) -> str:
    if name not in fragments:
        raise ValueError(f"{path.name}: fragment {name!r} is used before it is defined")
    return fragments[name]
