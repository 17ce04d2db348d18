"""HTTP models of the directory surface (DESIGN.md §5.1), also the inputs of directory.service.

A PUT replaces the whole record: a field left out takes its default (null; locale `en`; status
`active`; no roles). So the same body always produces the same row, whatever was there before.

Shape checks live here (a malformed body is 422 REQUEST_MALFORMED); checks that need the
database (an unknown role code, a missing group) are the service's (400/404 with a code).
Phone numbers are stored as given: the SMS channel normalises them at send time and records an
unusable one as `skipped_no_destination` (R-CHAN-20), so one odd number never blocks a sync.
"""

from __future__ import annotations

import functools
import uuid
import zoneinfo
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    WithJsonSchema,
)
from pydantic.alias_generators import to_camel

from herald import vocabulary

# Most people a batch may carry (checked by the service, answered 400 DIRECTORY_BATCH_TOO_LARGE).
MAX_BATCH = 1_000
MAX_ROLES_PER_PERSON = 100
MAX_PERMISSIONS = 500

# Identifiers the host chooses: no control characters (NUL cannot be stored in text at all).
_IDENTIFIER = r"^[^\x00-\x1f\x7f]+$"
# Spelled without \s: JSON Schema (ECMA), Python and pydantic's regex engine each read \s as a
# different set, and the published pattern must mean exactly what the server checks.
_NO_BLANK_OR_CONTROL = r"[^\x00-\x20\x7f-\x9f]"

ExternalId = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=_IDENTIFIER)]
# Role codes travel in JWT `role` claims and audience specs: no whitespace.
ROLE_CODE_PATTERN = rf"^{_NO_BLANK_OR_CONTROL}+$"
RoleCode = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=ROLE_CODE_PATTERN)]


def _empty_to_none(value: Any) -> Any:
    """Read an empty (or blank) string as absent: hosts often send "" for "no email". Runs after
    the published constraints, which admit "", so the schema says what the server accepts."""
    if isinstance(value, str):
        value = value.strip()
        return value or None
    return value


@functools.cache
def _zones() -> tuple[str, ...]:
    return tuple(sorted(zoneinfo.available_timezones()))


def _upper(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


def _dedupe(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _timezone(value: str) -> str | None:
    if value == "":
        return None
    if value not in _zones():
        raise ValueError(f"{value!r} is not an IANA time zone name (e.g. Asia/Kathmandu)")
    return value


_PRINTABLE = r"^[^\x00-\x1f\x7f]*$"

# Optional text: the constraints apply to the value as sent; "" (or blank) then means absent.
Name = (
    Annotated[
        str, StringConstraints(max_length=200, pattern=_PRINTABLE), AfterValidator(_empty_to_none)
    ]
    | None
)
Email = (
    Annotated[
        str,
        StringConstraints(
            max_length=320,
            pattern=r"^(?:[^@\x00-\x20\x7f-\x9f]+@[^@\x00-\x20\x7f-\x9f]+)?$",
        ),
        AfterValidator(_empty_to_none),
    ]
    | None
)
Phone = (
    Annotated[
        str,
        StringConstraints(max_length=32, pattern=r"^[0-9+()\-. /]*$"),
        AfterValidator(_empty_to_none),
    ]
    | None
)
# An IANA zone name (the server's tz database, published as the enum), or "" for none.
Timezone = (
    Annotated[
        str,
        WithJsonSchema({"type": "string", "enum": ["", *_zones()]}),
        AfterValidator(_timezone),
    ]
    | None
)
Country = (
    Annotated[
        str,
        StringConstraints(pattern=r"^(?:[A-Za-z]{2})?$"),
        AfterValidator(_empty_to_none),
        AfterValidator(_upper),
    ]
    | None
)
# Telegram chat ids are integers (hosts send them as numbers or strings) or a @channel name.
_CHAT_ID_PATTERN = r"^(?:-?[0-9]{1,20}|@[A-Za-z0-9_]{4,64})?$"
# Telegram's ids fit in 52 bits; 2**53 keeps the bound exact where JSON numbers are doubles.
_CHAT_ID_LIMIT = 2**53 - 1


def _chat_id(value: Any) -> Any:
    # An integer in range becomes its text; anything else is left for the string check to refuse.
    if type(value) is float and value.is_integer():  # JSON Schema counts 5.0 as an integer
        value = int(value)
    if type(value) is int and -_CHAT_ID_LIMIT <= value <= _CHAT_ID_LIMIT:
        return str(value)
    return value


TelegramChatId = Annotated[
    Annotated[
        str,
        StringConstraints(max_length=64, pattern=_CHAT_ID_PATTERN),
        AfterValidator(_empty_to_none),
    ]
    | None,
    BeforeValidator(_chat_id),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "maxLength": 64, "pattern": _CHAT_ID_PATTERN},
                {"type": "integer", "minimum": -_CHAT_ID_LIMIT, "maximum": _CHAT_ID_LIMIT},
                {"type": "null"},
            ]
        }
    ),
]
# A Slack member (U…, W…), channel (C…, G…) or direct-message (D…) id: the letter, then 8 to 20
# upper-case letters and digits. A name (#general, @asha) is refused: chat.postMessage to a name
# is ambiguous and breaks when the channel is renamed.
_SLACK_ID_PATTERN = r"^(?:[UWCGD][A-Z0-9]{8,20})?$"
SlackId = (
    Annotated[
        str,
        StringConstraints(max_length=21, pattern=_SLACK_ID_PATTERN),
        AfterValidator(_empty_to_none),
    ]
    | None
)
# A Teams incoming or Workflows webhook URL. Its shape is checked here; where it points (https,
# a public address: the webhook SSRF guard) by the directory service when it is set.
TeamsWebhookUrl = (
    Annotated[
        str,
        StringConstraints(max_length=2000, pattern=r"^(?:https?://[^\s]+)?$"),
        AfterValidator(_empty_to_none),
    ]
    | None
)
Locale = Annotated[
    str, StringConstraints(max_length=35, pattern=r"^[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8})*$")
]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


