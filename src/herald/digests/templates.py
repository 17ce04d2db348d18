"""Herald's own wording for digests, in English and Nepali: the count in the subject, the
items one a line in the body (each item's line is rendered from its own kind's template)."""

from __future__ import annotations

from collections.abc import Mapping

from herald.kinds.registry import Builder, Template

_EMAIL = {
    "en": Template(
        title="{{count}} new notifications",
        body="Dear {{name}},\n\nHere is what arrived for you:\n\n{{items}}",
    ),
    "ne": Template(
        title="{{count}} नयाँ सूचनाहरू",
        body="प्रिय {{name}},\n\nतपाईंका लागि आएका सूचनाहरू:\n\n{{items}}",
    ),
}
_SHORT = {
    "en": Template(title="{{count}} new notifications", body="{{items}}"),
    "ne": Template(title="{{count}} नयाँ सूचनाहरू", body="{{items}}"),
}
_TELEGRAM = {
    "en": Template(body="{{count}} new notifications:\n{{items}}"),
    "ne": Template(body="{{count}} नयाँ सूचनाहरू:\n{{items}}"),
}


def digest_templates(channel: str) -> Mapping[str, Builder]:
    if channel == "email":
        return dict(_EMAIL)
    if channel == "telegram":
        return dict(_TELEGRAM)
    if channel == "sms":
        return {locale: Template(body=t.body) for locale, t in _TELEGRAM.items()}
    return dict(_SHORT)
