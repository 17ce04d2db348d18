"""Telegram templates: a few balanced formatting tags, no attributes, links, scripts or bare `<`."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.errors import TelegramTemplateInvalid, ValidationFailed
from herald.rendering.escaping import escape_html
from herald.rendering.telegram import ALLOWED_TAGS, validate_telegram_template


@pytest.mark.parametrize(
    "body",
    [
        "",
        "plain text",
        "<b>{{title}}</b>\n{{message}}",
        "<b>bold</b> <strong>s</strong> <i>i</i> <em>e</em> <u>u</u> <ins>n</ins>",
        "<s>s</s> <strike>st</strike> <del>d</del> <code>x = 1</code>",
        "<b><i>nested</i> properly</b>",
        "1 &lt; 2 &amp;&amp; 3 &gt; 2 &quot;q&quot; &#60; &#x3C;",
        "Tom & Jerry",
        "<b></b>",
    ],
)
def test_allowed_templates_pass(body: str) -> None:
    """R-RENDER-29, R-RENDER-30: the allowlisted tags, balanced, with escaped text, are accepted."""
    validate_telegram_template(body)


@pytest.mark.parametrize("tag", sorted(ALLOWED_TAGS))
def test_each_allowlisted_tag_passes(tag: str) -> None:
    """R-RENDER-29: each of b strong i em u ins s strike del code is allowed."""
    validate_telegram_template(f"before <{tag}>inside</{tag}> after")


def test_the_allowlist_is_exactly_the_ten_tags() -> None:
    """R-RENDER-29: no more and no fewer than the ten tags."""
    assert {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "code"} == ALLOWED_TAGS


@pytest.mark.parametrize(
    "body",
    [
        "<pre>x</pre>",
        "<span>x</span>",
        "<tg-spoiler>x</tg-spoiler>",
        "<blockquote>x</blockquote>",
        "<div>x</div>",
        "<img>",
        "<br>",
        "<p>x</p>",
        "<iframe>x</iframe>",
        "<style>b{}</style>",
        "<tg-emoji>x</tg-emoji>",
    ],
)
def test_other_tags_are_rejected(body: str) -> None:
    """R-RENDER-29: any tag outside the allowlist is rejected."""
    with pytest.raises(TelegramTemplateInvalid):
        validate_telegram_template(body)


@pytest.mark.parametrize(
    "body",
    [
        "<b>never closed",
        "closed </b> never opened",
        "<b><i>crossed</b></i>",
        "<b>x</i>",
        "<b><b>x</b>",
        "<code>x",
        "<b>x</b></b>",
    ],
)
def test_unbalanced_tags_are_rejected(body: str) -> None:
    """R-RENDER-30: an unclosed or unmatched tag is rejected."""
    with pytest.raises(TelegramTemplateInvalid):
        validate_telegram_template(body)


@pytest.mark.parametrize(
    "body",
    [
        '<b class="x">x</b>',
        "<b onclick=alert(1)>x</b>",
        "<i style='color:red'>x</i>",
        "<code lang>x</code>",
        '<span class="tg-spoiler">x</span>',
        "<b>x</b x>",
    ],
)
def test_attributes_are_rejected(body: str) -> None:
    """R-RENDER-31: a tag carrying an attribute is rejected."""
    with pytest.raises(TelegramTemplateInvalid):
        validate_telegram_template(body)


@pytest.mark.parametrize(
    "body",
    [
        '<a href="https://evil.example">pay here</a>',
        "<a>bare</a>",
        "<A HREF=https://evil.example>x</A>",
        "<b><a href='tg://user?id=1'>x</a></b>",
    ],
)
def test_links_are_rejected(body: str) -> None:
    """R-RENDER-32: a link is rejected, with or without an href."""
    with pytest.raises(TelegramTemplateInvalid, match="link"):
        validate_telegram_template(body)


@pytest.mark.parametrize(
    "body",
    ["<script>alert(1)</script>", "<SCRIPT>alert(1)</SCRIPT>", "<b>x</b><script src=x></script>"],
)
def test_scripts_are_rejected(body: str) -> None:
    """R-RENDER-33: a script is rejected."""
    with pytest.raises(TelegramTemplateInvalid, match="script"):
        validate_telegram_template(body)


@pytest.mark.parametrize(
    "body",
    [
        "1 < 2",
        "2 > 1",
        "<",
        ">",
        "x <b",
        "<b>x</b",
        "<<b>x</b>",
        "<b>x</b>>",
        "<3 you",
        "< b>x</b>",
        "<1>",
    ],
)
def test_unmatched_angle_brackets_are_rejected(body: str) -> None:
    """R-RENDER-34: a `<` or `>` that is not part of a tag is rejected."""
    with pytest.raises(TelegramTemplateInvalid):
        validate_telegram_template(body)


@pytest.mark.parametrize(
    "body",
    [
        "<b/>",
        "<b >x</b>",
        "<b\n>x</b>",
        "<B>x</B>",
        "</ b>",
        "</>",
        "<b>x</b/>",
        "<!-- hidden -->",
        "<!DOCTYPE html>",
        "<?xml version='1.0'?>",
        "<![CDATA[x]]>",
        "&lt without semicolon",
    ],
)
def test_forms_the_parser_would_forgive_are_rejected(body: str) -> None:
    """R-RENDER-30, R-RENDER-34: self-closing, padded, upper-case or bogus tags, comments and
    declarations are not the plain balanced tags Telegram accepts."""
    with pytest.raises(TelegramTemplateInvalid):
        validate_telegram_template(body)


def test_error_is_a_validation_failure_with_its_code() -> None:
    """R-RENDER-29: the refusal is a 400 with code TELEGRAM_TEMPLATE_INVALID."""
    with pytest.raises(ValidationFailed) as caught:
        validate_telegram_template("<a href='x'>x</a>")
    assert caught.value.code == "TELEGRAM_TEMPLATE_INVALID"
    assert caught.value.status == 400


@given(st.text())
def test_any_escaped_text_is_a_valid_template(text: str) -> None:
    """R-RENDER-34, R-RENDER-35: escaped text never trips the angle-bracket rule, so values
    escaped at render time cannot break a valid template."""
    validate_telegram_template(escape_html(text))
    validate_telegram_template(f"<b>{escape_html(text)}</b>")


tags = st.sampled_from(sorted(ALLOWED_TAGS))


@st.composite
def balanced(draw: st.DrawFn, depth: int = 0) -> str:
    """Escaped text and properly nested allowlisted tags, up to three deep."""
    pieces = st.one_of(st.text().map(escape_html), tags.map(lambda tag: f"<{tag}>"))
    out = []
    for piece in draw(st.lists(pieces, max_size=4)):
        if piece.startswith("<") and depth < 3:
            out.append(f"{piece}{draw(balanced(depth + 1))}</{piece[1:]}")
        elif not piece.startswith("<"):
            out.append(piece)
    return "".join(out)


@given(balanced())
def test_any_balanced_nesting_of_allowed_tags_passes(body: str) -> None:
    """R-RENDER-29, R-RENDER-30: properly nested allowlisted tags around escaped text pass."""
    validate_telegram_template(body)


@given(balanced(), tags)
def test_dropping_a_closing_tag_is_always_caught(body: str, tag: str) -> None:
    """R-RENDER-30: a balanced template with one extra opening tag is rejected."""
    with pytest.raises(TelegramTemplateInvalid):
        validate_telegram_template(f"<{tag}>{body}")
