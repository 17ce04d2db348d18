"""The kind registry refuses to boot on anything that would misbehave at send time."""

from __future__ import annotations

import dataclasses
import re
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from herald import vocabulary
from herald.errors import RegistryError
from herald.kinds.registry import Kind, Registry, Template, load_registry
from herald.kinds.sample import SAMPLE_REGISTRY


def _kind(**changes: Any) -> Kind:
    """A valid kind; each test changes one thing about it."""
    base = Kind(
        name="demo.posted",
        category="announcement",
        channels=("in_app", "sms"),
        variables={"title": "Sample title"},
        templates={
            "in_app": {"en": Template(title="{{title}}", body="Hi {{name}}")},
            "sms": {"en": Template(body="{{title}}")},
        },
    )
    return dataclasses.replace(base, **changes)


def test_a_valid_kind_boots() -> None:
    """R-RENDER-6: the baseline used by the refusals below is itself accepted."""
    registry = Registry([_kind()])
    assert registry.get("demo.posted") is not None
    assert len(registry) == 1


def test_in_app_without_persist_rendered_is_refused() -> None:
    """R-RENDER-15, R-RENDER-28: the centre reads the in-app delivery's rendered columns."""
    with pytest.raises(RegistryError, match="persist_rendered"):
        Registry([_kind(persist_rendered=False)])


def test_persist_rendered_may_be_off_without_in_app() -> None:
    """R-RENDER-15: the rule is about in_app; an SMS-only kind need not persist its rendering."""
    kind = _kind(
        channels=("sms",), templates={"sms": {"en": Template(body="x")}}, persist_rendered=False
    )
    assert len(Registry([kind])) == 1


def test_unknown_category_is_refused() -> None:
    """DESIGN §6: an unknown category refuses to boot."""
    with pytest.raises(RegistryError, match="category"):
        Registry([_kind(category="marketing")])


@pytest.mark.parametrize(
    "category", [c for c in vocabulary.CATEGORIES if c not in ("security", "account")]
)
def test_unsuppressible_outside_security_and_account_is_refused(category: str) -> None:
    """DESIGN §6: only security and account may hold an unsuppressible kind."""
    with pytest.raises(RegistryError, match="unsuppressible"):
        Registry([_kind(category=category, unsuppressible=True)])


@pytest.mark.parametrize("category", ["security", "account"])
def test_unsuppressible_in_security_and_account_is_accepted(category: str) -> None:
    """DESIGN §6: security and account kinds may be unsuppressible."""
    assert len(Registry([_kind(category=category, unsuppressible=True)])) == 1


def test_declared_channel_without_default_locale_builder_is_refused() -> None:
    """R-RENDER-6: every declared channel has a code builder in the default locale."""
    templates = {
        "in_app": {"en": Template(title="t", body="b")},
        "sms": {"ne": Template(body="{{title}}")},
    }
    with pytest.raises(RegistryError, match="no en builder for sms"):
        Registry([_kind(templates=templates)])


def test_declared_channel_without_any_builder_is_refused() -> None:
    """R-RENDER-6: declaring a channel means shipping its fallback wording."""
    with pytest.raises(RegistryError, match="builder for email"):
        Registry([_kind(channels=("in_app", "sms", "email"))])


def test_builder_for_undeclared_channel_is_refused() -> None:
    """R-RENDER-6: wording for a channel the kind does not declare is a mistake, not a feature."""
    templates = {
        "in_app": {"en": Template(title="t", body="b")},
        "sms": {"en": Template(body="b")},
        "push": {"en": Template(title="t", body="b")},
    }
    with pytest.raises(RegistryError, match="undeclared channel"):
        Registry([_kind(templates=templates)])


def test_template_using_undeclared_variable_is_refused() -> None:
    """R-RENDER-9: a variable the kind does not declare would never resolve."""
    templates = {
        "in_app": {"en": Template(title="{{title}}", body="{{subtitle}}")},
        "sms": {"en": Template(body="x")},
    }
    with pytest.raises(RegistryError, match="subtitle"):
        Registry([_kind(templates=templates)])


def test_undeclared_variable_in_another_locale_is_refused() -> None:
    """R-RENDER-9: every locale's wording is checked, not only the default."""
    templates = {
        "in_app": {
            "en": Template(title="{{title}}", body="b"),
            "ne": Template(title="{{titel}}", body="b"),
        },
        "sms": {"en": Template(body="x")},
    }
    with pytest.raises(RegistryError, match="titel"):
        Registry([_kind(templates=templates)])


