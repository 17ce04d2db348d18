"""Audience specs: validated at send time, resolved one keyset page at a time during fan-out.

An audience is stored on the event as a *specification* (a kind plus the host's external ids),
never as a resolved list (R-SCHEMA-54). `send()` only validates it (`validate_audience`); the
fan-out worker resolves it page by page (`resolve_audience_page`, R-AUD-1), so somebody who joins
between pages is included and somebody deleted before their page is not (R-AUD-3, R-AUD-4).

Spec shapes (ids are the host's external ids, strings):
  {"kind": "users", "userIds": [...]}               ≤ 500 ids, not role-scoped
  {"kind": "role", "roles": [codes]}                holders, scoped to the role
  {"kind": "group", "groupIds": [...]}              student members, scoped to their student role
  {"kind": "guardians_of_group", "groupIds": [...]} guardians of the groups' student members
  {"kind": "guardians_of_users", "userIds": [...]}  ≤ 500 ids; guardians of those people
  {"kind": "all_users"}                             every live person, not role-scoped
  {"kind": "segment", "statuses"?, "locales"?, "countries"?, "seenWithinDays"?}
                                                    at least one filter; filters AND together,
                                                    values within a list OR together
  {"kind": "compound", "any": [1..10 non-compound specs]}

Normalisation: id and code lists are de-duplicated and sorted (they are sets, and a stable form
lets a `collapse` kind fold two sends that name the same people in a different order); countries
are upper-cased. `validate_audience(validate_audience(x)) == validate_audience(x)`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select
from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.audience import queries
from herald.errors import AudienceInvalid, AudienceTooLarge


@dataclass(frozen=True)
class AudienceMember:
    person_id: int
    public_id: uuid.UUID
    full_name: str | None
    locale: str
    status: str  # person.status (fan-out treats 'suspended' as gone)
    role_id: int | None  # the audience_role_id for role scoping (None = not role-scoped)
    # False for a person created after a broadcast's frozen audience (R-BCAST-8): the page
    # still carries them (its length and cursor), the fan-out writes nothing for them.
    admitted: bool = True


# kind → the one list key it carries (kinds absent here carry no list).
_LIST_KEYS: Mapping[str, str] = {
    "users": "userIds",
    "role": "roles",
    "group": "groupIds",
    "guardians_of_group": "groupIds",
    "guardians_of_users": "userIds",
}
_SEGMENT_FILTERS = ("statuses", "locales", "countries", "seenWithinDays")
MAX_SEEN_WITHIN_DAYS = 365


def validate_audience(spec: object) -> dict[str, Any]:
    """Pure. Normalise and validate an audience spec from send().

    Raises AudienceInvalid (400 NOTIFICATION_AUDIENCE_INVALID) for a malformed spec (not an
    object, unknown kind, unknown or missing key, wrong types, a compound inside a compound) and
    AudienceTooLarge (400 NOTIFICATION_AUDIENCE_TOO_LARGE) for the caps: an explicit list of more
    than 500 ids (R-SEND-8), a compound with fewer than 1 or more than 10 members (R-SEND-9).
    Returns the normalised dict stored on the event: a specification, never a resolved list.
    """
    return _validate(spec, nested=False)


def _validate(spec: object, *, nested: bool) -> dict[str, Any]:
    if not isinstance(spec, Mapping):
        raise AudienceInvalid("the audience must be an object with a kind")
    kind = spec.get("kind")
    if not isinstance(kind, str) or kind not in vocabulary.AUDIENCE_KINDS:
        raise AudienceInvalid(f"unknown audience kind {kind!r}")
    if kind == "compound":
        if nested:
            # R-SEND-10: depth-1 — Python has no type to forbid it, so validation does.
            raise AudienceInvalid("a compound audience member may not itself be compound")
        return _compound(spec)
    if kind == "segment":
        return _segment(spec)
    if kind == "all_users":
        _only_keys(spec, kind, ())
        return {"kind": "all_users"}
    list_key = _LIST_KEYS.get(kind)
    if list_key is None:  # a vocabulary kind this validator was never taught: fail closed
        raise AudienceInvalid(f"unknown audience kind {kind!r}")
    _only_keys(spec, kind, (list_key,))
    if list_key not in spec:
        raise AudienceInvalid(f"a {kind} audience needs {list_key}")
    cap = vocabulary.MAX_EXPLICIT_RECIPIENTS if kind in vocabulary.EXPLICIT_AUDIENCE_KINDS else None
    return {"kind": kind, list_key: _string_list(spec[list_key], list_key, cap=cap)}


def _only_keys(spec: Mapping[Any, Any], kind: str, allowed: tuple[str, ...]) -> None:
    unknown = sorted(str(k) for k in spec if k != "kind" and k not in allowed)
    if unknown:
        raise AudienceInvalid(f"a {kind} audience does not take {', '.join(unknown)}")


def _string_list(value: object, key: str, *, cap: int | None = None) -> list[str]:
    if not isinstance(value, list):
        raise AudienceInvalid(f"{key} must be a list of strings")
    # The cap bounds what the caller sent, duplicates included: 500 accepted, 501 refused.
    if cap is not None and len(value) > cap:
        raise AudienceTooLarge(f"{key} names {len(value)} ids; at most {cap} are allowed")
    for item in value:
        if not isinstance(item, str) or not item:
            raise AudienceInvalid(f"{key} must hold non-empty strings")
        if "\x00" in item or len(item) > 200:
            # PostgreSQL text cannot hold NUL; refuse it here rather than fail in the driver.
            raise AudienceInvalid(f"{key} holds an id with a NUL character or over 200 characters")
    # An empty list is valid and resolves to nobody (R-AUD-14).
    return sorted(set(value))


def _segment(spec: Mapping[str, Any]) -> dict[str, Any]:
    _only_keys(spec, "segment", _SEGMENT_FILTERS)
    if not any(key in spec for key in _SEGMENT_FILTERS):
        # A segment with no filter is all_users in disguise, most likely a mistake.
        raise AudienceInvalid(f"a segment audience needs at least one of {_SEGMENT_FILTERS}")
    out: dict[str, Any] = {"kind": "segment"}
    if "statuses" in spec:
        statuses = _string_list(spec["statuses"], "statuses")
        unknown = [v for v in statuses if v not in vocabulary.PERSON_STATUSES]
        if unknown:
            raise AudienceInvalid(f"statuses must be among {vocabulary.PERSON_STATUSES}")
        out["statuses"] = statuses
    if "locales" in spec:
        out["locales"] = _string_list(spec["locales"], "locales")
    if "countries" in spec:
        countries = _string_list(spec["countries"], "countries")
        if not all(len(c) == 2 and c.isascii() and c.isalpha() for c in countries):
            raise AudienceInvalid("countries must be two-letter country codes")
        out["countries"] = sorted({c.upper() for c in countries})
    if "seenWithinDays" in spec:
        days = spec["seenWithinDays"]
        if isinstance(days, bool) or not isinstance(days, int):
            raise AudienceInvalid("seenWithinDays must be a whole number of days")
        if not 1 <= days <= MAX_SEEN_WITHIN_DAYS:
            raise AudienceInvalid(f"seenWithinDays must be between 1 and {MAX_SEEN_WITHIN_DAYS}")
        out["seenWithinDays"] = days
    return out


def _compound(spec: Mapping[str, Any]) -> dict[str, Any]:
    _only_keys(spec, "compound", ("any",))
    members = spec.get("any")
    if not isinstance(members, list):
        raise AudienceInvalid("a compound audience needs `any`, a list of audiences")
    if not 1 <= len(members) <= vocabulary.MAX_COMPOUND_MEMBERS:
        # R-SEND-9: ten thousand all_users members would be ten thousand walks over everyone.
        raise AudienceTooLarge(
            f"a compound audience takes 1 to {vocabulary.MAX_COMPOUND_MEMBERS} members, "
            f"not {len(members)}"
        )
    return {"kind": "compound", "any": [_validate(m, nested=True) for m in members]}


def page_statement(
    tenant_id: str,
    spec: Mapping[str, Any],
    after_person_id: queries.Cursor,
    limit: int,
    *,
    created_until: datetime | None = None,
) -> Select[Any]:
    """The keyset page `resolve_audience_page` runs, as a statement for the fan-out to embed in
    its set-based write (columns id, public_id, full_name, locale, status, role_id, admitted).
    The spec is re-validated first, exactly as there (R-AUD-16). Run it custom-planned: sent
    unprepared (`herald.db.compiled.unprepared`)."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    return queries.page_query(
        tenant_id,
        validate_audience(spec),
        after_person_id,
        limit,
        created_until=created_until,
    )


async def resolve_audience_page(
    conn: AsyncConnection,
    tenant_id: str,
    spec: Mapping[str, Any],
    after_person_id: int,
    limit: int,
    *,
    created_until: datetime | None = None,
) -> list[AudienceMember]:
    """One keyset page: live people with person.id > after_person_id ORDER BY person.id LIMIT limit.

    The spec is re-validated first (pure and cheap), so a stored spec that is malformed or of an
    unknown kind raises AudienceInvalid rather than resolving to nobody (R-AUD-16). A page
    shorter than `limit` is the last one. Read-only (R-AUD-2). With `created_until`, people
    created after it come back with `admitted=False` (see queries.page_query).
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    normalised = validate_audience(spec)
    rows = await queries.select_page(
        conn, tenant_id, normalised, after_person_id, limit, created_until=created_until
    )
    return [
        AudienceMember(
            person_id=row.id,
            public_id=row.public_id,
            full_name=row.full_name,
            locale=row.locale,
            status=row.status,
            role_id=row.role_id,
            admitted=bool(row.admitted),
        )
        for row in rows
    ]
