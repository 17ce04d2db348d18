"""docs/configuration.md, generated from herald.config.Settings: every setting's variable, type,
default, accepted range and the description written beside the field in config.py.

`make docs` writes it; tests/unit/test_configuration_doc.py fails when the file differs from what
this renders, or when a setting has no description, so the reference cannot drift from the code.
"""

from __future__ import annotations

import sys
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from herald.config import Settings

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"

PREAMBLE = """# Configuration reference

Herald reads its configuration from the environment only: every variable is prefixed `HERALD_`
and validated at start-up, and a value out of its range stops the process with a message naming
the variable. [`.env.example`](../.env.example) lists the same settings as lines to copy;
[Deployment](deployment.md) explains the main ones in context.

This page is generated from `src/herald/config.py` by `make docs`; a test fails when it falls
behind the code.

| variable | type | default | range | meaning |
|---|---|---|---|---|
"""


def type_name(annotation: Any) -> str:
    if annotation is None or annotation is type(None):
        return "none"
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{value}`" for value in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        parts = [a for a in typing.get_args(annotation) if a is not type(None)]
        name = " \\| ".join(type_name(a) for a in parts)
        return f"{name} (optional)" if len(parts) < len(typing.get_args(annotation)) else name
    if origin is not None:
        args = ", ".join(type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if isinstance(annotation, type):
        if issubclass(annotation, Enum):
            return " \\| ".join(f"`{member.value}`" for member in annotation)
        return {"str": "text", "int": "integer", "float": "number", "bool": "boolean"}.get(
            annotation.__name__, annotation.__name__
        )
    return str(annotation)


def default_of(field: FieldInfo) -> str:
    value = field.default
    if value is PydanticUndefined:
        return "required"
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, (tuple, list, frozenset, set)):
        return f"`{','.join(map(str, value))}`" if value else "empty"
    text = str(value)
    return f"`{text}`" if text else "empty"


def range_of(field: FieldInfo) -> str:
    low = high = None
    for constraint in field.metadata:
        for name in ("ge", "gt"):
            if getattr(constraint, name, None) is not None:
                low = f"{'≥' if name == 'ge' else '>'} {getattr(constraint, name)}"
        for name in ("le", "lt"):
            if getattr(constraint, name, None) is not None:
                high = f"{'≤' if name == 'le' else '<'} {getattr(constraint, name)}"
    return ", ".join(part for part in (low, high) if part)


def cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def undocumented(settings: type[Settings] = Settings) -> list[str]:
    return [
        f"HERALD_{name.upper()}"
        for name, field in settings.model_fields.items()
        if not (field.description or "").strip()
    ]


def render(settings: type[Settings] = Settings) -> str:
    rows = [
        f"| `HERALD_{name.upper()}` | {type_name(field.annotation)} | {default_of(field)} "
        f"| {range_of(field)} | {cell(field.description or '')} |"
        for name, field in settings.model_fields.items()
    ]
    return PREAMBLE + "\n".join(rows) + "\n"


if __name__ == "__main__":
    missing = undocumented()
    if missing:
        sys.exit(f"settings without a description in config.py: {', '.join(missing)}")
    DOC.write_text(render())
    print(f"wrote {DOC}")
