"""Kinds are declared in code; the registry validates them when it is built (boot time).

A kind names its category, priority, dedupe policy, whether preferences may suppress it, the
variables its templates may use (with sample values for previews and override validation), and a
builder per channel per locale. Operator overrides (notification_template) layer on top of these
builders but never replace them: the code builder is the fallback that cannot be deleted
(R-RENDER-6, R-RENDER-7).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from herald import vocabulary
from herald.errors import RegistryError, TelegramTemplateInvalid
from herald.rendering.interpolate import malformed_placeholders, placeholders
from herald.rendering.telegram import validate_telegram_template

# Channels whose templates have a title: the email subject, the push and in-app heading, Slack's
# header block and the Teams card's heading. SMS and Telegram have a body only.
TITLED_CHANNELS: frozenset[str] = frozenset({"in_app", "email", "push", "slack", "teams"})

# Every template may use the recipient's name (the per-recipient overlay, R-AUD-15).
RECIPIENT_VARIABLES: frozenset[str] = frozenset({"name"})


@dataclass(frozen=True)
class Template:
    """One channel's wording in one locale: `{{name}}` placeholders, nothing else (R-RENDER-8).

    `title` is the email subject, the push/in-app title, the Slack header, the Teams heading;
    SMS and Telegram have only a body. Slack and Teams wording is plain text (escaped for them
    by their providers).
    """

    body: str
    title: str | None = None

    def placeholders(self) -> set[str]:
        found = placeholders(self.body)
        if self.title:
            found |= placeholders(self.title)
        return found

    def malformed_placeholders(self) -> list[str]:
        """`{{…}}` spans that are not flat names: they would never render (R-RENDER-8)."""
        return malformed_placeholders(self.title or "") + malformed_placeholders(self.body)


# Meta's rules for a message template's name (lower-case letters, digits, underscores) and its
# language code (`en`, `en_US`, `pt_BR`; `ne` for Nepali), and its cap on body parameters.
WHATSAPP_TEMPLATE_NAME = re.compile(r"[a-z0-9_]{1,512}")
WHATSAPP_LANGUAGE = re.compile(r"[a-z]{2,3}(_[A-Z]{2})?")
MAX_WHATSAPP_PARAMETERS = 100


@dataclass(frozen=True)
class WhatsAppTemplate:
    """The message template Meta approved for a kind (WhatsApp sends only approved templates to
    a person who has not written in the last 24 hours).

    `name` and `language` name the template as it was approved; `parameters` are the kind's
    variables that fill its body's `{{1}}`, `{{2}}`, … in that order. The kind's own `whatsapp`
    wording is the approved text with those variables as its placeholders: what preview, the
    trace and the stored rendering show. The registry refuses a mapping whose parameters are not
    exactly that wording's placeholders (a count that does not match the approved template).
    `languages` maps a recipient's locale to another approved translation of the template
    (`{"ne": "ne"}`); a locale it does not name is sent in `language`.
    """

    name: str
    language: str
    parameters: tuple[str, ...] = ()
    languages: Mapping[str, str] = field(default_factory=dict)

    def language_for(self, locale: str | None) -> str:
        return self.languages.get(locale or "", self.language)


@dataclass(frozen=True)
class Digest:
    """Deliveries of the kind on `channels` for one person within `window_seconds` of the first
    go out as one message listing them (herald.digests); the in-app inbox still shows each."""

    window_seconds: int
    channels: tuple[str, ...] = ("email",)


DIGEST_SUFFIX = ".digest"
MIN_DIGEST_WINDOW = 60
MAX_DIGEST_WINDOW = 7 * 86_400


@dataclass(frozen=True)
class EscalationStep:
    """A later step of an escalation plan: send on `channel` if the in-app copy is still unread
    `after_seconds` after the previous step's due time (the first step's: the fan-out)."""

    channel: str
    after_seconds: int


@dataclass(frozen=True)
class Escalation:
    """An ordered plan (herald.scheduling.escalation, docs/escalation.md): the in-app copy and
    every requested channel not in the plan go out at fan-out; each step's channel goes out only
    if the person has not read the in-app copy by its due time. Reading stops the plan."""

    steps: tuple[EscalationStep, ...]

    @property
    def channels(self) -> tuple[str, ...]:
        return tuple(step.channel for step in self.steps)

    @property
    def delays(self) -> tuple[int, ...]:
        return tuple(step.after_seconds for step in self.steps)

    def delays_with(self, stored: Iterable[int] | None) -> tuple[int, ...]:
        """A tenant's stored delays, else the code's. Stored delays that no longer fit the plan
        (a release changed its steps) are ignored: the code is the fallback."""
        found = tuple(stored) if stored is not None else ()
        return found if stored is not None and len(found) == len(self.steps) else self.delays


MIN_ESCALATION_DELAY = 1
MAX_ESCALATION_DELAY = 30 * 86_400
# Channels a plan may escalate to: one delivery per step (push, one per device, is not one yet).
ESCALATION_CHANNELS: frozenset[str] = frozenset(
    c for c in vocabulary.REMOTE_CHANNELS if c != "push"
)


def escalation_problem(
    kind_channels: Iterable[str], channels: Iterable[str], delays: Iterable[int]
) -> tuple[str, str] | None:
    """(code, message) of the first thing wrong with a plan, or None. Shared by the registry
    (raised at load) and the per-tenant override route (a 422 with the code)."""
    declared = set(kind_channels)
    seen: set[str] = set()
    steps = list(zip(list(channels), list(delays), strict=False))
    if not steps:
        return "ESCALATION_EMPTY", "an escalation plan has at least one step"
    if "in_app" not in declared:
        return "ESCALATION_WITHOUT_IN_APP", "an escalation plan escalates from an in-app copy"
    for index, (channel, delay) in enumerate(steps, start=1):
        if channel not in vocabulary.CHANNELS:
            return "ESCALATION_UNKNOWN_CHANNEL", f"step {index}: unknown channel {channel!r}"
        if channel not in ESCALATION_CHANNELS or channel not in declared:
            return (
                "ESCALATION_UNKNOWN_CHANNEL",
                f"step {index}: the kind cannot escalate to {channel!r}",
            )
        if channel in seen:
            return "ESCALATION_CYCLE", f"step {index}: {channel!r} appears twice in the plan"
        seen.add(channel)
        if isinstance(delay, bool) or not isinstance(delay, int):
            return "ESCALATION_DELAY_INVALID", f"step {index}: a delay is whole seconds"
        if delay < 0:
            return (
                "ESCALATION_STEP_BEFORE_PREDECESSOR",
                f"step {index}: due before the step it follows",
            )
        if not MIN_ESCALATION_DELAY <= delay <= MAX_ESCALATION_DELAY:
            return (
                "ESCALATION_DELAY_OUT_OF_RANGE",
                f"step {index}: a delay is {MIN_ESCALATION_DELAY}..{MAX_ESCALATION_DELAY} seconds",
            )
    return None


# A builder may be a Template or code that returns one from the merged variables. An in-app
# builder function receives the recipient's name as a placeholder that the fan-out replaces
# afterwards (see Kind), so it must not branch on `name`.
Builder = Template | Callable[[Mapping[str, str]], Template]


@dataclass(frozen=True)
class Kind:
    """One notification kind: its category, channels, and a builder per channel per locale.

    A builder function for in_app is called once per locale per fan-out batch, not once per
    recipient (herald.fanout.wording): the values it receives carry a per-batch placeholder as
    `name`, which the batch statement replaces with each recipient's name afterwards. It must
    therefore not branch on `name`; `{{name}}` in the wording it returns reads each recipient's
    own name.
    """

    name: str
    category: str
    channels: tuple[str, ...]
    templates: Mapping[str, Mapping[str, Builder]]
    priority: str = "normal"
    dedupe: str = "collapse"
    unsuppressible: bool = False
    # name → sample value, used by preview and to validate operator overrides.
    variables: Mapping[str, str] = field(default_factory=dict)
    # Values that arrive only through a secretRef at send time, never stored on the event.
    secret_variables: tuple[str, ...] = ()
    persist_rendered: bool = True
    default_locale: str = "en"
    digest: Digest | None = None
    # The approved WhatsApp template a `whatsapp` delivery of this kind is sent as.
    whatsapp: WhatsAppTemplate | None = None
    escalation: Escalation | None = None

    def builder(self, channel: str, locale: str) -> Builder | None:
        by_locale = self.templates.get(channel)
        if not by_locale:
            return None
        return by_locale.get(locale) or by_locale.get(self.default_locale)

    @property
    def allowed_placeholders(self) -> frozenset[str]:
        return frozenset(self.variables) | frozenset(self.secret_variables) | RECIPIENT_VARIABLES

    @property
    def locales(self) -> frozenset[str]:
        return frozenset(loc for by_locale in self.templates.values() for loc in by_locale)


class Registry:
    """An immutable, validated set of kinds. Construction refuses anything that would misbehave."""

    def __init__(self, kinds: Iterable[Kind]) -> None:
        self._kinds: dict[str, Kind] = {}
        declared = list(kinds)
        # A kind with a digest brings its digest kind (`<name>.digest`), whose wording is
        # Herald's own (below).
        companions = [digest_kind(k) for k in declared if k.digest is not None]
        for kind in [*declared, *companions]:
            if kind.name in self._kinds:
                raise RegistryError(f"kind {kind.name!r} is declared twice")
            _validate(kind)
            self._kinds[kind.name] = kind

    def get(self, name: str) -> Kind | None:
        return self._kinds.get(name)

    def __iter__(self) -> Iterator[Kind]:
        return iter(self._kinds.values())

    def __len__(self) -> int:
        return len(self._kinds)

    def kinds(self) -> list[Kind]:
        return list(self._kinds.values())

    def kinds_in(self, category: str) -> list[Kind]:
        return [k for k in self._kinds.values() if k.category == category]

    def digest_windows(self) -> dict[str, int]:
        """Each digesting kind's window in seconds (what the digest sweeper waits for)."""
        return {k.name: k.digest.window_seconds for k in self if k.digest is not None}


