"""HTTP models of an end user's push devices (DESIGN.md §5.1)."""

from __future__ import annotations

import unicodedata
from datetime import datetime
from typing import Annotated
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from herald.vocabulary import Platform

TOKEN_MAX_LENGTH = 4096


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class DeviceRegistration(_Model):
    """The body of POST /v1/me/devices. It has no user or device id: the owner is always the
    verified token's subject (R-DEVICE-6, R-DEVICE-11), and `extra="forbid"` refuses one."""

    token: Annotated[str, Field(min_length=1, max_length=TOKEN_MAX_LENGTH)]
    platform: Platform

    @field_validator("token")
    @classmethod
    def _printable(cls, value: str) -> str:
        # A NUL byte would be refused by PostgreSQL as a 500; surrounding blanks would make one
        # device look like two. Refuse both rather than silently rewrite the token.
        if value != value.strip():
            raise ValueError("the token must not start or end with whitespace")
        if any(unicodedata.category(ch) == "Cc" for ch in value):
            raise ValueError("the token must not contain control characters")
        return value


class Device(_Model):
    """A registered device as its owner sees it; the token itself is never echoed back."""

    id: UUID
    platform: str


class DeviceItem(_Model):
    id: UUID
    platform: str
    created_at: datetime
    last_used_at: datetime


class DeviceList(_Model):
    items: list[DeviceItem]
