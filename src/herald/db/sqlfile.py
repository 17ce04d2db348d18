"""Load a stage's queries.sql: named blocks (`-- name: claim_event`), each with its guarantee.

A block opened by `-- fragment: ended_outbox` is not a statement but a piece that statements of
the same file share: `{{ended_outbox}}` in a statement is replaced by its text, so two statements
that end deliveries write their webhook messages and dead letters with one piece of SQL. A
fragment must be defined before it is used, and every `{{…}}` must name one.

A line `-- include: ../webhooks/payloads.sql` (a path relative to the file) makes that file's
fragments usable here too, for a piece of SQL that several stages' statements share (the payload
of a delivery.<status> webhook message); an included file holds fragments only, and a name is
still defined once across the file and its includes.
"""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy import TextClause, text

_BLOCK = re.compile(r"^--\s*(name|fragment):\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_USE = re.compile(r"\{\{([a-z_][a-z0-9_]*)\}\}")
_INCLUDE = re.compile(r"^--\s*include:\s*(\S+)\s*$", re.MULTILINE)


def load(path: Path) -> dict[str, TextClause]:
    return {name: text(body) for name, body in load_text(path).items()}


def load_text(path: Path) -> dict[str, str]:
    """Each statement's SQL text, fragments put in."""
    statements, _ = _load(path, included=False)
    return statements


def _load(path: Path, *, included: bool) -> tuple[dict[str, str], dict[str, str]]:
    source = path.read_text(encoding="utf-8")
    fragments: dict[str, str] = {}
    for include in _INCLUDE.findall(source):
        if included:
            raise ValueError(f"{path.name}: an included file includes nothing")
        _, shared = _load(path.parent / include, included=True)
        for name, body in shared.items():
            if name in fragments:
                raise ValueError(f"{path.name}: {name!r} is defined twice")
            fragments[name] = body
    pieces = _BLOCK.split(_INCLUDE.sub("", source))
    statements: dict[str, str] = {}
    for kind, name, body in zip(pieces[1::3], pieces[2::3], pieces[3::3], strict=True):
        if name in statements or name in fragments:
            raise ValueError(f"{path.name}: {name!r} is defined twice")
        body = _USE.sub(lambda use: _fragment(path, fragments, use.group(1)), body.strip())
        if kind == "fragment":
            fragments[name] = body.rstrip(";")
        else:
            statements[name] = body.rstrip(";")
    if included and statements:
        raise ValueError(f"{path.name}: an included file holds fragments only")
    return statements, fragments


def _fragment(path: Path, fragments: dict[str, str], name: str) -> str:
    if name not in fragments:
        raise ValueError(f"{path.name}: fragment {name!r} is used before it is defined")
    return fragments[name]
