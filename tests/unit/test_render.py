"""render(): override first, registry wording as the fallback, failures logged once."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import cast

import pytest

from herald.kinds.registry import Kind, Registry, Template
from herald.kinds.sample import ANNOUNCEMENT, PASSWORD_RESET, SAMPLE_REGISTRY, TRANSPORT_DELAY
from herald.rendering import render as render_module
from herald.rendering.render import Override, Rendered, render, warn_once

LOGGER = "herald.rendering.render"
VALUES = {"title": "Sports day", "message": "Friday", "name": "Sita"}


@pytest.fixture(autouse=True)
def _fresh_warned() -> Iterator[None]:
    """Each test starts with a process that has logged nothing yet."""
    render_module._warned.clear()
    yield
    render_module._warned.clear()


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    return caplog


def _records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER]


def test_registry_wording_without_override() -> None:
    """R-RENDER-1: with no override the code registry's wording is rendered."""
    rendered = render(ANNOUNCEMENT, "push", "en", VALUES)
    assert rendered == Rendered(title="Sports day", body="Friday")
    assert rendered.template_version is None


def test_override_is_used_when_present() -> None:
    """R-RENDER-4, R-RENDER-1: the active override for (kind, channel, locale) wins."""
    overrides = {
        ("announcement.posted", "push", "en"): Override("New: {{title}}", "Read: {{message}}", 7)
    }
    rendered = render(ANNOUNCEMENT, "push", "en", VALUES, overrides)
    assert rendered == Rendered("New: Sports day", "Read: Friday", None, 7)


def test_override_for_another_kind_channel_or_locale_is_ignored() -> None:
    """R-RENDER-4: only the override keyed by this exact (kind, channel, locale) applies."""
    override = Override("X", "X", 1)
    overrides = {
        ("announcement.posted", "sms", "en"): override,
        ("fee.due", "push", "en"): override,
        ("announcement.posted", "push", "fr"): override,
    }
    rendered = render(ANNOUNCEMENT, "push", "en", VALUES, overrides)
    assert rendered == Rendered("Sports day", "Friday")


def test_default_locale_override_does_not_replace_own_language_wording() -> None:
    """R-RENDER-4: an `en` override is not shown to a `ne` recipient whose Nepali wording exists."""
    overrides = {("announcement.posted", "email", "en"): Override("EN {{title}}", "EN", 3)}
    rendered = render(ANNOUNCEMENT, "email", "ne", VALUES, overrides)
    assert rendered is not None
    assert rendered.body.startswith("प्रिय Sita")
    assert rendered.template_version is None


def test_default_locale_override_applies_when_the_locale_falls_back() -> None:
    """R-RENDER-4: a recipient whose locale has no wording gets the default locale, override
    included."""
    overrides = {("announcement.posted", "push", "en"): Override("EN {{title}}", "EN", 3)}
    rendered = render(ANNOUNCEMENT, "push", "fr", VALUES, overrides)
    assert rendered == Rendered("EN Sports day", "EN", None, 3)


def test_override_for_a_locale_the_registry_lacks() -> None:
    """R-RENDER-4: an operator may add wording for a locale the code does not ship."""
    overrides = {("announcement.posted", "push", "fr"): Override("FR {{title}}", "FR", 2)}
    assert render(ANNOUNCEMENT, "push", "fr", VALUES, overrides) == Rendered(
        "FR Sports day", "FR", None, 2
    )


def test_override_with_unresolved_placeholder_falls_back_and_logs_once(
    logs: pytest.LogCaptureFixture,
) -> None:
    """R-RENDER-5, R-RENDER-27, R-RENDER-16: the registry wording is sent; the bad override is
    logged once per kind:channel:locale, however many recipients render it."""
    overrides = {("announcement.posted", "push", "en"): Override("{{title}}", "{{typo}}", 4)}
    for _ in range(50):
        assert render(ANNOUNCEMENT, "push", "en", VALUES, overrides) == Rendered(
            "Sports day", "Friday"
        )
    records = _records(logs)
    assert len(records) == 1
    assert "announcement.posted:push:en" in records[0].getMessage()


