"""HTTP models of /v1/admin/webhooks. The signing secret appears only in the answers to create
and rotate; nothing else ever shows it."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from herald.vocabulary import WebhookEventType

MAX_DESCRIPTION = 500
# The shape only; herald.channels.destination judges scheme, credentials and addresses.
URL_PATTERN = r"^https?://[^\s]+$"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class WebhookEndpointIn(_Model):
    url: str = Field(min_length=1, max_length=2000, pattern=URL_PATTERN)
    event_types: list[WebhookEventType] = Field(min_length=1, max_length=20)
    description: str | None = Field(default=None, max_length=MAX_DESCRIPTION)
    enabled: bool = True


class WebhookEndpointPatch(_Model):
    url: str | None = Field(default=None, min_length=1, max_length=2000, pattern=URL_PATTERN)
    event_types: list[WebhookEventType] | None = Field(default=None, min_length=1, max_length=20)
    description: str | None = Field(default=None, max_length=MAX_DESCRIPTION)
    enabled: bool | None = None


class WebhookEndpoint(_Model):
    id: UUID
    url: str
    event_types: list[str]
    description: str | None
    enabled: bool
    created_at: datetime
    updated_at: datetime


class WebhookEndpointCreated(WebhookEndpoint):
    # Shown once: Herald keeps it encrypted and never answers it again (rotate for a new one).
    secret: str


class WebhookEndpointList(_Model):
    items: list[WebhookEndpoint]


class WebhookSecret(_Model):
    # The new signing secret, shown once; the old one stops signing at once.
    secret: str


class WebhookTestQueued(_Model):
    # The `webhook-id` the test message will carry.
    message_id: UUID