# Herald's own wording for digests, in English and Nepali: the count in the subject, the items
# one a line in the body (each item's line is rendered from its own kind's template).
_DIGEST_EMAIL = {
    "en": Template(
        title="{{count}} new notifications",
        body="Dear {{name}},\n\nHere is what arrived for you:\n\n{{items}}",
    ),
    "ne": Template(
        title="{{count}} नयाँ सूचनाहरू",
        body="प्रिय {{name}},\n\nतपाईंका लागि आएका सूचनाहरू:\n\n{{items}}",
    ),
}
_DIGEST_SHORT = {
    "en": Template(title="{{count}} new notifications", body="{{items}}"),
    "ne": Template(title="{{count}} नयाँ सूचनाहरू", body="{{items}}"),
}
_DIGEST_TELEGRAM = {
    "en": Template(body="{{count}} new notifications:\n{{items}}"),
    "ne": Template(body="{{count}} नयाँ सूचनाहरू:\n{{items}}"),
}


def _digest_templates(channel: str) -> Mapping[str, Builder]:
    if channel == "email":
        return dict(_DIGEST_EMAIL)
    if channel == "telegram":
        return dict(_DIGEST_TELEGRAM)
    if channel == "sms":
        return {locale: Template(body=t.body) for locale, t in _DIGEST_TELEGRAM.items()}
    return dict(_DIGEST_SHORT)