def test_override_failures_log_once_per_key(logs: pytest.LogCaptureFixture) -> None:
    """R-RENDER-14, R-RENDER-16: a different kind:channel:locale is its own log line."""
    bad = Override("{{nope}}", "{{nope}}", 1)
    overrides = {
        ("announcement.posted", "push", "en"): bad,
        ("announcement.posted", "push", "ne"): bad,
        ("announcement.posted", "in_app", "en"): bad,
    }
    for _ in range(3):
        for channel, locale in (("push", "en"), ("push", "ne"), ("in_app", "en")):
            assert render(ANNOUNCEMENT, channel, locale, VALUES, overrides) is not None
    assert len(_records(logs)) == 3


def test_override_that_raises_falls_back(logs: pytest.LogCaptureFixture) -> None:
    """R-RENDER-5, R-RENDER-27: an override whose render raises (a corrupt row) falls back to
    the registry wording and is logged once, with the exception."""
    corrupt = Override(title=None, body=cast(str, None), version=9)
    overrides = {("announcement.posted", "sms", "en"): corrupt}
    for _ in range(5):
        rendered = render(ANNOUNCEMENT, "sms", "en", VALUES, overrides)
        assert rendered == Rendered(None, "Sports day: Friday")
    records = _records(logs)
    assert len(records) == 1
    assert records[0].exc_info is not None


def test_invalid_telegram_override_falls_back(logs: pytest.LogCaptureFixture) -> None:
    """R-RENDER-27, R-RENDER-32: an override Telegram would refuse (a link) is not sent; the
    registry wording is."""
    phishing = Override(None, '<a href="https://evil.example">{{route}}</a>', 2)
    values = {"route": "Route 4", "minutes": "20"}
    rendered = render(
        TRANSPORT_DELAY, "telegram", "en", values, {("transport.delay", "telegram", "en"): phishing}
    )
    assert rendered == Rendered(None, "<b>Bus delayed</b>\nRoute 4: about 20 minutes late")
    assert len(_records(logs)) == 1


def test_override_failure_does_not_silence_a_registry_failure(
    logs: pytest.LogCaptureFixture,
) -> None:
    """R-RENDER-13, R-RENDER-16: a failing override and a failing registry builder for the same
    key are two different defects, and both are logged."""
    kind = _kind_with_builder(_raising_builder)
    overrides = {("demo.kind", "sms", "en"): Override(None, "{{missing}}", 1)}
    assert render(kind, "sms", "en", {"title": "t"}, overrides) is None
    assert len(_records(logs)) == 2


def _raising_builder(values: Mapping[str, str]) -> Template:
    raise RuntimeError("builder bug")


def _kind_with_builder(builder: object) -> Kind:
    registry = Registry(
        [
            Kind(
                name="demo.kind",
                category="system",
                channels=("sms",),
                variables={"title": "T"},
                templates={"sms": {"en": builder}},  # type: ignore[dict-item]
            )
        ]
    )
    kind = registry.get("demo.kind")
    assert kind is not None
    return kind


def test_raising_registry_builder_skips_the_channel_and_logs_stack_once(
    logs: pytest.LogCaptureFixture,
) -> None:
    """R-RENDER-13, R-RENDER-14: a builder that throws yields None (the channel is skipped,
    nothing propagates to the batch) and is logged with its stack once per key."""
    kind = _kind_with_builder(_raising_builder)
    for _ in range(20):
        assert render(kind, "sms", "en", {"title": "t"}) is None
    records = _records(logs)
    assert len(records) == 1
    assert records[0].levelno == logging.ERROR
    assert records[0].exc_info is not None
    assert "builder bug" in logs.text


def test_callable_builder_receives_values() -> None:
    """R-RENDER-6: a code builder may compute its template from the merged variables."""
    kind = _kind_with_builder(
        lambda values: Template(body=f"len={len(values['title'])} " + "{{title}}")
    )
    assert render(kind, "sms", "en", {"title": "abc"}) == Rendered(None, "len=3 abc")


def test_secret_ref_is_dropped_before_rendering() -> None:
    """R-SECRET-15: `secretRef` never reaches a builder or a template."""
    seen: list[Mapping[str, str]] = []

    def builder(values: Mapping[str, str]) -> Template:
        seen.append(values)
        return Template(body="ref={{secretRef}}")

    kind = _kind_with_builder(builder)
    assert render(kind, "sms", "en", {"title": "t", "secretRef": "vault:abc"}) is None
    assert seen and all("secretRef" not in values for values in seen)


