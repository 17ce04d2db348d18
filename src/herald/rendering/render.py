"""Render one kind on one channel for one recipient: override first, registry as the fallback.

Operator overrides are loaded once per fan-out batch by the caller and passed in (R-RENDER-3,
R-RENDER-17). A failing override falls through to the registry wording and is logged once per
kind:channel:locale per process (R-RENDER-5, R-RENDER-14, R-RENDER-16). A registry builder that
throws is logged with its stack and the channel is skipped (R-RENDER-13).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from herald.kinds.registry import Kind, Template
from herald.rendering.escaping import escape_header, escape_html
from herald.rendering.interpolate import interpolate

log = logging.getLogger(__name__)

# Per-process, bounded by the number of (kind, channel, locale) keys (R-RENDER-16).
_warned: set[str] = set()


@dataclass(frozen=True)
class Override:
    """An operator's published override of one (kind, channel, locale)."""

    title: str | None
    body: str
    version: int


@dataclass(frozen=True)
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
    override = _find_override(kind, channel, locale, overrides)
    if override is not None:
        rendered = _render_template(
            channel, Template(body=override.body, title=override.title), values
        )
        if rendered is not None:
            return Rendered(rendered.title, rendered.body, rendered.body_html, override.version)
        warn_once(
            kind.name, channel, locale, "override left a placeholder unresolved; using registry"
        )

    builder = kind.builder(channel, locale)
    if builder is None:
        return None
    if isinstance(builder, Template):
        template = builder
    else:
        try:
            template = builder(values)
        except Exception:
            key = f"{kind.name}:{channel}:{locale}"
            if key not in _warned:
                _warned.add(key)
                log.exception("registry builder for %s raised; channel skipped", key)
            return None
    rendered = _render_template(channel, template, values)
    if rendered is None:
        warn_once(kind.name, channel, locale, "placeholder unresolved; send suppressed")
    return rendered


def warn_once(kind: str, channel: str, locale: str, what: str) -> None:
    key = f"{kind}:{channel}:{locale}"
    if key in _warned:
        return
    _warned.add(key)
    log.warning("template %s: %s", key, what)


def _find_override(
    kind: Kind, channel: str, locale: str, overrides: Mapping[OverrideKey, Override] | None
) -> Override | None:
    if not overrides:
        return None
    return overrides.get((kind.name, channel, locale)) or overrides.get(
        (kind.name, channel, kind.default_locale)
    )


def _render_template(
    channel: str, template: Template, values: Mapping[str, str]
) -> Rendered | None:
    title_escape: Callable[[str], str] | None = escape_header if channel == "email" else None
    title = None
    if template.title is not None:
        title = interpolate(template.title, values, title_escape)
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
        # Telegram is sent with parse_mode=HTML: the template's allowlisted tags stay, values are escaped.
        body = interpolate(template.body, values, escape_html) or body
    return Rendered(title=title, body=body, body_html=body_html)
