"""HTTP models of /v1/admin/providers. A secret field is answered only as whether it is set."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from herald.vocabulary import AccountProvider

MASK = "••••"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ProviderAccountIn(_Model):
    # The provider's fields, by their API names (herald.channels.accounts, listed in
    # docs/provider-accounts.md). Each field named overrides the deployment's setting; a plain
    # field left out is no longer overridden; a secret field left out keeps the stored secret,
    # and null clears it.
    settings: dict[str, Any] = Field(max_length=20)
    # The version read, for a compare-and-set; leave out to write whatever is stored.
    version: int | None = Field(default=None, ge=1, le=2**31 - 1)


class SecretState(_Model):
    set: bool
    # Shown instead of the value, never a part of it.
    masked: str | None = None


class ProviderAccount(_Model):
    provider: AccountProvider
    channel: str
    # The plain fields the tenant overrides, by their API names.
    settings: dict[str, Any]
    # Every secret field of the provider: whether the tenant has set it.
    secrets: dict[str, SecretState]
    version: int
    updated_at: datetime
    updated_by: str


class ProviderAccountList(_Model):
    items: list[ProviderAccount]