def test_secret_ref_cannot_be_interpolated_by_an_override() -> None:
    """R-SECRET-15: an override that names `{{secretRef}}` cannot resolve, so it falls back."""
    overrides = {("announcement.posted", "sms", "en"): Override(None, "{{secretRef}}", 1)}
    values = {**VALUES, "secretRef": "vault:abc"}
    rendered = render(ANNOUNCEMENT, "sms", "en", values, overrides)
    assert rendered == Rendered(None, "Sports day: Friday")


def test_unresolved_registry_placeholder_suppresses(logs: pytest.LogCaptureFixture) -> None:
    """R-RENDER-9, R-RENDER-26, R-RENDER-14: a missing variable suppresses the send (None),
    logged once."""
    for _ in range(10):
        assert render(ANNOUNCEMENT, "sms", "en", {"title": "only the title"}) is None
    assert len(_records(logs)) == 1


def test_secret_variable_renders_when_supplied() -> None:
    """R-SECRET-15: the resolved secret value (not the reference) is what the template uses."""
    rendered = render(PASSWORD_RESET, "email", "en", {"name": "Sita", "token": "123456"})
    assert rendered is not None and "123456" in rendered.body


def test_nepali_wording_for_ne() -> None:
    """The Nepali wording is used for a `ne` recipient (DESIGN §6)."""
    rendered = render(ANNOUNCEMENT, "email", "ne", VALUES)
    assert rendered is not None
    assert rendered.body == "प्रिय Sita,\n\nFriday"


def test_region_tagged_locale_uses_its_language() -> None:
    """A `ne-NP` recipient reads the `ne` wording rather than the default."""
    rendered = render(ANNOUNCEMENT, "email", "ne-NP", VALUES)
    assert rendered is not None and rendered.body.startswith("प्रिय")


@pytest.mark.parametrize("locale", ["fr", "", "xx-YY", "EN"])
def test_unknown_locale_falls_back_to_default(locale: str) -> None:
    """R-RENDER-6: a locale without wording gets the kind's default locale."""
    rendered = render(ANNOUNCEMENT, "email", locale, VALUES)
    assert rendered is not None
    assert rendered.body == "Dear Sita,\n\nFriday"


def test_warn_keys_stay_bounded_by_templates(logs: pytest.LogCaptureFixture) -> None:
    """R-RENDER-16: arbitrary recipient locales all land on the default locale's key, so the
    per-process set cannot grow past the number of templates."""
    for i in range(100):
        render(ANNOUNCEMENT, "sms", f"x{i}", {})
    assert render_module._warned == {"announcement.posted:sms:en"}
    assert len(_records(logs)) == 1


def test_undeclared_channel_renders_nothing() -> None:
    """R-RENDER-6: no builder for a channel means nothing to send (skipped_no_template)."""
    assert render(PASSWORD_RESET, "sms", "en", {"token": "1", "name": "n"}) is None


def test_warn_once_logs_once_per_key(logs: pytest.LogCaptureFixture) -> None:
    """R-RENDER-14: warn_once is keyed by kind:channel:locale."""
    for _ in range(3):
        warn_once("k", "email", "en", "bad")
        warn_once("k", "email", "ne", "bad")
    assert [r.getMessage() for r in _records(logs)] == [
        "template k:email:en: bad",
        "template k:email:ne: bad",
    ]


def test_every_sample_template_renders_with_its_sample_values() -> None:
    """R-RENDER-6: every (kind, channel, locale) of the sample registry renders with the
    declared sample variables, the recipient's name and its secrets."""
    for kind in SAMPLE_REGISTRY:
        values = {**kind.variables, "name": "Sita", **dict.fromkeys(kind.secret_variables, "s")}
        for channel in kind.channels:
            for locale in ("en", "ne"):
                rendered = render(kind, channel, locale, values)
                assert rendered is not None, (kind.name, channel, locale)
                assert "{{" not in rendered.body


def test_content_hash_separates_title_and_body() -> None:
    """The content hash of ("a", "bc") differs from ("ab", "c")."""
    assert Rendered("a", "bc").content_hash != Rendered("ab", "c").content_hash
