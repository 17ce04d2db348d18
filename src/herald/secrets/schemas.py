"""HTTP models of POST /v1/secrets."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


# The service's own rules (herald.secrets.service), published so a client sees them.
SecretType = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
ValueName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")]
SecretValue = Annotated[str, StringConstraints(max_length=4096)]


class SecretCreate(_Model):
    type: SecretType
    values: dict[ValueName, SecretValue] = Field(
        min_length=1, max_length=10, json_schema_extra={"additionalProperties": False}
    )
    ttl_seconds: int | None = Field(default=None, ge=30, le=86_400)


class SecretCreated(_Model):
    secret_ref: str
