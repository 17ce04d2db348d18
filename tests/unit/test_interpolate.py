"""`{{name}}` interpolation: flat names only, values verbatim, unresolved means suppressed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.rendering.escaping import escape_html
from herald.rendering.interpolate import interpolate, malformed_placeholders, placeholders

# Replacement-pattern syntax of every common substitution engine, placeholder syntax, header
# breakers and markup: none of it may mean anything when it arrives inside a value.
NASTY = [
    "$'",
    "$&",
    "$`",
    "$1",
    "$$",
    "$<name>",
    "\\1",
    "\\g<0>",
    "\\g<title>",
    "\\0",
    "{{",
    "}}",
    "{{title}}",
    "{{ title }}",
    "{{other}}",
    "\r",
    "\n",
    "\r\n",
    "<script>alert(1)</script>",
    "%s",
    "{0}",
    "{title}",
]

values_text = st.lists(st.one_of(st.sampled_from(NASTY), st.text()), max_size=6).map("".join)
# Template text around the placeholder: braces excluded so it cannot form a placeholder itself.
plain_text = st.text(alphabet=st.characters(blacklist_characters="{}"))


@given(before=plain_text, after=plain_text, value=values_text)
def test_value_is_inserted_verbatim_exactly_once(before: str, after: str, value: str) -> None:
    """R-RENDER-10: a value with `$'`, `$&`, `` $` ``, `$1`, `\\1`, `\\g<0>`, `{{…}}`, CR/LF or
    markup lands literally, once, and never splices the template's own text."""
    template = before + "{{title}}" + after
    assert interpolate(template, {"title": value, "other": "OTHER"}) == before + value + after


@given(value_a=values_text, value_b=values_text)
def test_two_values_never_reach_into_each_other(value_a: str, value_b: str) -> None:
    """R-RENDER-10: one pass; a value that looks like another placeholder is never re-scanned."""
    template = "A{{a}}B{{b}}C"
    assert interpolate(template, {"a": value_a, "b": value_b}) == f"A{value_a}B{value_b}C"


@given(before=plain_text, after=plain_text, value=values_text)
def test_escape_applies_to_the_value_only(before: str, after: str, value: str) -> None:
    """R-RENDER-10, R-RENDER-11: the escape runs on the value; template text is left alone."""
    template = before + "{{title}}" + after
    assert interpolate(template, {"title": value}, escape_html) == (
        before + escape_html(value) + after
    )


def test_value_that_is_a_placeholder_stays_literal() -> None:
    """R-RENDER-10: `{{title}}` inside a value is text, even when `title` has a value."""
    result = interpolate("{{a}}|{{title}}", {"a": "{{title}}", "title": "T"})
    assert result == "{{title}}|T"


def test_padded_placeholder_resolves() -> None:
    """R-RENDER-8: `{{ name }}` is the same flat placeholder as `{{name}}`."""
    assert interpolate("Hi {{ name }}!", {"name": "Sita"}) == "Hi Sita!"


def test_empty_value_counts_as_resolved() -> None:
    """R-RENDER-9: an empty string is a value, not an unresolved placeholder."""
    assert interpolate("[{{a}}]", {"a": ""}) == "[]"


@pytest.mark.parametrize(
    ("template", "values"),
    [
        ("Hello {{name}}", {}),
        ("{{title}}: {{message}}", {"title": "T"}),
        ("{{title}}", {"Title": "wrong case"}),
    ],
)
def test_unresolved_placeholder_returns_none(template: str, values: dict[str, str]) -> None:
    """R-RENDER-9, R-RENDER-26: any unresolved placeholder suppresses the whole render."""
    assert interpolate(template, values) is None


@given(
    before=plain_text,
    after=plain_text,
    known=st.dictionaries(st.from_regex(r"[a-z]{1,8}", fullmatch=True), st.text(), max_size=4),
)
def test_missing_name_is_never_delivered_literally(
    before: str, after: str, known: dict[str, str]
) -> None:
    """R-RENDER-9, R-RENDER-26: whatever else resolves, one missing name means None."""
    known.pop("missing", None)
    template = before + "".join(f"{{{{{k}}}}}" for k in known) + "{{missing}}" + after
    assert interpolate(template, known) is None


@pytest.mark.parametrize(
    "template",
    [
        "{{a.b}}",
        "{{ a.b }}",
        "{{ f() }}",
        "{{f()}}",
        "{{a['b']}}",
        "{{a|upper}}",
        "{{ a + b }}",
        "{{__import__('os').system('id')}}",
        "{{}}",
        "{{ }}",
        "{{1a}}",
    ],
)
def test_expressions_and_paths_are_not_evaluated(template: str) -> None:
    """R-RENDER-8: only flat names; an expression or path is never evaluated, and since it cannot
    resolve it suppresses the send instead of delivering the literal (R-RENDER-9)."""
    values = {"a": "A", "b": "B", "a.b": "AB", "f": "F", "f()": "called", "a + b": "sum"}
    assert interpolate(template, values) is None
    assert placeholders(template) == set()
    assert malformed_placeholders(template) == [template]


def test_placeholders_lists_flat_names_only() -> None:
    """R-RENDER-8: placeholders() reports the flat names a template uses."""
    template = "{{title}} by {{ author }} ({{a.b}}) {{title}}"
    assert placeholders(template) == {"title", "author"}
    assert malformed_placeholders(template) == ["{{a.b}}"]


def test_text_without_placeholders_is_unchanged() -> None:
    """R-RENDER-8: single braces and dollar signs in the template are plain text."""
    template = "Pay $5 {now} \\1 $& {not} a placeholder }}"
    assert interpolate(template, {}) == template