# ---------------------------------------------------------------------------------------------
# Inputs


class PersonInput(_Model):
    """One person as the host sees them. `roles` replaces the person's whole role set."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "fullName": "Asha Rai",
                    "email": "asha@school.example.com",
                    "phone": "+9779800000001",
                    "locale": "ne",
                    "timezone": "Asia/Kathmandu",
                    "country": "NP",
                    "roles": ["teacher"],
                }
            ]
        }
    )

    full_name: Name = None
    email: Email = None
    phone: Phone = None
    locale: Locale = "en"
    timezone: Timezone = None
    country: Country = None
    status: vocabulary.PersonStatus = "active"
    telegram_chat_id: TelegramChatId = None
    # Staff chat destinations (issue 46); write-only: no answer ever shows them.
    slack_id: SlackId = None
    teams_webhook_url: TeamsWebhookUrl = None
    roles: Annotated[list[RoleCode], Field(max_length=MAX_ROLES_PER_PERSON)] = Field(
        default_factory=list
    )

    def role_codes(self) -> list[str]:
        """The role codes, each once, in the order given."""
        return _dedupe(self.roles)


class PersonBatchItem(PersonInput):
    """A person in `POST /v1/people:batch`: the same fields plus the external id."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"externalId": "asha-rai", "fullName": "Asha Rai", "roles": ["teacher"]}]
        }
    )

    external_id: ExternalId


class PeopleBatch(_Model):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "people": [
                        {
                            "externalId": "asha-rai",
                            "fullName": "Asha Rai",
                            "email": "asha@school.example.com",
                            "locale": "ne",
                            "timezone": "Asia/Kathmandu",
                            "roles": ["teacher"],
                        }
                    ]
                }
            ]
        }
    )
    # The 1,000 cap is the service's, so the answer is 400 DIRECTORY_BATCH_TOO_LARGE, not 422.
    people: list[PersonBatchItem]


class RoleInput(_Model):
    """A role: its scope kind decides how role-scoped notifications reach its holders."""

    name: Name = None
    scope_kind: vocabulary.ScopeKind
    permissions: Annotated[
        list[Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=_IDENTIFIER)]],
        Field(max_length=MAX_PERMISSIONS),
    ] = Field(default_factory=list)
    superadmin: StrictBool = False

    def permission_list(self) -> list[str]:
        return _dedupe(self.permissions)


class GroupInput(_Model):
    name: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
    kind: Annotated[
        str,
        StringConstraints(strip_whitespace=True, min_length=1, max_length=64, pattern=_IDENTIFIER),
    ] = "class"


class MembershipInput(_Model):
    member_role: vocabulary.MemberRole


# ---------------------------------------------------------------------------------------------
# Answers


class PersonUpserted(_Model):
    id: uuid.UUID
    external_id: str
    created: bool


class PersonErased(_Model):
    """The answer to an erasure: the person's public id (the orphaned snapshot the kept recipient
    rows carry) and what was kept and scrubbed."""

    id: uuid.UUID
    recipients_kept: int
    deliveries_scrubbed: int
    # Events addressed to this person alone whose variables were emptied.
    events_scrubbed: int


class PeopleBatchResult(_Model):
    created: int
    updated: int


class RoleUpserted(_Model):
    id: uuid.UUID
    code: str
    created: bool


class GroupUpserted(_Model):
    id: uuid.UUID
    external_id: str
    created: bool


class MembershipPut(_Model):
    group_external_id: str
    person_external_id: str
    member_role: str
    created: bool


class GuardianshipPut(_Model):
    student_external_id: str
    guardian_external_id: str
    created: bool
