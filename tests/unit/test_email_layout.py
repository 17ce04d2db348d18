"""The one email build shared by every email provider: layout, escaping, CTA, Subject, masking."""

from __future__ import annotations

import email
import email.policy
from email.message import EmailMessage

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from herald.channels import email as herald_email
from herald.channels.base import Message
from herald.config import Settings
from herald.kinds.sample import ANNOUNCEMENT, OTP
from herald.rendering.render import render

SETTINGS = Settings(email_from="School <no-reply@school.example>")


def _message(**overrides: object) -> Message:
    fields: dict[str, object] = {
        "channel": "email",
        "to": "jane@example.com",
        "title": "Sports day moved",
        "body": "Dear Jane,\n\nIt is now on Friday.",
        "body_html": "Dear Jane,\n\nIt is now on Friday.",
    }
    fields.update(overrides)
    return Message(**fields)  # type: ignore[arg-type]


def _rendered_message(values: dict[str, str], **overrides: object) -> Message:
    rendered = render(ANNOUNCEMENT, "email", "en", values)
    assert rendered is not None
    return _message(
        title=rendered.title, body=rendered.body, body_html=rendered.body_html, **overrides
    )


# --- mask_email -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "masked"),
    [
        ("jane@example.com", "j●●●@example.com"),
        ("j@example.com", "j●●●@example.com"),  # a one-character local part is masked too
        ("Jane.Doe@Example.COM", "j●●●@example.com"),
        ("  jane@example.com ", "j●●●@example.com"),
        ('"a@b"@example.com', '"●●●@example.com'),  # the last @ separates the domain
        ("jane", "●●●"),  # no @: nothing of the value is shown
        ("@example.com", "●●●"),
        ("jane@", "●●●"),
        ("", "●●●"),
        (None, "●●●"),
    ],
)
def test_mask_email(address: str | None, masked: str) -> None:
    """R-PROVIDER-12: first character kept, the local part masked, the domain kept."""
    assert herald_email.mask_email(address) == masked


def test_mask_never_shows_the_local_part_length() -> None:
    """R-PROVIDER-12: the mask is the same width for every local part."""
    assert herald_email.mask_email("a@x.org") == herald_email.mask_email("abcdefghijkl@x.org")


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_mask_keeps_exactly_the_printable_non_space_characters_of_the_domain(domain: str) -> None:
    """R-PROVIDER-12: whatever the domain holds (Unicode spaces, controls, line breaks), the mask
    shows only its printable, non-space characters; the usual domain's fast path may not differ."""
    assume("@" not in domain)  # the last @ separates the domain: test_mask_email
    address = f"jane@{domain}"
    lowered = address.strip().lower().rpartition("@")[2]
    kept = "".join(ch for ch in lowered if ch.isprintable() and not ch.isspace())
    expected = f"j●●●@{kept[: herald_email.MAX_ADDRESS_LENGTH]}" if kept else "●●●"
    assert herald_email.mask_email(address) == expected


# --- error table ------------------------------------------------------------------------------


def test_error_table_is_fixed() -> None:
    """R-PROVIDER-11: exactly the four email error codes."""
    assert herald_email.EMAIL_ERROR_CODES == (
        "EMAIL_NO_ADDRESS",
        "EMAIL_REJECTED",
        "EMAIL_TRANSPORT",
        "EMAIL_UNKNOWN",
    )


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("validation_error", "EMAIL_REJECTED:validation_error"),
        ("Validation_Error", "EMAIL_REJECTED:validation_error"),
        ("code 123456 for jane@example.com", "EMAIL_REJECTED:http_422"),
        ("x" * 41, "EMAIL_REJECTED:http_422"),
        ("", "EMAIL_REJECTED:http_422"),
        (None, "EMAIL_REJECTED:http_422"),
    ],
)
def test_rejection_suffix_is_an_allowlisted_token(name: str | None, code: str) -> None:
    """R-PROVIDER-7, R-PROVIDER-24, R-PROVIDER-25: only a short [a-z0-9_] name becomes the
    suffix; anything else falls back to a status we wrote ourselves."""
    outcome = herald_email.rejected(name, fallback="http_422")
    assert outcome.outcome == "failed"
    assert outcome.retryable is False
    assert outcome.error_code == code
    assert outcome.error_code.split(":", 1)[0] in herald_email.EMAIL_ERROR_CODES


@pytest.mark.parametrize(
    ("to", "detail"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("jane", "malformed"),
        ("jane@", "malformed"),
        ("@example.com", "malformed"),
        ("jane@example.com\r\nBcc: x@evil.example", "malformed"),
        ("jane@example.com\nBcc: x@evil.example", "malformed"),
        ("Jane <jane@example.com>", "malformed"),
        ("a@b@example.com", "malformed"),
        ("j" * 250 + "@example.com", "malformed"),
    ],
)
def test_unusable_address_is_no_address(to: str, detail: str) -> None:
    """R-PROVIDER-11: no usable address is a non-retryable EMAIL_NO_ADDRESS; an address that
    would split the To header is never built into a message (R-RENDER-12)."""
    outcome = herald_email.address_problem(_message(to=to))
    assert outcome is not None
    assert (outcome.outcome, outcome.retryable, outcome.error_code, outcome.detail) == (
        "failed",
        False,
        "EMAIL_NO_ADDRESS",
        detail,
    )


