"""The shipped .env.example lists every setting Herald reads, with its true default."""

from __future__ import annotations

import re
from pathlib import Path

from herald.config import Settings

ENV_EXAMPLE = Path(__file__).resolve().parents[2] / ".env.example"
LINE = re.compile(r"^#?\s*(HERALD_[A-Z0-9_]+)=(.*)$")


def _documented() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        match = LINE.match(line.strip())
        if match:
            found.setdefault(match.group(1), match.group(2).strip())
    return found


def test_every_setting_is_listed() -> None:
    """R-OPS-15: the example environment file names every HERALD_* setting."""
    documented = _documented()
    missing = [
        f"HERALD_{name.upper()}"
        for name in Settings.model_fields
        if f"HERALD_{name.upper()}" not in documented
    ]
    assert missing == []


def test_listed_defaults_are_the_real_defaults() -> None:
    """R-OPS-15: a default shown in .env.example is the value Herald uses when unset."""
    documented = _documented()
    wrong = []
    for name, field in Settings.model_fields.items():
        if field.default is None:
            continue  # shown as an example value, not a default
        shown = documented[f"HERALD_{name.upper()}"]
        parsed = Settings.model_validate({name: shown})
        if getattr(parsed, name) != field.default:
            wrong.append((name, shown, field.default))
    assert wrong == []
