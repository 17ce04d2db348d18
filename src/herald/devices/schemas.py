"""HTTP models of an end user's push devices (DESIGN.md §5.1)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from herald.vocabulary import Platform

TOKEN_MAX_LENGTH = 4096
# No control character anywhere, no whitespace at either end (spelled out rather than \s, which
# JSON Schema, Python and pydantic's regex engine each read differently).
_CONTROL = r"\x00-\x1f\x7f-\x9f"
_SPACE = r"\x20\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
TOKEN_PATTERN = rf"^[^{_CONTROL}{_SPACE}](?:[^{_CONTROL}]*[^{_CONTROL}{_SPACE}])?$"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


# base64url without padding (what PushSubscription.toJSON() gives), padding tolerated.
KEY_PATTERN = r"^[A-Za-z0-9_-]+={0,2}$"


class SubscriptionKeys(_Model):
    """A Web Push subscription's keys, as the browser's PushSubscription.toJSON() has them."""

    p256dh: Annotated[str, Field(min_length=1, max_length=200, pattern=KEY_PATTERN)]
    auth: Annotated[str, Field(min_length=1, max_length=100, pattern=KEY_PATTERN)]


class DeviceRegistration(_Model):
    """The body of POST /v1/me/devices. It has no user or device id: the owner is always the
    verified token's subject (R-DEVICE-6, R-DEVICE-11), and `extra="forbid"` refuses one.

    A phone sends its push token; a browser (platform `webpush`) sends its subscription as
    PushSubscription.toJSON() gives it, `endpoint` and `keys`, and no token."""

    # A NUL byte would be refused by PostgreSQL as a 500; surrounding blanks would make one
    # device look like two. Refused (422) rather than silently rewritten.
    token: (
        Annotated[str, Field(min_length=1, max_length=TOKEN_MAX_LENGTH, pattern=TOKEN_PATTERN)]
        | None
    ) = None
    platform: Platform
    endpoint: (
        Annotated[str, Field(min_length=1, max_length=TOKEN_MAX_LENGTH, pattern=TOKEN_PATTERN)]
        | None
    ) = None
    keys: SubscriptionKeys | None = None
    # PushSubscription.toJSON() carries it; Herald keeps no expiry of its own (a dead
    # subscription is found by the push service's 404/410).
    expiration_time: int | None = None

    @model_validator(mode="after")
    def _one_shape(self) -> DeviceRegistration:
        if self.platform == "webpush":
            if self.token is not None or self.endpoint is None or self.keys is None:
                raise ValueError("platform webpush takes endpoint and keys, not token")
        elif self.token is None or self.endpoint is not None or self.keys is not None:
            raise ValueError(f"platform {self.platform} takes token, not endpoint or keys")
        return self


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


class VapidPublicKey(_Model):
    # base64url, no padding: the uncompressed P-256 point.
    public_key: str