def test_usable_address_has_no_problem() -> None:
    assert herald_email.address_problem(_message(to="jane.doe+school@example.com")) is None


# --- build_email ------------------------------------------------------------------------------


def test_build_has_from_to_subject_and_both_parts() -> None:
    """R-PROVIDER-1: the from-address, Subject and both parts come from the one build."""
    built = herald_email.build_email(_message(), SETTINGS)
    mime = built.as_mime()
    assert mime["From"] == "School <no-reply@school.example>"
    assert built.envelope_from == "no-reply@school.example"
    assert mime["To"] == "jane@example.com"
    assert mime["Subject"] == "Sports day moved"
    assert mime["Message-ID"] == built.message_id
    assert built.message_id.endswith("@school.example>")
    assert mime.get_content_type() == "multipart/alternative"
    plain = mime.get_body(("plain",))
    html = mime.get_body(("html",))
    assert plain is not None and html is not None
    assert isinstance(plain, EmailMessage) and isinstance(html, EmailMessage)
    assert plain.get_content().strip() == "Dear Jane,\n\nIt is now on Friday."
    assert "It is now on Friday." in html.get_content()


def test_build_round_trips_through_bytes() -> None:
    """The MIME the SMTP provider sends parses back to the same parts (non-ASCII included)."""
    message = _message(
        title="तपाईंको साइन-इन कोड",
        body="प्रिय Sita,\n\nतपाईंको कोड 123456 हो",
        body_html="प्रिय Sita,\n\nतपाईंको कोड 123456 हो",
    )
    raw = herald_email.build_email(message, SETTINGS).as_mime().as_bytes()
    parsed = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(parsed, EmailMessage)
    assert parsed["Subject"] == "तपाईंको साइन-इन कोड"
    plain = parsed.get_body(("plain",))
    assert isinstance(plain, EmailMessage)
    assert "तपाईंको कोड 123456 हो" in plain.get_content()


@pytest.mark.parametrize(
    "title",
    [
        # Found by test_render_properties: Python's folder cut the encoded word it was
        # extending across a fold and encoded its tail again (`…D7` + `=?utf-8?b?Q29BPT0/…`).
        '<script>alert(1)</script><script>alert(1)</script><img src=x onerror="alert(1)">'
        "<script>alert(1)</script>\xa0 ¡",
        "Réunion des parents " * 8,
        "A" * 70 + " é " + "B" * 70,
        "=?utf-8?b?QQ==?= is shown as written",  # ASCII that looks like an encoded word
    ],
)
@pytest.mark.parametrize("policy", [email.policy.SMTP, email.policy.SMTPUTF8])
def test_subject_reaches_the_wire_exactly_as_built(title: str, policy: email.policy.Policy) -> None:
    """The Subject the SMTP transport writes (aiosmtplib flattens with the SMTP policy, or
    SMTPUTF8 when the server offers it) decodes back to exactly the built subject: no encoded
    word cut by a fold, nothing decoded that was text, and no line longer than 78."""
    built = herald_email.build_email(_message(title=title), SETTINGS)
    raw = built.as_mime().as_bytes(policy=policy)
    header_block = raw.split(b"\r\n\r\n", 1)[0]
    assert all(len(line) <= 78 for line in header_block.split(b"\r\n"))
    parsed = email.message_from_bytes(raw, policy=email.policy.default)
    assert parsed["Subject"] == built.subject


def test_values_arrive_escaped_and_are_never_unescaped() -> None:
    """R-RENDER-11, R-RENDER-20: a value rendered into the HTML part stays escaped through the
    layout; the layout only adds tags."""
    message = _rendered_message(
        {"title": "Trip", "message": "<script>alert(1)</script> & \"quotes\" 'too'", "name": "Sita"}
    )
    html = herald_email.build_email(message, SETTINGS).html
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quotes&quot; &#x27;too&#x27;" in html


def test_already_escaped_entities_are_not_unescaped_or_escaped_twice() -> None:
    """R-RENDER-11: the layout neither unescapes (`&lt;` stays) nor re-escapes the body."""
    html = herald_email.build_email(
        _message(body_html="a &lt;b&gt; c &amp; d", body="a <b> c & d"), SETTINGS
    ).html
    assert "a &lt;b&gt; c &amp; d" in html
    assert "&amp;lt;" not in html


def test_subject_is_escaped_in_the_html_heading() -> None:
    """R-RENDER-11: the Subject is not HTML-escaped by the renderer, so the layout escapes it
    where it appears in HTML (the heading and <title>)."""
    html = herald_email.build_email(_message(title="<img src=x onerror=alert(1)>"), SETTINGS).html
    assert "<img" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html


