"""docs/configuration.md is what tests/config_reference.py renders from config.py, and every
setting carries its description (an attribute docstring beside the field)."""

from __future__ import annotations

from pydantic import Field

from herald.config import Settings
from tests import config_reference


def test_every_setting_has_a_description() -> None:
    assert config_reference.undocumented() == []


def test_the_reference_is_up_to_date() -> None:
    """Run `make docs` after changing a setting."""
    assert config_reference.DOC.read_text() == config_reference.render()


def test_the_checks_can_fail() -> None:
    class Wider(Settings):
        brand_new_knob: int = Field(default=3, ge=1, le=9)

    assert config_reference.undocumented(Wider) == ["HERALD_BRAND_NEW_KNOB"]
    row = config_reference.render(Wider).splitlines()[-1]
    assert row == "| `HERALD_BRAND_NEW_KNOB` | integer | `3` | ≥ 1, ≤ 9 |  |"
    assert config_reference.render(Wider) != config_reference.DOC.read_text()
