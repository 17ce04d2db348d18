"""HTTP models of the consumer preference API (DESIGN.md §5.1).

Channel and category names arrive as plain strings and are checked against the vocabulary by the
service, so an unknown name is a 400 with its own code; a body of the wrong shape is a 422. No
model carries a user id: every read and write is keyed on the verified token's person
(R-PREFAPI-11), and `extra="forbid"` refuses a body that tries to name one.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, WithJsonSchema
from pydantic.alias_generators import to_camel

from herald.vocabulary import CATEGORIES, CHANNELS

# The set version is an integer column and a save writes version + 1.
MAX_VERSION = 2**31 - 2
# Nine categories × five channels is 45 cells; the bound leaves room for duplicates (which are
# folded, last write wins) while keeping a body from growing without limit.
MAX_OVERRIDES = 500
MAX_CHANNELS = 20
_Name = Annotated[str, Field(min_length=1, max_length=64)]
# Names are checked by the service (an unknown one is 400 NOTIFICATION_PREFERENCE_INVALID) and
# published as the enums they must be.
_Channel = Annotated[_Name, WithJsonSchema({"type": "string", "enum": list(CHANNELS)})]
_Category = Annotated[_Name, WithJsonSchema({"type": "string", "enum": list(CATEGORIES)})]


# HH:MM, published as the pattern it must match; checked by the service, so a malformed time is
# 422 NOTIFICATION_QUIET_HOURS_INVALID like the other quiet-hours refusals.
_LocalTime = Annotated[
    str,
    Field(min_length=1, max_length=16),
    WithJsonSchema({"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"}),
]


def _whole_number(value: object) -> object:
    # JSON Schema counts 3.0 as an integer; strict mode alone would refuse it.
    if type(value) is float and value.is_integer():
        return int(value)
    return value


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class CategoryPreferences(_Model):
    category: str
    # Every registered kind of the category is unsuppressible: no switch of it has any effect.
    locked: bool
    # channel → the effective value for a suppressible kind of this category (all true if locked).
    channels: dict[str, bool]


class PreferenceOverride(_Model):
    category: _Category
    channel: _Channel
    enabled: StrictBool


class QuietHours(_Model):
    """Hours in which nothing but the inbox reaches the person: email, SMS, push, Telegram,
    Slack and Teams due inside wait until `end` (unsuppressible security kinds such as a one-time
    code do not). Local wall-clock times HH:MM; an `end` before `start` wraps past midnight
    (21:00-07:00). `timezone` is an IANA zone; left out, the person's own zone from the
    directory (else the deployment's default)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"start": "21:00", "end": "07:00"}]})

    start: _LocalTime
    end: _LocalTime
    timezone: Annotated[str, Field(min_length=1, max_length=64)] | None = None


class PreferencesView(_Model):
    # 0 while the person has never saved.
    version: int
    # channel → false where the person muted it globally, true otherwise ("not muted").
    channels: dict[str, bool]
    categories: list[CategoryPreferences]
    # The cells the person set explicitly (stored overrides of unlocked categories), in the shape
    # PUT takes: every other cell is a default or follows a global switch. Echoing them back in a
    # PUT keeps them.
    overrides: list[PreferenceOverride]
    # The person's quiet hours; null when they set none.
    quiet_hours: QuietHours | None = None


class PreferencesUpdate(_Model):
    """The whole set, replacing what is stored. A channel or cell left out means its default."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "version": 3,
                    "channels": {"sms": False},
                    "overrides": [
                        {"category": "announcement", "channel": "email", "enabled": False}
                    ],
                }
            ]
        }
    )

    # The version the client read: 0 when it read none.
    version: Annotated[
        int, Field(strict=True, ge=0, le=MAX_VERSION), BeforeValidator(_whole_number)
    ]
    # Global switches: false mutes the channel; true (or absent) means "not muted".
    channels: dict[_Channel, StrictBool] = Field(default_factory=dict, max_length=MAX_CHANNELS)
    overrides: list[PreferenceOverride] = Field(default_factory=list, max_length=MAX_OVERRIDES)
    # Quiet hours: null clears them; left out keeps what is stored (the one part of the set a
    # body may leave out without resetting it, so a client that predates it never clears it).
    quiet_hours: QuietHours | None = None


class PreferencesSaved(_Model):
    version: int
