"""HTTP models of POST /v1/secrets."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class SecretCreate(_Model):
    type: str = Field(min_length=1, max_length=64)
    values: dict[str, str] = Field(min_length=1, max_length=10)
    ttl_seconds: int | None = Field(default=None, ge=30, le=86_400)


class SecretCreated(_Model):
    secret_ref: str
