"""The broadcast draft's audience picker: the form's fields → an audience spec, and back.

Pure. The picker is a kind and the lists it names — roles and groups from the tenant's directory,
people by their external ids — or a spec written as JSON (segments, and anything the picker does
not offer). A union ("compound") is every list that is filled: the roles, the groups' students,
the guardians of the guardian groups' students, and the named people. The spec it builds is
checked afterwards exactly as a draft's audience is (broadcasts.audiences.check_audience).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from herald.scheduling.broadcasts.audiences import audience_refusal

KIND: Final = "audienceKind"
ROLES: Final = "audienceRoles"
GROUPS: Final = "audienceGroups"
GUARDIAN_GROUPS: Final = "audienceGuardianGroups"
PEOPLE: Final = "audiencePeople"
JSON: Final = "audience"
WRITTEN: Final = "json"  # the kind that reads the JSON field

# (value, label) in the order the picker offers them.
KINDS: Final[tuple[tuple[str, str], ...]] = (
    ("role", "Everyone holding the roles"),
    ("group", "The students of the groups"),
    ("guardians_of_group", "The guardians of the groups' students"),
    ("users", "The people named"),
    ("guardians_of_users", "The guardians of the people named"),
    ("all_users", "Everyone"),
    ("compound", "Any of them (a union of the roles, groups, guardians and people chosen)"),
    (WRITTEN, "Written as JSON (segments, and the rest)"),
)
DEFAULT_ROLES: Final = ("guardian",)
_SEPARATORS: Final = re.compile(r"[\s,]+")


@dataclass(frozen=True)
class Picked:
    """What the picker shows chosen (the form's fields, read back)."""

    kind: str = "role"
    roles: frozenset[str] = field(default_factory=lambda: frozenset(DEFAULT_ROLES))
    groups: frozenset[str] = frozenset()
    guardian_groups: frozenset[str] = frozenset()
    people: str = ""
    written: str = ""


def picked_from(fields: Mapping[str, Sequence[str]]) -> Picked:
    """The picker's fields as posted (name → every value given for it)."""

    def first(name: str) -> str:
        values = fields.get(name) or [""]
        return values[0].strip()

    def chosen(name: str) -> frozenset[str]:
        return frozenset(v for v in fields.get(name, ()) if v)

    # A form that names no kind (a client of the JSON-only form) is written JSON.
    return Picked(
        kind=first(KIND) or WRITTEN,
        roles=chosen(ROLES),
        groups=chosen(GROUPS),
        guardian_groups=chosen(GUARDIAN_GROUPS),
        people=first(PEOPLE),
        written=first(JSON),
    )


def spec_of(picked: Picked) -> object:
    """The audience spec the picker stands for (not yet checked: check_audience does that)."""
    people = sorted({p for p in _SEPARATORS.split(picked.people) if p})
    if picked.kind == WRITTEN:
        if not picked.written:
            raise audience_refusal("write the audience as JSON, or pick its kind")
        try:
            written: object = json.loads(picked.written)
        except ValueError:
            raise audience_refusal("must be JSON") from None
        return written
    if picked.kind == "role":
        return {"kind": "role", "roles": sorted(picked.roles)}
    if picked.kind == "group":
        return {"kind": "group", "groupIds": sorted(picked.groups)}
    if picked.kind == "guardians_of_group":
        return {"kind": "guardians_of_group", "groupIds": sorted(picked.guardian_groups)}
    if picked.kind in ("users", "guardians_of_users"):
        return {"kind": picked.kind, "userIds": people}
    if picked.kind == "compound":
        members: list[dict[str, Any]] = []
        if picked.roles:
            members.append({"kind": "role", "roles": sorted(picked.roles)})
        if picked.groups:
            members.append({"kind": "group", "groupIds": sorted(picked.groups)})
        if picked.guardian_groups:
            members.append(
                {"kind": "guardians_of_group", "groupIds": sorted(picked.guardian_groups)}
            )
        if people:
            members.append({"kind": "users", "userIds": people})
        return {"kind": "compound", "any": members}
    # all_users, or a kind the picker does not know: the check accepts or names it.
    return {"kind": picked.kind}
