"""Render one kind on one channel for one recipient: override first, registry as the fallback.

Operator overrides are loaded once per fan-out batch by the caller and passed in (R-RENDER-3,
R-RENDER-17). A failing override falls through to the registry wording and is logged once per
kind:channel:locale per process (R-RENDER-5, R-RENDER-14, R-RENDER-16). A registry builder that
throws is logged with its stack and the channel is skipped (R-RENDER-13).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping

from herald.kinds.registry import Kind, Template
from herald.rendering.escaping import escape_header, escape_html
from herald.rendering.interpolate import interpolate
from herald.rendering.telegram import validate_telegram_template
from herald.values import value

log = logging.getLogger(__name__)

# Per-process, bounded by the number of (kind, channel, locale) keys (R-RENDER-16).
_warned: set[str] = set()


@value
class Override:
    """An operator's published override of one (kind, channel, locale)."""

    title: str | None
    body: str
    version: int


@value
class Rendered:
    """What a channel sends. `body_html` is set for email only, every value HTML-escaped."""

    title: str | None
    body: str
    body_html: str | None = None
    template_version: int | None = None

    @property
    def content_hash(self) -> str:
        material = "\x00".join((self.title or "", self.body))
        return hashlib.sha256(material.encode()).hexdigest()


OverrideKey = tuple[str, str, str]


def render(
    kind: Kind,
    channel: str,
    locale: str,
    values: Mapping[str, str],
    overrides: Mapping[OverrideKey, Override] | None = None,
) -> Rendered | None:
    """Render, or return None when nothing sendable can be produced (the caller skips the channel)."""
    values = {k: v for k, v in values.items() if k != "secretRef"}  # R-SECRET-15
    locale = _effective_locale(kind, channel, locale, overrides)
    override = overrides.get((kind.name, channel, locale)) if overrides else None
    if override is not None:
        rendered = _render_override(kind, channel, locale, override, values)
        if rendered is not None:
            return rendered

    builder = kind.builder(channel, locale)
    if builder is None:
        return None
    try:
        template = builder if isinstance(builder, Template) else builder(values)
        if channel == "telegram":
            validate_telegram_template(template.body)
    except Exception:
        # R-RENDER-13: a code defect; skip this channel, keep the batch, log the stack once.
        if _first_time(_key(kind.name, channel, locale)):
            log.exception(
                "registry builder for %s raised; channel skipped", _key(kind.name, channel, locale)
            )
        return None
    rendered = _render_template(channel, template, values)
    if rendered is None:
        warn_once(kind.name, channel, locale, "placeholder unresolved; send suppressed")
    return rendered


def warn_once(kind: str, channel: str, locale: str, what: str) -> None:
    """Log a render failure at most once per kind:channel:locale per process (R-RENDER-14)."""
    key = _key(kind, channel, locale)
    if _first_time(key):
        log.warning("template %s: %s", key, what)


def _key(kind: str, channel: str, locale: str) -> str:
    return f"{kind}:{channel}:{locale}"


def _first_time(key: str) -> bool:
    if key in _warned:
        return False
    _warned.add(key)
    return True


def _effective_locale(
    kind: Kind, channel: str, locale: str, overrides: Mapping[OverrideKey, Override] | None
) -> str:
    """The locale whose wording this recipient gets: theirs (or its language, `ne` for `ne-NP`)
    when the registry or an override has it, else the kind's default.

    An override for the default locale therefore never replaces registry wording in the
    recipient's own language, and the warn-once keys stay bounded by the templates that exist
    rather than by whatever locale strings recipients carry (R-RENDER-16).
    """
    by_locale = kind.templates.get(channel, {})
    language = locale.replace("_", "-").split("-", 1)[0].lower()
    for candidate in (locale, language):
        if candidate in by_locale or (overrides and (kind.name, channel, candidate) in overrides):
            return candidate
    return kind.default_locale


def _render_override(
    kind: Kind, channel: str, locale: str, override: Override, values: Mapping[str, str]
) -> Rendered | None:
    """The override's rendering, or None (logged once) so the registry wording is used instead.

    R-RENDER-5 / R-RENDER-27: an operator's bad edit stays cosmetic; it never silences a send.
    """
    key = f"{_key(kind.name, channel, locale)} override"
    try:
        if channel == "telegram":
            validate_telegram_template(override.body)
        rendered = _render_template(
            channel, Template(body=override.body, title=override.title), values
        )
    except Exception:
        if _first_time(key):
            log.warning(
                "template override %s v%s failed to render; using the registry wording",
                key,
                override.version,
                exc_info=True,
            )
        return None
    if rendered is None:
        if _first_time(key):
            log.warning(
                "template override %s v%s left a placeholder unresolved; using the registry wording",
                key,
                override.version,
            )
        return None
    return Rendered(rendered.title, rendered.body, rendered.body_html, override.version)


def _render_template(
    channel: str, template: Template, values: Mapping[str, str]
) -> Rendered | None:
    title = None
    if template.title is not None:
        if channel == "email":
            # R-RENDER-12 / R-RENDER-19: values are collapsed, and so is the result, so neither a
            # value nor an override's wording can split the Subject header.
            title = interpolate(template.title, values, escape_header)
            title = escape_header(title) if title is not None else None
        else:
            title = interpolate(template.title, values)
        if title is None:
            return None
    body = interpolate(template.body, values)
    if body is None:
        return None
    body_html = None
    if channel == "email":
        # R-RENDER-11: every value in the HTML body is escaped; the wording itself is the author's.
        body_html = interpolate(template.body, values, escape_html)
    elif channel == "telegram":
        # Sent with parse_mode=HTML: the template's allowlisted tags stay, values are escaped
        # (R-RENDER-35).
        body = interpolate(template.body, values, escape_html) or ""
    return Rendered(title=title, body=body, body_html=body_html)