def test_name_and_secret_variables_are_allowed() -> None:
    """DESIGN §6: every template may use {{name}}; a kind's secret variables are usable too."""
    kind = _kind(
        category="security",
        secret_variables=("token",),
        templates={
            "in_app": {"en": Template(title="{{name}}", body="{{token}}")},
            "sms": {"en": Template(body="{{name}} {{token}} {{title}}")},
        },
    )
    assert len(Registry([kind])) == 1


def test_expression_placeholder_is_refused() -> None:
    """R-RENDER-8: `{{a.b}}` is never evaluated, so shipping it would suppress every send."""
    templates = {
        "in_app": {"en": Template(title="{{title}}", body="b")},
        "sms": {"en": Template(body="{{ title.upper() }}")},
    }
    with pytest.raises(RegistryError, match="flat names"):
        Registry([_kind(templates=templates)])


def test_secret_ref_as_variable_is_refused() -> None:
    """R-SECRET-15: secretRef is dropped before rendering; a template may not depend on it."""
    with pytest.raises(RegistryError, match="secretRef"):
        Registry([_kind(variables={"title": "t", "secretRef": "x"})])


def test_invalid_telegram_wording_is_refused() -> None:
    """R-RENDER-32: shipped Telegram wording obeys the same rules as an admin's template."""
    kind = _kind(
        channels=("telegram",),
        templates={"telegram": {"en": Template(body='<a href="https://x.example">{{title}}</a>')}},
    )
    with pytest.raises(RegistryError, match="link"):
        Registry([kind])


def test_title_required_where_the_channel_shows_one() -> None:
    """R-RENDER-6: in_app, email and push wording must have a title."""
    templates = {"in_app": {"en": Template(body="b")}, "sms": {"en": Template(body="b")}}
    with pytest.raises(RegistryError, match="title"):
        Registry([_kind(templates=templates)])


@pytest.mark.parametrize(
    "changes",
    [{"priority": "critical"}, {"dedupe": "sometimes"}, {"channels": ()}],
)
def test_other_unknown_values_are_refused(changes: Mapping[str, Any]) -> None:
    """DESIGN §6: priority, dedupe policy and channels come from the vocabulary."""
    with pytest.raises(RegistryError):
        Registry([_kind(**changes)])


def test_unknown_channel_is_refused() -> None:
    """DESIGN §6: a channel outside the vocabulary refuses to boot."""
    kind = _kind(channels=("fax",), templates={"fax": {"en": Template(body="b")}})
    with pytest.raises(RegistryError, match="fax"):
        Registry([kind])


def test_duplicate_kind_is_refused() -> None:
    """DESIGN §6: a kind name is declared once."""
    with pytest.raises(RegistryError, match="twice"):
        Registry([_kind(), _kind(category="system")])


# --- load_registry ------------------------------------------------------------------------


@pytest.fixture
def kinds_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A deployment's own kinds module on sys.path."""
    name = f"deployment_kinds_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            from herald.kinds.registry import Kind, Registry, Template

            registry = Registry([
                Kind(
                    name="custom.kind",
                    category="system",
                    channels=("sms",),
                    templates={"sms": {"en": Template(body="hello {{name}}")}},
                )
            ])
            not_a_registry = {"custom.kind": "nope"}
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_load_registry_loads_module_attribute(kinds_module: str) -> None:
    """DESIGN §6: HERALD_KINDS=package.module:registry picks the deployment's registry."""
    registry = load_registry(f"{kinds_module}:registry")
    assert [k.name for k in registry] == ["custom.kind"]


def test_load_registry_refuses_non_registry(kinds_module: str) -> None:
    """DESIGN §6: the attribute must be a herald.kinds.Registry."""
    with pytest.raises(RegistryError, match=r"not a herald\.kinds\.Registry"):
        load_registry(f"{kinds_module}:not_a_registry")


@pytest.mark.parametrize("spec", ["no_colon_here", ":registry", "module:"])
def test_load_registry_refuses_malformed_spec(spec: str) -> None:
    """DESIGN §6: the setting must look like package.module:attribute."""
    with pytest.raises(RegistryError, match=r"package\.module:registry"):
        load_registry(spec)


def test_load_registry_refuses_missing_module_or_attribute(kinds_module: str) -> None:
    """DESIGN §6: a wrong setting refuses to boot with a RegistryError, not a stray ImportError."""
    with pytest.raises(RegistryError, match="cannot import"):
        load_registry("herald_no_such_module_anywhere:registry")
    with pytest.raises(RegistryError, match="no attribute"):
        load_registry(f"{kinds_module}:missing")


