"""HTTP models of the dev-only routes `herald dev` adds for its demo page (never `herald api`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

_Name = Annotated[str, Field(min_length=1, max_length=255)]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class DemoIdentity(_Model):
    """One entry of the person picker: a demo person acting through one of their roles."""

    external_id: str
    name: str
    role: str
    role_name: str
    # Who they are in the school: "parent of Aarav (Class 7A)", "teaches Class 8A", …
    description: str
    # The channels the directory can reach them on, besides the inbox.
    reachable: list[str]


class DemoPeople(_Model):
    tenant: str
    people: list[DemoIdentity]
    # The identity the page opens when none is chosen yet: the guardian the banner's token is for.
    default_external_id: str
    default_role: str


class DemoGroup(_Model):
    id: str
    name: str


class DemoConfig(_Model):
    """What the demo page needs besides a token. The API key is all-scope: dev only."""

    tenant: str
    api_key: str
    groups: list[DemoGroup]
    # The channels of the page's test announcement (announcement.posted's).
    channels: list[str]
    # category → channel → the code default, so the page can tell an override from a default.
    preference_defaults: dict[str, dict[str, bool]]


class TokenRequest(_Model):
    external_id: _Name
    role: _Name


class DemoToken(_Model):
    token: str
    external_id: str
    role: str
    name: str


class OutboxMessage(_Model):
    channel: str
    # Email only: the From header.
    sender: str | None
    to: str
    title: str | None
    # For email, the text part and the whole HTML document as the email providers build them.
    body: str
    body_html: str | None
    action_url: str | None
    platform: str | None
    kind: str | None
    priority: str


class OutboxChannel(_Model):
    channel: str
    provider: str
    # False when a real provider is configured for the channel: nothing is recorded here.
    recording: bool
    # Newest first. The mock keeps the last MAX_RECORDED per channel.
    messages: list[OutboxMessage]


class Outbox(_Model):
    channels: list[OutboxChannel]