def test_newlines_become_paragraphs_and_breaks() -> None:
    """Blank lines separate paragraphs; a single newline is a line break."""
    html = herald_email.build_email(
        _message(body_html="Dear Jane,\r\n\r\nLine one\nLine two\n\n\nLast"), SETTINGS
    ).html
    assert '<p style="margin:0 0 16px 0;">Dear Jane,</p>' in html
    assert '<p style="margin:0 0 16px 0;">Line one<br>\nLine two</p>' in html
    assert '<p style="margin:0 0 16px 0;">Last</p>' in html


def test_missing_html_body_falls_back_to_the_escaped_plain_body() -> None:
    """R-RENDER-11: without a rendered HTML body the plain body is escaped before it is used."""
    html = herald_email.build_email(_message(body="Hi <b>there</b>", body_html=None), SETTINGS).html
    assert "Hi &lt;b&gt;there&lt;/b&gt;" in html
    assert "<b>there" not in html


def test_preheader_is_the_first_line_escaped() -> None:
    """R-PROVIDER-1: the preview text is the first non-blank line of the body, escaped."""
    built = herald_email.build_email(
        _message(body="\n  <Hello> & welcome\nsecond line", body_html="x"), SETTINGS
    )
    assert (
        '<div style="display:none;max-height:0;overflow:hidden;opacity:0;mso-hide:all;">'
        "&lt;Hello&gt; &amp; welcome</div>" in built.html
    )
    assert "second line" not in built.html


def test_long_preheader_is_shortened_before_escaping() -> None:
    long_line = "&" * 500
    preheader = herald_email.preheader(long_line)
    assert preheader.endswith("…")
    assert preheader.count("&amp;") == herald_email.MAX_PREHEADER - 1


@pytest.mark.parametrize(
    "title",
    [
        "Hello\r\nBcc: victim@example.com",
        "Hello\nBcc: victim@example.com",
        "Hello\rBcc: victim@example.com",
        "Hello\u2028Bcc: victim@example.com",
        "Hello\x00\x1bBcc: victim@example.com",
    ],
)
def test_subject_never_carries_a_line_break(title: str) -> None:
    """R-RENDER-12: whatever reaches the build, the Subject header is one line."""
    built = herald_email.build_email(_message(title=title), SETTINGS)
    assert not any(ch in built.subject for ch in "\r\n\u2028\x00\x1b")
    raw = built.as_mime().as_bytes()
    headers = raw.split(b"\n\n", 1)[0].replace(b"\r\n", b"\n")
    assert not any(line.lower().startswith(b"bcc:") for line in headers.split(b"\n"))


def test_subject_from_renderer_with_a_crlf_value() -> None:
    """R-RENDER-12: a CR/LF inside a value never splits the Subject header."""
    message = _rendered_message(
        {"title": "Trip\r\nBcc: x@evil.example", "message": "m", "name": "S"}
    )
    mime = herald_email.build_email(message, SETTINGS).as_mime()
    assert mime["Subject"] == "Trip Bcc: x@evil.example"
    assert mime["Bcc"] is None


def test_cta_for_a_safe_https_url() -> None:
    """R-RENDER-25: a safe URL becomes a button whose href is HTML-escaped; the plain part
    carries the link too."""
    built = herald_email.build_email(
        _message(action_url='https://school.example/a?x=1&y="2"'), SETTINGS
    )
    assert 'href="https://school.example/a?x=1&amp;y=&quot;2&quot;"' in built.html
    assert herald_email.CTA_LABEL in built.html
    assert built.action_url == 'https://school.example/a?x=1&y="2"'
    assert built.text.endswith(f'{herald_email.CTA_LABEL}: https://school.example/a?x=1&y="2"\n')


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "JavaScript:alert(document.cookie)",
        "data:text/html,<script>alert(1)</script>",
        "http://school.example/plain-http",
        "//evil.example/x",
        "https://evil.example/\u202ebad",
        "/app/relative/path",  # safe in the app, meaningless in a mail client
    ],
)
def test_no_cta_for_an_unsafe_url_and_the_email_is_still_built(url: str) -> None:
    """R-RENDER-25: an unsafe action URL is dropped at render time: no button, no link in
    either part, and the email is still built (the send goes ahead)."""
    built = herald_email.build_email(_message(action_url=url), SETTINGS)
    assert built.action_url is None
    assert "<a " not in built.html
    assert herald_email.CTA_LABEL not in built.html
    assert herald_email.CTA_LABEL not in built.text
    assert "It is now on Friday." in built.html


def test_no_cta_without_an_action_url() -> None:
    built = herald_email.build_email(_message(action_url=None), SETTINGS)
    assert "<a " not in built.html


def test_otp_email_build_carries_the_code_only_in_the_parts() -> None:
    """The OTP kind renders into the two parts (the secret is part of the content, never of a
    header other than what the template puts in the Subject)."""
    rendered = render(OTP, "email", "en", {"name": "Sita", "code": "493817"})
    assert rendered is not None
    built = herald_email.build_email(
        _message(title=rendered.title, body=rendered.body, body_html=rendered.body_html), SETTINGS
    )
    assert "493817" in built.text and "493817" in built.html
    assert "493817" not in built.subject