def digest_kind(kind: Kind) -> Kind:
    assert kind.digest is not None
    return Kind(
        name=kind.name + DIGEST_SUFFIX,
        category=kind.category,
        channels=kind.digest.channels,
        templates={channel: _digest_templates(channel) for channel in kind.digest.channels},
        priority=kind.priority,
        dedupe="repeatable",
        variables={"count": "3", "items": "• One\n• Two\n• Three"},
    )


def _validate_digest(kind: Kind, where: str) -> None:
    digest = kind.digest
    if digest is None:
        return
    if not MIN_DIGEST_WINDOW <= digest.window_seconds <= MAX_DIGEST_WINDOW:
        raise RegistryError(
            f"{where}: a digest window is {MIN_DIGEST_WINDOW}..{MAX_DIGEST_WINDOW} seconds"
        )
    for channel in digest.channels:
        if channel == "in_app" or channel not in kind.channels:
            raise RegistryError(f"{where}: cannot digest channel {channel!r}")
        if channel == "whatsapp":
            # A digest is Herald's own wording, and WhatsApp sends only approved templates.
            raise RegistryError(f"{where}: cannot digest whatsapp (approved templates only)")
    if kind.secret_variables or kind.unsuppressible:
        raise RegistryError(f"{where}: a kind carrying secrets or security notices is never held")


