"""Load a stage's queries.sql: named blocks (`-- name: claim_event`), each with its guarantee."""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy import TextClause, text

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def load(path: Path) -> dict[str, TextClause]:
    source = path.read_text(encoding="utf-8")
    pieces = _NAME.split(source)
    statements: dict[str, TextClause] = {}
    for name, body in zip(pieces[1::2], pieces[2::2], strict=True):
        if name in statements:
            raise ValueError(f"{path.name}: statement {name!r} is defined twice")
        statements[name] = text(body.strip().rstrip(";"))
    return statements
