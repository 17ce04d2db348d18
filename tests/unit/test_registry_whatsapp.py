"""A kind's WhatsApp template mapping is checked when the registry is built: the approved
template's name and language in Meta's forms, its ordered parameters the kind's variables, and
exactly the placeholders of the kind's WhatsApp wording (a count that does not match the approved
template refuses to boot)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from herald.errors import RegistryError
from herald.kinds.registry import Kind, Registry, Template, WhatsAppTemplate
from herald.kinds.sample import SAMPLE_REGISTRY


def _kind(**changes: Any) -> Kind:
    base = Kind(
        name="fee.nudge",
        category="finance",
        channels=("in_app", "whatsapp"),
        variables={"amount": "NPR 100", "dueDate": "2026-12-15"},
        whatsapp=WhatsAppTemplate(
            name="fee_nudge", language="en_US", parameters=("dueDate", "amount")
        ),
        templates={
            "in_app": {"en": Template(title="Fee", body="{{amount}} by {{dueDate}}")},
            "whatsapp": {
                "en": Template(body="Pay {{amount}} by {{dueDate}}."),
                "ne": Template(body="{{dueDate}} भित्र {{amount}} तिर्नुहोस्।"),
            },
        },
    )
    return dataclasses.replace(base, **changes)


def _mapping(**changes: Any) -> WhatsAppTemplate:
    base = _kind().whatsapp
    assert base is not None
    return dataclasses.replace(base, **changes)


def test_a_mapped_kind_boots() -> None:
    kind = Registry([_kind()]).get("fee.nudge")
    assert kind is not None and kind.whatsapp is not None
    assert kind.whatsapp.parameters == ("dueDate", "amount")
    assert kind.whatsapp.language_for("ne") == "en_US"  # no Nepali translation approved


def test_a_parameter_more_than_the_wording_uses_is_refused() -> None:
    with pytest.raises(RegistryError, match="takes 3 parameters"):
        Registry(
            [
                _kind(
                    variables={"amount": "1", "dueDate": "2", "student": "Aarav"},
                    whatsapp=_mapping(parameters=("dueDate", "amount", "student")),
                )
            ]
        )


def test_a_parameter_fewer_than_the_wording_uses_is_refused() -> None:
    with pytest.raises(RegistryError, match=r"whatsapp/en: uses 2 placeholders"):
        Registry([_kind(whatsapp=_mapping(parameters=("amount",)))])


def test_a_translation_using_other_placeholders_is_refused() -> None:
    kind = _kind()
    templates = {
        **kind.templates,
        "whatsapp": {**kind.templates["whatsapp"], "ne": Template(body="{{amount}} तिर्नुहोस्।")},
    }
    with pytest.raises(RegistryError, match="whatsapp/ne"):
        Registry([dataclasses.replace(kind, templates=templates)])


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"parameters": ("amount", "amount")}, "repeat"),
        ({"parameters": ("amount", "secret")}, "undeclared"),
        ({"name": "Fee Nudge"}, "lower-case"),
        ({"language": "english"}, "language code"),
        ({"languages": {"ne": "nepali"}}, "language code"),
    ],
)
def test_a_malformed_mapping_is_refused(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(RegistryError, match=match):
        Registry([_kind(whatsapp=_mapping(**changes))])


def test_whatsapp_needs_a_mapping_and_a_mapping_needs_whatsapp() -> None:
    with pytest.raises(RegistryError, match="without a WhatsApp template"):
        Registry([_kind(whatsapp=None)])
    with pytest.raises(RegistryError, match="does not declare whatsapp"):
        Registry(
            [
                _kind(
                    channels=("in_app",),
                    templates={"in_app": _kind().templates["in_app"]},
                )
            ]
        )


def test_a_whatsapp_wording_has_no_title() -> None:
    kind = _kind()
    templates = {
        **kind.templates,
        "whatsapp": {"en": Template(title="Fee", body="Pay {{amount}} by {{dueDate}}.")},
    }
    with pytest.raises(RegistryError, match="body only"):
        Registry([dataclasses.replace(kind, templates=templates)])


def test_the_sample_kinds_map_approved_templates() -> None:
    """The sample's fee reminder takes its parameters in the approved template's order, which is
    not the order its English wording reads them in."""
    kind = SAMPLE_REGISTRY.get("fee.reminder")
    assert kind is not None and kind.whatsapp is not None
    assert (kind.whatsapp.name, kind.whatsapp.language) == ("fee_reminder", "en")
    assert kind.whatsapp.parameters == ("amount", "studentName", "dueDate")
    assert kind.whatsapp.language_for("ne") == "ne"
    absence = SAMPLE_REGISTRY.get("attendance.absence_alert")
    assert absence is not None and absence.whatsapp is not None
    assert absence.whatsapp.parameters == ("studentName", "date")


def test_whatsapp_is_never_digested() -> None:
    """A digest is Herald's own wording; WhatsApp sends only the kind's approved template."""
    from herald.kinds.registry import Digest

    with pytest.raises(RegistryError, match="cannot digest whatsapp"):
        Registry([_kind(digest=Digest(window_seconds=3600, channels=("whatsapp",)))])