def _validate_escalation(kind: Kind, where: str) -> None:
    plan = kind.escalation
    if plan is None:
        return
    problem = escalation_problem(kind.channels, plan.channels, plan.delays)
    if problem is not None:
        raise RegistryError(f"{where}: {problem[1]}")
    if kind.digest is not None and set(kind.digest.channels) & set(plan.channels):
        raise RegistryError(f"{where}: a channel is either digested or escalated, not both")


def _validate(kind: Kind) -> None:
    where = f"kind {kind.name!r}"
    _validate_digest(kind, where)
    _validate_escalation(kind, where)
    if kind.category not in vocabulary.CATEGORIES:
        raise RegistryError(f"{where}: unknown category {kind.category!r}")
    if kind.priority not in vocabulary.PRIORITIES:
        raise RegistryError(f"{where}: unknown priority {kind.priority!r}")
    if kind.dedupe not in vocabulary.DEDUPE_POLICIES:
        raise RegistryError(f"{where}: unknown dedupe policy {kind.dedupe!r}")
    if kind.unsuppressible and kind.category not in vocabulary.UNSUPPRESSIBLE_CATEGORIES:
        raise RegistryError(
            f"{where}: only {vocabulary.UNSUPPRESSIBLE_CATEGORIES} may hold an unsuppressible kind"
        )
    if not kind.channels:
        raise RegistryError(f"{where}: declares no channel")
    for channel in kind.channels:
        if channel not in vocabulary.CHANNELS:
            raise RegistryError(f"{where}: unknown channel {channel!r}")
        # R-RENDER-6: every declared channel has a code builder in the default locale.
        if kind.builder(channel, kind.default_locale) is None:
            raise RegistryError(f"{where}: no {kind.default_locale} builder for {channel}")
    # R-RENDER-15 / R-RENDER-28: the centre reads the in-app delivery's rendered columns.
    if "in_app" in kind.channels and not kind.persist_rendered:
        raise RegistryError(f"{where}: declares in_app without persist_rendered")
    # R-SECRET-15: secretRef is dropped before rendering, so a template using it never renders.
    if "secretRef" in kind.allowed_placeholders:
        raise RegistryError(f"{where}: secretRef cannot be a template variable")
    _validate_whatsapp(kind, where)
    for channel, by_locale in kind.templates.items():
        if channel not in kind.channels:
            raise RegistryError(f"{where}: has a builder for undeclared channel {channel!r}")
        for locale, builder in by_locale.items():
            if isinstance(builder, Template):
                unknown = builder.placeholders() - kind.allowed_placeholders
                if unknown:
                    raise RegistryError(
                        f"{where}: {channel}/{locale} uses undeclared variables {sorted(unknown)}"
                    )
                malformed = builder.malformed_placeholders()
                if malformed:
                    raise RegistryError(
                        f"{where}: {channel}/{locale} has placeholders that are not flat names "
                        f"{malformed}"
                    )
                if channel in TITLED_CHANNELS and not builder.title:
                    raise RegistryError(f"{where}: {channel}/{locale} needs a title")
                if channel == "telegram":
                    try:
                        validate_telegram_template(builder.body)
                    except TelegramTemplateInvalid as exc:
                        raise RegistryError(f"{where}: telegram/{locale}: {exc.message}") from exc


