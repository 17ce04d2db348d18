"""HTTP models of the template-override admin (`/v1/admin/templates`).

Shape checks live here (a malformed body is 422 REQUEST_MALFORMED, unknown fields included,
R-SEC-13); checks that need the registry (kind, channel, placeholders, Telegram markup, a title
where the channel shows one) are the service's, each a 400 with its own code.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel

from herald import vocabulary

MAX_TITLE = 1_000
MAX_BODY = 20_000

KindName = Annotated[str, StringConstraints(min_length=1, max_length=200)]
# The same locale tags the directory accepts for a person (`en`, `ne`, `ne-NP`).
Locale = Annotated[
    str, StringConstraints(max_length=35, pattern=r"^[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8})*$")
]
# A title is one line; a body may hold newlines and tabs but never NUL (text cannot store it).
Title = Annotated[str, StringConstraints(max_length=MAX_TITLE, pattern=r"^[^\x00-\x1f\x7f]*$")]
Body = Annotated[str, StringConstraints(max_length=MAX_BODY, pattern=r"^[^\x00]*$")]
# The version the client read; the application compares and increments it (R-ADMIN-5).
Version = Annotated[int, Field(ge=1, le=2**31 - 1)]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


# ---------------------------------------------------------------------------------------------
# Inputs


class TemplateCreate(_Model):
    """A new override of one (kind, channel, locale); always created as a draft (R-RENDER-43)."""

    kind: KindName
    channel: vocabulary.Channel
    locale: Locale
    title: Title | None = None
    body: Body


class TemplateUpdate(_Model):
    """Replaces the wording. `version` is the one the client read; a stale one is a 409."""

    version: Version
    title: Title | None = None
    body: Body


class TemplateTransition(_Model):
    """Publish or archive, with the version the client read."""

    version: Version


class PreviewRequest(_Model):
    """Wording to preview: `body` (and `title`) as typed, or, without a body, what a recipient
    in that locale gets today (the published override, else the registry's wording)."""

    kind: KindName
    channel: vocabulary.Channel
    locale: Locale
    title: Title | None = None
    body: Body | None = None


# ---------------------------------------------------------------------------------------------
# Outputs


class TemplateOut(_Model):
    id: UUID
    kind: str
    channel: str
    locale: str
    status: vocabulary.TemplateStatus
    title: str | None
    body: str
    version: int
    created_by: str | None
    updated_by: str | None
    created_at: datetime
    updated_at: datetime


class TemplatePage(_Model):
    items: list[TemplateOut]
    # None on the last page.
    next_cursor: str | None


class TemplateVersionOut(_Model):
    """One immutable version row (R-RENDER-40): the override as it stood after a change."""

    version: int
    status: vocabulary.TemplateStatus
    title: str | None
    body: str
    created_by: str | None
    created_at: datetime


class TemplateVersionPage(_Model):
    items: list[TemplateVersionOut]
    next_cursor: str | None


class OverrideRef(_Model):
    id: UUID
    status: vocabulary.TemplateStatus
    version: int


class RegistryWording(_Model):
    title: str | None
    body: str


class LocaleEntry(_Model):
    locale: str
    # The shipped wording; None when the registry builds this locale in code, or has none for it.
    registry: RegistryWording | None
    override: OverrideRef | None


class WhatsAppTemplateEntry(_Model):
    """The approved WhatsApp template the kind is sent as: an override's wording must use exactly
    its parameters (NOTIFICATION_TEMPLATE_WHATSAPP_PARAMETERS otherwise)."""

    name: str
    language: str
    # A recipient locale → the approved translation's language code; other locales: `language`.
    languages: dict[str, str]
    # The kind's variables filling the template's {{1}}, {{2}}, … in that order.
    parameters: list[str]


class ChannelEntry(_Model):
    channel: str
    title_required: bool
    locales: list[LocaleEntry]
    # `whatsapp` only: the approved template it is sent as.
    whatsapp_template: WhatsAppTemplateEntry | None = None


class VariableEntry(_Model):
    name: str
    # `event`: from the event's variables; `secret`: resolved from a secretRef at send time
    # (its sample is masked); `recipient`: filled per recipient (`name`).
    source: Literal["event", "secret", "recipient"]
    sample: str


class KindEntry(_Model):
    kind: str
    category: str
    default_locale: str
    variables: list[VariableEntry]
    channels: list[ChannelEntry]


class KindPage(_Model):
    items: list[KindEntry]
    next_cursor: str | None


class PreviewOut(_Model):
    kind: str
    channel: str
    # The locale whose wording was used (a recipient locale without wording gets the default).
    locale: str
    # `draft`: the wording in the request; `override`: the published override; `registry`: code.
    source: Literal["draft", "override", "registry"]
    title: str | None
    body: str
    body_html: str | None
    template_version: int | None
    # The sample values the preview was rendered with; secret ones are masked (R-RENDER-41).
    variables: dict[str, str]
