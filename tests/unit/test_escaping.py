"""HTML and header escaping, and what render() does with them for email and Telegram."""

from __future__ import annotations

import html

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.kinds.sample import ANNOUNCEMENT, TRANSPORT_DELAY
from herald.rendering.escaping import escape_header, escape_html
from herald.rendering.render import Override, render
from herald.rendering.telegram import validate_telegram_template

FIVE = "&<>\"'"
LINE_BREAKS = "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"

# Values biased towards the characters that matter, mixed with arbitrary text.
hostile = st.lists(
    st.one_of(
        st.sampled_from(
            ["<script>alert(1)</script>", "\r\n", "\r", "\n", "&amp;", "\"'", "<b>", "\u2028"]
        ),
        st.text(),
    ),
    max_size=6,
).map("".join)


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;"), ("'", "&#x27;")],
)
def test_escape_html_replaces_each_of_the_five(raw: str, escaped: str) -> None:
    """R-RENDER-20: each of `&` `<` `>` `"` `'` is replaced by its entity."""
    assert escape_html(f"a{raw}b") == f"a{escaped}b"


@given(st.text(alphabet=st.characters(blacklist_characters=FIVE)))
def test_escape_html_leaves_everything_else_alone(text: str) -> None:
    """R-RENDER-20: exactly five characters are replaced and no others."""
    assert escape_html(text) == text


@given(st.text())
def test_escape_html_output_has_no_markup_and_round_trips(text: str) -> None:
    """R-RENDER-20: the output holds none of `<>"'` and decodes back to the input."""
    escaped = escape_html(text)
    assert not set("<>\"'") & set(escaped)
    assert html.unescape(escaped) == text


def test_escape_html_does_not_neutralise_urls() -> None:
    """R-RENDER-20: why URLs need their own allowlist — escaping leaves `javascript:` intact."""
    assert escape_html("javascript:alert(1)") == "javascript:alert(1)"


def test_escape_header_collapses_crlf_runs() -> None:
    """R-RENDER-12, R-RENDER-19: a CR/LF run becomes one space; the header cannot split."""
    assert escape_header("Hello\r\nBcc: victim@example.com") == "Hello Bcc: victim@example.com"
    assert escape_header("a\n\n\rb\rc") == "a b c"


@pytest.mark.parametrize("brk", list(LINE_BREAKS))
def test_escape_header_collapses_each_line_break(brk: str) -> None:
    """R-RENDER-12, R-RENDER-19: each line break str.splitlines() knows, alone, in a run, at
    either end (the printable fast path must never let one through)."""
    assert escape_header(f"a{brk}b") == "a b"
    assert escape_header(f"{brk}{brk}a{brk}") == " a "


@given(st.text())
def test_escape_header_output_is_one_line(text: str) -> None:
    """R-RENDER-12, R-RENDER-19: no CR, no LF, nothing any line splitter breaks on."""
    out = escape_header(text)
    assert "\r" not in out and "\n" not in out
    assert len(out.splitlines()) <= 1


@given(st.text(alphabet=st.characters(blacklist_characters=LINE_BREAKS)))
def test_escape_header_leaves_single_lines_alone(text: str) -> None:
    """R-RENDER-12: only line breaks are touched."""
    assert escape_header(text) == text


@given(title=hostile, message=hostile, name=hostile)
def test_email_body_html_escapes_every_value(title: str, message: str, name: str) -> None:
    """R-RENDER-11, R-RENDER-18: every value in the email HTML body is HTML-escaped, the
    template's own wording is kept, and the plain-text body carries the values as they are."""
    rendered = render(
        ANNOUNCEMENT, "email", "en", {"title": title, "message": message, "name": name}
    )
    assert rendered is not None
    assert rendered.body_html == f"Dear {escape_html(name)},\n\n{escape_html(message)}"
    assert rendered.body == f"Dear {name},\n\n{message}"


@given(title=hostile, message=hostile, name=hostile)
def test_email_subject_never_holds_a_line_break(title: str, message: str, name: str) -> None:
    """R-RENDER-12, R-RENDER-19: whatever the value, the subject is one header line."""
    rendered = render(
        ANNOUNCEMENT, "email", "en", {"title": title, "message": message, "name": name}
    )
    assert rendered is not None and rendered.title is not None
    assert "\r" not in rendered.title and "\n" not in rendered.title
    assert rendered.title == escape_header(title)


def test_email_subject_is_collapsed_for_a_crlf_injection() -> None:
    """R-RENDER-12: the classic Bcc injection lands on the subject line, harmless."""
    values = {"title": "Hi\r\nBcc: all@example.com", "message": "m", "name": "n"}
    rendered = render(ANNOUNCEMENT, "email", "en", values)
    assert rendered is not None
    assert rendered.title == "Hi Bcc: all@example.com"


@given(route=hostile, minutes=hostile)
def test_telegram_values_are_escaped_and_the_result_is_valid(route: str, minutes: str) -> None:
    """R-RENDER-35: every value substituted into a Telegram template is HTML-escaped, so the
    message still passes the Telegram template rules (R-RENDER-29, R-RENDER-30, R-RENDER-31, R-RENDER-32, R-RENDER-33, R-RENDER-34)."""
    rendered = render(TRANSPORT_DELAY, "telegram", "en", {"route": route, "minutes": minutes})
    assert rendered is not None
    assert rendered.body == (
        f"<b>Bus delayed</b>\n{escape_html(route)}: about {escape_html(minutes)} minutes late"
    )
    validate_telegram_template(rendered.body)


def test_sms_values_are_not_html_escaped() -> None:
    """R-RENDER-20: SMS is plain text; escaping it would show `&amp;` to a parent."""
    rendered = render(ANNOUNCEMENT, "sms", "en", {"title": "A & B", "message": "<3"})
    assert rendered is not None
    assert rendered.body == "A & B: <3"
    assert rendered.body_html is None


def test_email_subject_from_an_override_is_one_line() -> None:
    """R-RENDER-19: an operator override's own wording cannot split the Subject header either."""
    overrides = {
        ("announcement.posted", "email", "en"): Override(
            "{{title}}\r\nBcc: all@example.com", "b", 1
        )
    }
    rendered = render(ANNOUNCEMENT, "email", "en", {"title": "T", "message": "m"}, overrides)
    assert rendered is not None
    assert rendered.title == "T Bcc: all@example.com"
