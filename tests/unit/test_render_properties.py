"""Property tests over the whole rendering path, template to wire format: whatever a variable
holds, it cannot add markup to an email or a Telegram message, split or add an email header, be
re-read as a placeholder, or become a link; and whatever the action URL holds, only an https: URL
becomes a link. Example counts are bounded so the file runs in a few seconds."""

from __future__ import annotations

import email
import email.policy
from html.parser import HTMLParser
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from herald.channels.base import Message
from herald.channels.email import build_email
from herald.channels.telegram import build_send_message
from herald.config import Settings
from herald.kinds.sample import ANNOUNCEMENT
from herald.rendering.render import Rendered, render
from herald.rendering.urls import is_safe_action_url

EXAMPLES = settings(max_examples=100, deadline=None)
SETTINGS = Settings(email_from="School <school@example.com>")

# Values biased towards what attacks look like, mixed with arbitrary text.
ATTACKS = [
    "<script>alert(1)</script>",
    '<a href="javascript:alert(1)">x</a>',
    '<img src=x onerror="alert(1)">',
    "javascript:alert(1)",
    "data:text/html;base64,PHNjcmlwdD4=",
    "\r\nBcc: victim@example.com",
    "\nContent-Type: text/html",
    "\r\n\r\n<html>",
    "{{title}}",
    "{{secretRef}}",
    "&lt;b&gt;",
    "</b><i>",
    '"><b>',
    "'",
    "\u2028",
    "\x00",
    "\x85",
]
hostile = st.lists(st.one_of(st.sampled_from(ATTACKS), st.text(max_size=20)), max_size=5).map(
    "".join
)
SCHEMES = ["javascript:", "JaVaScRiPt:", "data:", "vbscript:", "file:", "http:", "", "//", "/"]
action_urls = st.one_of(
    st.none(),
    st.builds(
        lambda prefix, scheme, rest: prefix + scheme + rest,
        st.sampled_from(["", " ", "\t", "\x01", "\u200b"]),
        st.sampled_from([*SCHEMES, "https:", "https://"]),
        st.one_of(
            st.sampled_from(["alert(1)", "//evil.example/x", "school.example/a?b=1", "\\evil"]),
            st.text(max_size=15),
        ),
    ),
)

LAYOUT_TAGS = {"html", "head", "meta", "title", "body", "div", "table", "tr", "td", "h1", "p", "br"}


