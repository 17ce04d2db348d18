"""A fan-out batch's in-app wording, rendered once per template locale (R-FANOUT-12, R-RENDER-3).

The recipient's name is the only per-person value of in-app wording. The wording is rendered once
per locale that can be chosen, with a per-batch sentinel in place of the name, and the batch
statement (fanout.pagewrite) puts each recipient's name in with replace(): in-app interpolation
inserts values verbatim and never rescans them, so this is the text rendering person by person
would produce, and the content hash is the same sha256 of "title NUL body".

A builder *function* is rendered the same way: it is called once per locale per batch with the
sentinel as `name`, so it must not branch on `name` (herald.kinds.registry.Kind). A builder that
raises renders nothing for its locale, whose recipients get skipped_no_template (R-RENDER-13).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from herald.kinds import Kind
from herald.rendering.render import Override, OverrideKey, render

# The locale key of the wording a recipient whose locale (and language) has no template gets:
# "" is no template's locale, nor any language's, so it renders as the kind's default would.
FALLBACK = ""


@dataclass(frozen=True)
class InAppWording:
    """The in-app wording per template locale, with `sentinel` where the name goes. A locale
    whose wording does not render maps to None (its recipients get skipped_no_template)."""

    sentinel: str
    by_locale: Mapping[str, tuple[str | None, str, int | None] | None]


def in_app_wording(
    kind: Kind,
    variables: Mapping[str, str],
    overrides: Mapping[OverrideKey, Override],
) -> InAppWording:
    """Render the kind's in-app wording once per locale that can be chosen (R-RENDER-3): each
    registry locale, each overridden locale, and the fallback. Template or builder alike, the
    name is the sentinel."""
    sentinel = f"\x02herald-name-{uuid.uuid4().hex}\x03"
    values = {**variables, "name": sentinel}
    keys = set(kind.templates.get("in_app", {}))
    keys |= {locale for (name, channel, locale) in overrides if channel == "in_app"}
    by_locale: dict[str, tuple[str | None, str, int | None] | None] = {}
    for locale in [*sorted(keys), FALLBACK]:
        rendered = render(kind, "in_app", locale, values, overrides)
        by_locale[locale] = (
            None if rendered is None else (rendered.title, rendered.body, rendered.template_version)
        )
    return InAppWording(sentinel=sentinel, by_locale=by_locale)
