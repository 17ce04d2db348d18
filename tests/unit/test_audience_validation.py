"""Audience spec validation and the resolver map, without a database."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.dialects import postgresql

from herald import vocabulary
from herald.audience import queries
from herald.audience.service import validate_audience
from herald.errors import AudienceInvalid, AudienceTooLarge, ConfigurationError

# Ids as a host sends them: any text but NUL, which PostgreSQL cannot store (refused with a 400).
ids = st.lists(
    st.text(st.characters(blacklist_characters="\x00"), min_size=1, max_size=12), max_size=20
)
simple_specs = st.one_of(
    st.builds(lambda v: {"kind": "users", "userIds": v}, ids),
    st.builds(lambda v: {"kind": "role", "roles": v}, ids),
    st.builds(lambda v: {"kind": "group", "groupIds": v}, ids),
    st.builds(lambda v: {"kind": "guardians_of_group", "groupIds": v}, ids),
    st.builds(lambda v: {"kind": "guardians_of_users", "userIds": v}, ids),
    st.just({"kind": "all_users"}),
    st.builds(
        lambda loc, days: {"kind": "segment", "locales": loc, "seenWithinDays": days},
        ids,
        st.integers(1, 365),
    ),
)
any_specs = st.one_of(
    simple_specs,
    st.builds(
        lambda m: {"kind": "compound", "any": m}, st.lists(simple_specs, min_size=1, max_size=10)
    ),
)


def _explicit(kind: str, n: int) -> dict[str, Any]:
    return {"kind": kind, "userIds": [f"u{i}" for i in range(n)]}


# ---------------------------------------------------------------------------------------------
# Shapes and normalisation


def test_every_shape_from_the_contract_validates() -> None:
    """The spec shapes of DESIGN.md §5.1 are accepted and normalised (sorted, de-duplicated)."""
    assert validate_audience({"kind": "users", "userIds": ["b", "a", "b"]}) == {
        "kind": "users",
        "userIds": ["a", "b"],
    }
    assert validate_audience({"kind": "role", "roles": ["teacher"]}) == {
        "kind": "role",
        "roles": ["teacher"],
    }
    assert validate_audience({"kind": "group", "groupIds": ["class-7a"]})["groupIds"] == [
        "class-7a"
    ]
    assert validate_audience({"kind": "guardians_of_group", "groupIds": ["7a"]})["kind"] == (
        "guardians_of_group"
    )
    assert validate_audience({"kind": "guardians_of_users", "userIds": ["s1"]})["userIds"] == ["s1"]
    assert validate_audience({"kind": "all_users"}) == {"kind": "all_users"}
    assert validate_audience(
        {
            "kind": "segment",
            "statuses": ["active"],
            "locales": ["ne"],
            "countries": ["np"],
            "seenWithinDays": 30,
        }
    ) == {
        "kind": "segment",
        "statuses": ["active"],
        "locales": ["ne"],
        "countries": ["NP"],
        "seenWithinDays": 30,
    }
    assert validate_audience(
        {"kind": "compound", "any": [{"kind": "all_users"}, {"kind": "role", "roles": ["a"]}]}
    ) == {"kind": "compound", "any": [{"kind": "all_users"}, {"kind": "role", "roles": ["a"]}]}


@given(any_specs)
def test_validation_is_idempotent(spec: dict[str, Any]) -> None:
    """The stored (normalised) spec validates to itself, so the fan-out can re-validate it."""
    once = validate_audience(spec)
    assert validate_audience(once) == once


def test_empty_id_lists_are_valid() -> None:
    """R-AUD-14: an empty list is a valid audience that names nobody, not an error."""
    for kind, key in (
        ("users", "userIds"),
        ("role", "roles"),
        ("group", "groupIds"),
        ("guardians_of_group", "groupIds"),
        ("guardians_of_users", "userIds"),
    ):
        assert validate_audience({"kind": kind, key: []}) == {"kind": kind, key: []}


@pytest.mark.parametrize(
    "spec",
    [
        None,
        "all_users",
        ["all_users"],
        {},
        {"kind": "class", "classIds": ["7a"]},
        {"kind": 3},
        {"kind": "all_users", "userIds": ["a"]},
        {"kind": "users"},
        {"kind": "users", "userIds": "a"},
        {"kind": "users", "userIds": [1, 2]},
        {"kind": "users", "userIds": [""]},
        {"kind": "users", "userIds": ["a"], "roles": ["b"]},
        {"kind": "group", "groupIds": ["a"], "memberRole": "teacher"},
        {"kind": "guardians_of_users", "userIds": ["a"], "guardianIds": ["b"]},
        {"kind": "segment"},
        {"kind": "segment", "statuses": ["dormant"]},
        {"kind": "segment", "countries": ["NPL"]},
        {"kind": "segment", "countries": ["1P"]},
        {"kind": "segment", "seenWithinDays": 0},
        {"kind": "segment", "seenWithinDays": 366},
        {"kind": "segment", "seenWithinDays": True},
        {"kind": "segment", "seenWithinDays": 7.5},
        {"kind": "segment", "locales": ["en"], "tags": ["x"]},
        {"kind": "compound"},
        {"kind": "compound", "any": {"kind": "all_users"}},
        {"kind": "compound", "any": [{"kind": "all_users"}], "all": []},
        {"kind": "compound", "any": ["all_users"]},
        {"kind": "compound", "any": [{"kind": "nobody"}]},
    ],
)
def test_malformed_specs_are_refused_as_invalid(spec: object) -> None:
    """Malformed specs are a 400 NOTIFICATION_AUDIENCE_INVALID, never a silent default."""
    with pytest.raises(AudienceInvalid) as caught:
        validate_audience(spec)
    assert caught.value.code == "NOTIFICATION_AUDIENCE_INVALID"
    assert caught.value.status == 400


def test_a_guardian_audience_takes_no_caller_list_of_guardians() -> None:
    """R-AUD-11: a guardian audience names students or groups; a list of guardians is refused."""
    for key in ("guardianIds", "personIds", "recipients"):
        with pytest.raises(AudienceInvalid):
            validate_audience({"kind": "guardians_of_group", "groupIds": ["7a"], key: ["p"]})


# ---------------------------------------------------------------------------------------------
# Caps


@pytest.mark.parametrize("kind", vocabulary.EXPLICIT_AUDIENCE_KINDS)
def test_explicit_list_cap_is_500(kind: str) -> None:
    """R-SEND-8: an explicit list of 500 is accepted, 501 is 400 NOTIFICATION_AUDIENCE_TOO_LARGE."""
    assert len(validate_audience(_explicit(kind, 500))["userIds"]) == 500
    with pytest.raises(AudienceTooLarge) as caught:
        validate_audience(_explicit(kind, 501))
    assert caught.value.code == "NOTIFICATION_AUDIENCE_TOO_LARGE"
    assert caught.value.status == 400


def test_explicit_list_cap_applies_inside_a_compound() -> None:
    """R-SEND-8: the cap holds for a compound member too."""
    with pytest.raises(AudienceTooLarge):
        validate_audience({"kind": "compound", "any": [_explicit("users", 501)]})


def test_compound_takes_one_to_ten_members() -> None:
    """R-SEND-9: 0 and 11 members are 400 NOTIFICATION_AUDIENCE_TOO_LARGE; 1 and 10 are fine."""
    member = {"kind": "all_users"}
    assert len(validate_audience({"kind": "compound", "any": [member]})["any"]) == 1
    assert len(validate_audience({"kind": "compound", "any": [member] * 10})["any"]) == 10
    for n in (0, 11, 10_000):
        with pytest.raises(AudienceTooLarge) as caught:
            validate_audience({"kind": "compound", "any": [member] * n})
        assert caught.value.code == "NOTIFICATION_AUDIENCE_TOO_LARGE"


def test_compound_is_depth_one() -> None:
    """R-SEND-10: a compound member may not itself be compound."""
    inner = {"kind": "compound", "any": [{"kind": "all_users"}]}
    with pytest.raises(AudienceInvalid):
        validate_audience({"kind": "compound", "any": [inner]})


# ---------------------------------------------------------------------------------------------
# The resolver map


def test_every_audience_kind_has_a_resolver_fragment() -> None:
    """R-PLAT (fragmentFor is total): the map covers the vocabulary exactly, checked at import."""
    assert set(queries.FRAGMENTS) == set(vocabulary.AUDIENCE_KINDS)
    queries.check_fragments_cover(vocabulary.AUDIENCE_KINDS, queries.FRAGMENTS)


def test_a_missing_resolver_fails_loudly() -> None:
    """R-PLAT: a vocabulary kind without a fragment refuses to load, never notifies nobody."""
    partial = {k: v for k, v in queries.FRAGMENTS.items() if k != "segment"}
    with pytest.raises(ConfigurationError, match="segment"):
        queries.check_fragments_cover(vocabulary.AUDIENCE_KINDS, partial)
    with pytest.raises(ConfigurationError, match="new_kind"):
        queries.check_fragments_cover((*vocabulary.AUDIENCE_KINDS, "new_kind"), queries.FRAGMENTS)


def test_an_unknown_kind_has_no_fragment() -> None:
    """R-AUD-16: resolving an unknown kind raises instead of resolving to nobody."""
    with pytest.raises(AudienceInvalid):
        queries.fragment_for("class")
    with pytest.raises(AudienceInvalid):
        queries.page_query("t", {"kind": "class"}, 0, 10)
    with pytest.raises(AudienceInvalid):
        queries.page_query("t", {"kind": "compound", "any": [{"kind": "class"}]}, 0, 10)


# ---------------------------------------------------------------------------------------------
# The SQL's shape


def _compiled(spec: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    compiled = queries.page_query("tenant-a", validate_audience(spec), 41, 500).compile(
        dialect=postgresql.dialect()  # type: ignore[no-untyped-call]
    )
    return str(compiled), dict(compiled.params)


@pytest.mark.parametrize(
    ("spec", "ids"),
    [
        ({"kind": "users", "userIds": ["x'); DROP TABLE person; --", "id-two"]}, 2),
        ({"kind": "guardians_of_users", "userIds": ["o'hara", "pupil-2", "pupil-3"]}, 3),
        ({"kind": "group", "groupIds": ["class-7a", "class-7b"]}, 2),
        ({"kind": "guardians_of_group", "groupIds": ["class-7a"]}, 1),
        ({"kind": "role", "roles": ["role-teacher", "role-guardian"]}, 2),
    ],
)
def test_id_lists_are_one_bound_array_parameter(spec: dict[str, Any], ids: int) -> None:
    """R-AUD-13: the ids travel as ONE array parameter; no id appears in the SQL text."""
    sql, params = _compiled(spec)
    listed = next(iter(v for k, v in spec.items() if k != "kind"))
    arrays = [v for v in params.values() if isinstance(v, list)]
    assert arrays == [sorted(set(listed))]
    assert len(arrays[0]) == ids
    for value in listed:
        assert value not in sql
    assert "TEXT[]" in sql


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "all_users"},
        {"kind": "users", "userIds": ["a"]},
        {"kind": "group", "groupIds": ["a"]},
        {"kind": "compound", "any": [{"kind": "all_users"}, {"kind": "role", "roles": ["r"]}]},
    ],
)
def test_pages_are_keyset_pages_never_offset(spec: dict[str, Any]) -> None:
    """R-AUD-5 / R-AUD-6: ORDER BY person.id, person.id > cursor, deleted_at IS NULL; no OFFSET."""
    sql, params = _compiled(spec)
    assert "OFFSET" not in sql.upper()
    outer = sql[sql.rindex(") AS matched") :]
    assert "person.deleted_at IS NULL" in outer
    assert "person.id >" in outer
    assert "ORDER BY person.id" in outer
    assert 41 in params.values()
    assert 500 in params.values()


def test_compound_is_one_union_statement() -> None:
    """R-AUD-9: a compound is ONE statement with a UNION of its members, grouped by person."""
    sql, _ = _compiled(
        {
            "kind": "compound",
            "any": [{"kind": "group", "groupIds": ["7a"]}, {"kind": "role", "roles": ["t"]}],
        }
    )
    assert sql.count("UNION ALL") == 1
    assert "GROUP BY united.person_id" in sql