class Markup(HTMLParser):
    """Every tag and attribute a browser (or mail client) would see, in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, tuple[tuple[str, str | None], ...]]] = []
        self.other: list[str] = []  # comments, declarations besides the doctype, PIs

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, tuple(attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, tuple(attrs)))

    def handle_comment(self, data: str) -> None:
        self.other.append(f"comment {data!r}")

    def handle_decl(self, decl: str) -> None:
        if decl.lower() != "doctype html":
            self.other.append(f"decl {decl!r}")

    def handle_pi(self, data: str) -> None:
        self.other.append(f"pi {data!r}")

    def unknown_decl(self, data: str) -> None:
        self.other.append(f"unknown {data!r}")


def markup(html: str) -> Markup:
    parser = Markup()
    parser.feed(html)
    parser.close()
    return parser


def email_for(values: dict[str, str], action_url: str | None = None) -> Any:
    rendered = render(ANNOUNCEMENT, "email", "en", values)
    assert rendered is not None
    message = Message(
        channel="email",
        to="parent@example.com",
        title=rendered.title,
        body=rendered.body,
        body_html=rendered.body_html,
        action_url=action_url,
    )
    return build_email(message, SETTINGS)


def skeleton(html: str) -> list[tuple[str, tuple[tuple[str, str | None], ...]]]:
    """The layout's tags, without the paragraphs and line breaks the body's own lines make."""
    return [(tag, attrs) for tag, attrs in markup(html).tags if tag not in {"p", "br"}]


BASELINE = skeleton(email_for({"title": "T", "message": "M", "name": "N"}).html)


@EXAMPLES
@given(title=hostile, message=hostile, name=hostile)
def test_no_value_adds_markup_to_an_email(title: str, message: str, name: str) -> None:
    """R-RENDER-11, R-RENDER-18, R-RENDER-20: whatever the variables hold, the email's HTML has
    exactly the layout's tags and attributes — no element, attribute, event handler, comment or
    link comes from a value; values only add text, paragraphs and line breaks."""
    built = email_for({"title": title, "message": message, "name": name})
    html = built.html
    parsed = markup(html)
    # An empty subject has no heading; that is the layout's choice, not a value's markup.
    assert skeleton(html) == [t for t in BASELINE if built.subject or t[0] != "h1"]
    assert {tag for tag, _ in parsed.tags} <= LAYOUT_TAGS
    assert all(
        attrs == (("style", "margin:0 0 16px 0;"),) for tag, attrs in parsed.tags if tag == "p"
    )
    assert all(attrs == () for tag, attrs in parsed.tags if tag == "br")
    assert parsed.other == []


@EXAMPLES
@given(title=hostile, message=hostile, name=hostile)
def test_no_value_splits_or_adds_an_email_header(title: str, message: str, name: str) -> None:
    """R-RENDER-12, R-RENDER-19: the message on the wire has exactly Herald's headers, one
    Subject on one line, and no Bcc, Cc or second Content-Type smuggled in by a value."""
    built = email_for({"title": title, "message": message, "name": name})
    wire = built.as_mime().as_bytes(policy=email.policy.SMTP)
    header_block = wire.split(b"\r\n\r\n", 1)[0].decode("ascii")
    parsed = email.message_from_bytes(wire, policy=email.policy.default)
    assert sorted(parsed.keys()) == sorted(
        [
            "From",
            "To",
            "Subject",
            "Date",
            "Message-ID",
            "Auto-Submitted",
            "MIME-Version",
            "Content-Type",
        ]
    )
    assert parsed["To"] == "parent@example.com"
    subject = str(parsed["Subject"])
    assert "\r" not in subject and "\n" not in subject
    # RFC 2047 drops the whitespace between encoded words, so compare what is not whitespace.
    assert "".join(subject.split()) == "".join(built.subject.split())
    # Folded continuation lines start with whitespace; none starts a header of its own.
    names = [line.split(":", 1)[0] for line in header_block.split("\r\n") if line[:1] not in " \t"]
    assert len(names) == len(set(names)) == 8


@EXAMPLES
@given(title=hostile, message=hostile, name=hostile, url=action_urls)
def test_only_an_https_action_url_becomes_a_link_in_an_email(
    title: str, message: str, name: str, url: str | None
) -> None:
    """R-RENDER-21, R-RENDER-23, R-RENDER-25: the email's one link is the action URL, present
    only when it is an absolute https: URL; javascript:, data: and the rest never become an href
    (in any case or disguise), and no variable value is ever an href."""
    built = email_for({"title": title, "message": message, "name": name}, url)
    hrefs = [
        value
        for _, attrs in markup(built.html).tags
        for key, value in attrs
        if key in {"href", "src", "action", "formaction", "background"}
    ]
    if url is not None and is_safe_action_url(url) and url.lower().startswith("https://"):
        assert hrefs == [url]
        assert f"View details: {url}" in built.text
    else:
        assert hrefs == []
        assert "View details:" not in built.text
    assert all(h is not None and h.lower().startswith("https://") for h in hrefs)


TELEGRAM_BASELINE = [
    tag
    for tag, _ in markup(
        (
            render(ANNOUNCEMENT, "telegram", "en", {"title": "T", "message": "M"})
            or Rendered(None, "")
        ).body
    ).tags
]


@EXAMPLES
@given(title=hostile, message=hostile, url=action_urls)
def test_no_value_adds_markup_or_a_link_to_a_telegram_message(
    title: str, message: str, url: str | None
) -> None:
    """R-RENDER-29, R-RENDER-35, R-RENDER-39: the Telegram HTML carries exactly the template's
    tags (here one <b>), without attributes, whatever the values; the only button is an https
    action URL."""
    rendered = render(ANNOUNCEMENT, "telegram", "en", {"title": title, "message": message})
    assert rendered is not None
    payload = build_send_message(
        Message(channel="telegram", to="12345", body=rendered.body, action_url=url)
    )
    parsed = markup(payload["text"])
    assert [tag for tag, _ in parsed.tags] == TELEGRAM_BASELINE == ["b"]
    assert all(attrs == () for _, attrs in parsed.tags)
    assert parsed.other == []
    assert payload["parse_mode"] == "HTML"
    buttons = [b for row in payload.get("reply_markup", {}).get("inline_keyboard", []) for b in row]
    if url is not None and is_safe_action_url(url) and url.lower().startswith("https://"):
        assert [b["url"] for b in buttons] == [url]
    else:
        assert buttons == []


@EXAMPLES
@given(title=hostile, message=hostile)
def test_sms_text_carries_values_verbatim_and_re_reads_none(title: str, message: str) -> None:
    """R-RENDER-20, R-SECRET-15: SMS is plain text — each value appears exactly as given (no
    entity a phone would show as `&amp;`), and a value that looks like a placeholder
    (`{{secretRef}}`, `{{title}}`) is text, never interpolated again."""
    rendered = render(ANNOUNCEMENT, "sms", "en", {"title": title, "message": message})
    assert rendered is not None
    assert rendered.body == f"{title}: {message}"
    assert rendered.body_html is None


@EXAMPLES
@given(title=hostile, message=hostile, name=hostile)
def test_a_placeholder_inside_a_value_is_never_expanded(
    title: str, message: str, name: str
) -> None:
    """R-RENDER-11, R-SECRET-15: values are substituted once; a value holding `{{name}}` or
    `{{secretRef}}` is shown as those characters (escaped in HTML), never replaced."""
    values = {"title": title, "message": message, "name": name}
    rendered = render(ANNOUNCEMENT, "email", "en", values)
    assert rendered is not None
    assert rendered.body == f"Dear {name},\n\n{message}"