def _validate_whatsapp(kind: Kind, where: str) -> None:
    mapping = kind.whatsapp
    if mapping is None:
        if "whatsapp" in kind.channels:
            raise RegistryError(f"{where}: declares whatsapp without a WhatsApp template mapping")
        return
    if "whatsapp" not in kind.channels:
        raise RegistryError(f"{where}: has a WhatsApp template but does not declare whatsapp")
    if not WHATSAPP_TEMPLATE_NAME.fullmatch(mapping.name):
        raise RegistryError(
            f"{where}: WhatsApp template name {mapping.name!r} is not lower-case letters, "
            "digits and underscores"
        )
    for language in (mapping.language, *mapping.languages.values()):
        if not WHATSAPP_LANGUAGE.fullmatch(language):
            raise RegistryError(f"{where}: {language!r} is not a WhatsApp language code")
    parameters = mapping.parameters
    if len(parameters) > MAX_WHATSAPP_PARAMETERS:
        raise RegistryError(f"{where}: a WhatsApp template takes at most 100 parameters")
    if len(set(parameters)) != len(parameters):
        raise RegistryError(f"{where}: WhatsApp template parameters repeat a variable")
    unknown = set(parameters) - kind.allowed_placeholders
    if unknown:
        raise RegistryError(
            f"{where}: WhatsApp template parameters name undeclared variables {sorted(unknown)}"
        )
    for locale, builder in kind.templates.get("whatsapp", {}).items():
        if isinstance(builder, Template):
            check_whatsapp_wording(mapping, builder, f"{where}: whatsapp/{locale}")


def whatsapp_wording_mismatch(mapping: WhatsAppTemplate, template: Template) -> str | None:
    """Why `template` cannot be the wording of the approved template `mapping`, or None: its
    placeholders must be exactly the template's parameters, one per `{{n}}`."""
    used = template.placeholders()
    if template.title:
        return "a WhatsApp template has a body only"
    if used != set(mapping.parameters):
        return (
            f"uses {len(used)} placeholders {sorted(used)} but the WhatsApp template "
            f"{mapping.name!r} takes {len(mapping.parameters)} parameters "
            f"{list(mapping.parameters)}"
        )
    return None


def check_whatsapp_wording(mapping: WhatsAppTemplate, template: Template, where: str) -> None:
    problem = whatsapp_wording_mismatch(mapping, template)
    if problem is not None:
        raise RegistryError(f"{where}: {problem}")


# The sample school registry, loaded by name like any application's: it registers through this
# module's public classes, and this module never imports it (no circle).
SAMPLE_KINDS = "herald.kinds.sample:SAMPLE_REGISTRY"


def load_registry(spec: str | None) -> Registry:
    """Load `package.module:attribute`, or the sample school registry when spec is None."""
    module_name, _, attribute = (spec or SAMPLE_KINDS).partition(":")
    if not module_name or not attribute:
        raise RegistryError(f"HERALD_KINDS must look like package.module:registry, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RegistryError(f"HERALD_KINDS: cannot import {module_name!r}: {exc}") from exc
    loaded = getattr(module, attribute, None)
    if loaded is None:
        raise RegistryError(f"HERALD_KINDS: {module_name!r} has no attribute {attribute!r}")
    if not isinstance(loaded, Registry):
        raise RegistryError(f"{spec} is not a herald.kinds.Registry")
    return loaded


@lru_cache(maxsize=1)
def get_registry() -> Registry:
    from herald.config import get_settings

    return load_registry(get_settings().kinds)