def test_load_registry_defaults_to_sample() -> None:
    """DESIGN §6: without HERALD_KINDS Herald uses its sample registry."""
    assert load_registry(None) is SAMPLE_REGISTRY
    assert load_registry("") is SAMPLE_REGISTRY


# --- the sample registry ------------------------------------------------------------------

# DESIGN §6, the sample registry table: kind → (category, channels, dedupe, unsuppressible,
# variables, secret variables).
SAMPLE_TABLE: dict[str, tuple[str, set[str], str, bool, set[str], set[str]]] = {
    "announcement.posted": (
        "announcement",
        {"in_app", "email", "push", "sms", "telegram"},
        "collapse",
        False,
        {"title", "message"},
        set(),
    ),
    "assignment.published": (
        "academic",
        {"in_app", "email", "push"},
        "collapse",
        False,
        {"title", "subject", "dueDate"},
        set(),
    ),
    # Its digest (issue 16): added by the registry, Herald's own wording.
    "assignment.published.digest": (
        "academic",
        {"email"},
        "repeatable",
        False,
        {"count", "items"},
        set(),
    ),
    "attendance.event": (
        "attendance",
        {"in_app", "email", "push", "sms"},
        "collapse",
        False,
        {"studentName", "date", "eventType"},
        set(),
    ),
    "attendance.reminder": (
        "attendance",
        {"in_app", "email", "push", "sms"},
        "collapse",
        False,
        {"studentName", "date", "eventType"},
        set(),
    ),
    "fee.due": (
        "finance",
        {"in_app", "email", "sms"},
        "collapse",
        False,
        {"amount", "dueDate"},
        set(),
    ),
    "transport.delay": (
        "transport",
        {"in_app", "push", "sms", "telegram"},
        "repeatable",
        False,
        {"route", "minutes"},
        set(),
    ),
    "event.scheduled": ("events", {"in_app", "email"}, "collapse", False, {"title", "date"}, set()),
    # Issue 45: in-app now, email after 30 minutes unread, SMS 2 hours after that.
    "announcement.urgent": (
        "announcement",
        {"in_app", "email", "sms"},
        "repeatable",
        False,
        {"title", "message"},
        set(),
    ),
    "system.maintenance": ("system", {"in_app", "email"}, "collapse", False, {"window"}, set()),
    "staff.notice": (
        "announcement",
        {"in_app", "email", "slack", "teams"},
        "collapse",
        False,
        {"title", "message"},
        set(),
    ),
    "attendance.absence_alert": (
        "attendance",
        {"in_app", "sms", "whatsapp"},
        "collapse",
        False,
        {"studentName", "date"},
        set(),
    ),
    "fee.reminder": (
        "finance",
        {"in_app", "email", "whatsapp"},
        "collapse",
        False,
        {"studentName", "amount", "dueDate"},
        set(),
    ),
    "reminder.notice": (
        "events",
        {"in_app", "email", "push", "telegram"},
        "collapse",
        False,
        {"title", "message"},
        set(),
    ),
    "account.welcome": ("account", {"in_app", "email"}, "collapse", False, set(), set()),
    "auth.password_reset": ("security", {"email"}, "repeatable", True, set(), {"token"}),
    "auth.otp": ("security", {"sms", "email"}, "repeatable", True, set(), {"code"}),
    "auth.email_change": ("security", {"email"}, "repeatable", True, set(), {"token", "toEmail"}),
}


def test_sample_registry_matches_the_design_table() -> None:
    """DESIGN §6: the sample kinds, their categories, channels, dedupe policies,
    unsuppressible flags and variables are the ones the design lists."""
    actual = {
        k.name: (
            k.category,
            set(k.channels),
            k.dedupe,
            k.unsuppressible,
            set(k.variables),
            set(k.secret_variables),
        )
        for k in SAMPLE_REGISTRY
    }
    assert actual == SAMPLE_TABLE


def test_sample_registry_covers_every_category_and_channel() -> None:
    """DESIGN §6: every category and every channel appears at least once."""
    assert {k.category for k in SAMPLE_REGISTRY} == set(vocabulary.CATEGORIES)
    assert {c for k in SAMPLE_REGISTRY for c in k.channels} == set(vocabulary.CHANNELS)


def test_sample_registry_has_en_and_ne_for_every_template() -> None:
    """DESIGN §6: English and Nepali wording for every kind and channel."""
    missing = [
        (k.name, channel, locale)
        for k in SAMPLE_REGISTRY
        for channel in k.channels
        for locale in ("en", "ne")
        if locale not in k.templates.get(channel, {})
    ]
    assert missing == []


