"""Checking wording: what an override's save, publish and preview refuse, the sample values a
preview renders with, and whether a kind renders today (asked before a broadcast is approved).
Nothing here writes, and nothing here checks a permission: the callers do.

Checks (each a 400 with its own code): the kind exists and is sent on the channel; the wording
uses only the kind's declared variables as flat `{{name}}` placeholders; a channel that shows a
title has one, and one that does not has none; a Telegram body passes the Telegram markup rules
(R-RENDER-29..34); and an override of a kind that carries a secret keeps every secret
placeholder the registry's wording uses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from sqlalchemy.ext.asyncio import AsyncConnection

from herald.admin.templates import queries
from herald.errors import (
    ChannelUnknown,
    TemplateBodyBlank,
    TemplateNotFound,
    TemplatePlaceholderMalformed,
    TemplatePlaceholderRequired,
    TemplatePlaceholderUnknown,
    TemplateTitleNotAllowed,
    TemplateTitleRequired,
    TemplateWhatsAppParameters,
)
from herald.kinds import Kind, Registry, Template, registry
from herald.kinds.registry import RECIPIENT_VARIABLES
from herald.rendering.interpolate import malformed_placeholders, placeholders
from herald.rendering.render import Override, render
from herald.rendering.telegram import validate_telegram_template

# Channels that show a title (email subject, push and in-app heading, the Slack header and the
# Teams card's heading); SMS and Telegram do not. One list, the registry's.
TITLED_CHANNELS = registry.TITLED_CHANNELS

# Preview data (R-RENDER-41): the kind's declared samples, a masked stand-in for every secret,
# and an invented recipient name. Nothing is read from a real event or person.
SECRET_SAMPLE = "••••••"
RECIPIENT_SAMPLES: Mapping[str, str] = {"name": "Sita Sharma"}


# Every `{{…}}` span, as interpolate sees it; braces left over outside one are a typo.
_BRACED = re.compile(r"\{\{.*?\}\}", re.DOTALL)


def sample_values(kind: Kind) -> dict[str, str]:
    """Non-sensitive preview values: declared samples, secrets masked, an invented name."""
    values = dict(kind.variables)
    values.update({name: SECRET_SAMPLE for name in kind.secret_variables})
    values.update({n: RECIPIENT_SAMPLES.get(n, n) for n in RECIPIENT_VARIABLES})
    return values


def validate_wording(
    kind: Kind, channel: str, locale: str, title: str | None, body: str
) -> tuple[str | None, str]:
    """Refuse wording that could not render for this kind and channel; return (title, body) as
    they are stored (an empty title on a channel without titles is stored as none)."""
    if channel in TITLED_CHANNELS:
        if title is None or not title.strip():
            raise TemplateTitleRequired(f"a {channel} template needs a title")
    elif title is not None and title.strip():
        raise TemplateTitleNotAllowed(f"a {channel} template has a body only")
    else:
        title = None
    # Stricter than the table's CHECK (R-SCHEMA-42, spaces only): a body of nothing but
    # whitespace shows nothing on any channel.
    if not body.strip():
        raise TemplateBodyBlank()
    texts = [text for text in (title, body) if text is not None]
    malformed = [span for text in texts for span in _malformed(text)]
    if malformed:
        raise TemplatePlaceholderMalformed(
            "placeholders must be flat names in double braces, like {{title}}; found "
            + ", ".join(malformed)
        )
    used = set().union(*(placeholders(text) for text in texts))
    unknown = used - kind.allowed_placeholders
    if unknown:
        raise TemplatePlaceholderUnknown(
            f"{kind.name} does not declare {', '.join(sorted(unknown))}; "
            f"it declares {', '.join(sorted(kind.allowed_placeholders))}"
        )
    missing = _required_secrets(kind, channel, locale) - used
    if missing:
        raise TemplatePlaceholderRequired(
            f"a {kind.name} {channel} message must carry {', '.join(sorted(missing))}"
        )
    if channel == "telegram":
        validate_telegram_template(body)
    if channel == "whatsapp" and kind.whatsapp is not None:
        # What is sent is the approved template with the kind's parameters in order; the wording
        # is its text, so it cannot take a parameter more or one fewer than Meta approved.
        problem = registry.whatsapp_wording_mismatch(kind.whatsapp, Template(body=body))
        if problem is not None:
            raise TemplateWhatsAppParameters(f"{kind.name}: {problem}")
    return title, body


def _malformed(text: str) -> list[str]:
    """`{{…}}` spans that are not flat names (R-RENDER-8), and stray `{{` / `}}` left outside
    any span, which would reach recipients literally."""
    found = malformed_placeholders(text)
    rest = _BRACED.sub("", text)
    if "{{" in rest or "}}" in rest:
        found.append("an unmatched {{ or }}")
    return found


def _required_secrets(kind: Kind, channel: str, locale: str) -> set[str]:
    """The secret placeholders the registry's wording for this channel carries: the message
    exists to deliver them (a reset token, a sign-in code), so an override must keep them."""
    if not kind.secret_variables:
        return set()
    builder = kind.builder(channel, locale)
    if not isinstance(builder, Template):
        return set()  # built in code: nothing to compare with
    return builder.placeholders() & set(kind.secret_variables)


def kind_for(registry: Registry, name: str, channel: str) -> Kind:
    kind = registry.get(name)
    if kind is None:
        raise TemplateNotFound(f"the registry has no kind {name!r}")
    if channel not in kind.channels:
        raise ChannelUnknown(f"{name} is sent on {', '.join(kind.channels)}, not {channel}")
    return kind


async def rendering_problem(
    conn: AsyncConnection, tenant_id: str, registry: Registry, kind_name: str, channels: list[str]
) -> str | None:
    """Why the kind would not render today on `channels` with its sample variables — the
    registry's wording, or the tenant's published override where there is one (an override
    that fails would silently fall back) — or None when every channel and locale renders.
    Used before a broadcast is approved (R-BCAST-6)."""
    kind = registry.get(kind_name)
    if kind is None:
        return f"the registry has no kind {kind_name!r}"
    rows = await queries.published_overrides(conn, tenant_id, kind.name)
    overrides = {
        (kind.name, r["channel"], r["locale"]): Override(r["title"], r["body"], r["version"])
        for r in rows
    }
    samples = sample_values(kind)
    locales = sorted(kind.locales | {locale for (_, _, locale) in overrides})
    for channel in channels:
        if channel not in kind.channels:
            return f"{kind.name} has no {channel} wording"
        for locale in locales:
            rendered = render(kind, channel, locale, samples, overrides)
            if rendered is None:
                return f"{kind.name} does not render on {channel} in {locale}"
            override = overrides.get((kind.name, channel, locale))
            if override is not None and rendered.template_version != override.version:
                return (
                    f"the published {channel} override of {kind.name} in {locale} "
                    f"(version {override.version}) does not render"
                )
    return None
