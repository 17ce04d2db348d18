"""Validation of Telegram templates, which are sent with parse_mode=HTML (R-RENDER-29..34).

Telegram rejects a whole message whose HTML it cannot parse, and a link or unknown tag in an
admin-editable template is a phishing surface, so a template may hold only a few balanced
formatting tags, written exactly as `<b>` / `</b>`, and text in which `<` and `>` are escaped.
Values are HTML-escaped when they are substituted (R-RENDER-35), so only the template is checked.

The stdlib HTML parser does the tokenising. Because it is lenient (it accepts `<b >`, `</b x>`,
`</ b>` and drops `</>`), every token is also rebuilt in its canonical form and the result must
equal the input: anything the parser forgave is refused.
"""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Final

from typing_extensions import override

from herald.errors import TelegramTemplateInvalid

ALLOWED_TAGS: Final[frozenset[str]] = frozenset(
    {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "code"}
)


def validate_telegram_template(body: str) -> None:
    """Raise TelegramTemplateInvalid unless `body` is a template Telegram will accept as HTML."""
    checker = _TemplateChecker()
    checker.feed(body)
    checker.close()
    if checker.open_tags:
        raise TelegramTemplateInvalid(f"<{checker.open_tags[-1]}> is never closed")
    if "".join(checker.canonical) != body:
        raise TelegramTemplateInvalid(
            "a tag is malformed: write tags exactly as <b> and </b>, and escape < and > as "
            "&lt; and &gt;"
        )


class _TemplateChecker(HTMLParser):
    def __init__(self) -> None:
        # Keep entities as tokens, so an escaped `&lt;` is never mistaken for a bare `<`.
        super().__init__(convert_charrefs=False)
        self.open_tags: list[str] = []
        self.canonical: list[str] = []

    @override
    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        _check_tag_name(tag)
        if attrs:
            raise TelegramTemplateInvalid(f"<{tag}> may not carry attributes")
        self.open_tags.append(tag)
        self.canonical.append(f"<{tag}>")

    @override
    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        _check_tag_name(tag)
        raise TelegramTemplateInvalid(f"<{tag}/> is not a balanced tag")

    @override
    def handle_endtag(self, tag: str) -> None:
        _check_tag_name(tag)
        if not self.open_tags or self.open_tags[-1] != tag:
            raise TelegramTemplateInvalid(f"</{tag}> does not close the innermost open tag")
        self.open_tags.pop()
        self.canonical.append(f"</{tag}>")

    @override
    def handle_data(self, data: str) -> None:
        if "<" in data or ">" in data:
            raise TelegramTemplateInvalid(
                "unmatched angle bracket: escape < and > as &lt; and &gt;"
            )
        self.canonical.append(data)

    @override
    def handle_entityref(self, name: str) -> None:
        self.canonical.append(f"&{name};")

    @override
    def handle_charref(self, name: str) -> None:
        self.canonical.append(f"&#{name};")

    @override
    def handle_comment(self, data: str) -> None:
        raise TelegramTemplateInvalid("comments are not allowed")

    @override
    def handle_decl(self, decl: str) -> None:
        raise TelegramTemplateInvalid("declarations are not allowed")

    @override
    def handle_pi(self, data: str) -> None:
        raise TelegramTemplateInvalid("processing instructions are not allowed")

    @override
    def unknown_decl(self, data: str) -> None:
        raise TelegramTemplateInvalid("declarations are not allowed")


def _check_tag_name(tag: str) -> None:
    if tag == "a":
        raise TelegramTemplateInvalid("links are not allowed in a Telegram template")
    if tag == "script":
        raise TelegramTemplateInvalid("scripts are not allowed in a Telegram template")
    if tag not in ALLOWED_TAGS:
        raise TelegramTemplateInvalid(
            f"<{tag}> is not allowed; use only {', '.join(sorted(ALLOWED_TAGS))}"
        )