def test_sample_nepali_wording_differs_from_english_where_it_has_words() -> None:
    """DESIGN §6: the `ne` entries are Nepali wording, not copies of the English."""
    for k in SAMPLE_REGISTRY:
        for channel in k.channels:
            en, ne = k.templates[channel]["en"], k.templates[channel]["ne"]
            assert isinstance(en, Template) and isinstance(ne, Template)
            english_words = any(
                ch.isalpha() for ch in _strip_placeholders(en.body + (en.title or ""))
            )
            if english_words:
                assert (ne.title, ne.body) != (en.title, en.body), (k.name, channel)


def _strip_placeholders(text: str) -> str:
    return re.sub(r"\{\{[^}]*\}\}|<[^>]*>", "", text)


def test_password_reset_is_repeatable_and_unsuppressible() -> None:
    """R-DEDUPE-12: collapse on a reset denies account recovery; and no preference may mute it."""
    kind = SAMPLE_REGISTRY.get("auth.password_reset")
    assert kind is not None
    assert kind.dedupe == "repeatable"
    assert kind.unsuppressible
    assert kind.category == "security"


def test_sample_in_app_kinds_persist_their_rendering() -> None:
    """R-RENDER-15: every sample kind with in_app persists its rendered title and body."""
    assert all(k.persist_rendered for k in SAMPLE_REGISTRY if "in_app" in k.channels)


def test_a_digest_brings_its_kind_and_refuses_what_cannot_be_held() -> None:
    """Issue 16: a digest window adds `<kind>.digest` in English and Nepali; in-app, undeclared
    channels, silly windows and security kinds are refused."""
    from herald.kinds.registry import Digest

    digest = SAMPLE_REGISTRY.get("assignment.published.digest")
    assert digest is not None and digest.locales == {"en", "ne"}
    base = SAMPLE_REGISTRY.get("assignment.published")
    assert base is not None and base.digest == Digest(3600, ("email",))
    from dataclasses import replace

    for bad in (
        Digest(3600, ("in_app",)),
        Digest(3600, ("sms",)),
        Digest(10, ("email",)),
    ):
        with pytest.raises(RegistryError):
            Registry([replace(base, digest=bad)])


# --- escalation plans (docs/escalation.md) ------------------------------------------------------


def _escalating(*steps: tuple[str, int], **changes: Any) -> Kind:
    from herald.kinds.registry import Escalation, EscalationStep

    email = {"en": Template(title="{{title}}", body="Dear {{name}}")}
    return _kind(
        channels=("in_app", "sms", "email"),
        templates={**_kind().templates, "email": email},
        escalation=Escalation(steps=tuple(EscalationStep(c, d) for c, d in steps)),
        **changes,
    )


def test_an_escalation_plan_boots() -> None:
    registry = Registry([_escalating(("email", 1800), ("sms", 7200))])
    kind = registry.get("demo.posted")
    assert kind is not None and kind.escalation is not None
    assert kind.escalation.channels == ("email", "sms")
    assert SAMPLE_REGISTRY.get("announcement.urgent") is not None


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ((("email", -60),), "before the step it follows"),
        ((("email", 0),), "a delay is 1..2592000 seconds"),
        ((("email", 30 * 86_400 + 1),), "a delay is 1..2592000 seconds"),
        ((("fax", 60),), "unknown channel 'fax'"),
        ((("push", 60),), "cannot escalate to 'push'"),
        ((("in_app", 60),), "cannot escalate to 'in_app'"),
        ((("email", 60), ("sms", 60), ("email", 60)), "'email' appears twice"),
        ((), "at least one step"),
    ],
)
def test_a_bad_escalation_plan_is_refused_at_load(
    steps: tuple[tuple[str, int], ...], message: str
) -> None:
    with pytest.raises(RegistryError, match=re.escape(message)):
        Registry([_escalating(*steps)])


def test_a_plan_escalates_only_to_declared_channels_from_an_in_app_copy() -> None:
    from herald.kinds.registry import Escalation, EscalationStep

    with pytest.raises(RegistryError, match="cannot escalate to 'telegram'"):
        Registry([_escalating(("telegram", 60))])
    no_in_app = _kind(
        channels=("sms",),
        templates={"sms": {"en": Template(body="{{title}}")}},
        escalation=Escalation(steps=(EscalationStep("sms", 60),)),
    )
    with pytest.raises(RegistryError, match="escalates from an in-app copy"):
        Registry([no_in_app])


def test_a_channel_is_digested_or_escalated_not_both() -> None:
    from herald.kinds.registry import Digest

    with pytest.raises(RegistryError, match="digested or escalated"):
        Registry([_escalating(("email", 60), digest=Digest(window_seconds=600))])
