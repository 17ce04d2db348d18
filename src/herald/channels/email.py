"""How an email is built, once, for every email provider (R-PROVIDER-1, R-OPMAIL-4).

SMTP and Resend both call build_email(): the from-address, the Subject, the preview text and the
HTML layout are decided here and nowhere else, so swapping the provider never changes what a
recipient sees. This module also owns the email error table (R-PROVIDER-11), the address mask
every log line uses (R-PROVIDER-10, R-PROVIDER-12) and the outcome helpers both providers share.
"""

from __future__ import annotations

import logging
import re
import traceback
from dataclasses import dataclass
from email.header import Header
from email.message import EmailMessage
from email.utils import formatdate, make_msgid, parseaddr
from typing import Final, Literal, get_args

from herald.channels.base import Message, NotSent, ProviderOutcome
from herald.config import Settings
from herald.rendering.escaping import escape_header, escape_html
from herald.rendering.urls import safe_action_url_or_none

EmailErrorCode = Literal["EMAIL_NO_ADDRESS", "EMAIL_REJECTED", "EMAIL_TRANSPORT", "EMAIL_UNKNOWN"]
# R-PROVIDER-11 / R-PROVIDER-25: the only codes an email send can leave in last_error.
# EMAIL_REJECTED is the one that carries a suffix: the provider's error NAME, allowlisted.
EMAIL_ERROR_CODES: Final[tuple[str, ...]] = get_args(EmailErrorCode)

MASK: Final = "●●●"
CTA_LABEL: Final = "View details"
MAX_ADDRESS_LENGTH: Final = 254  # RFC 5321 path limit
MAX_PREHEADER: Final = 140
# An error name becomes part of error_code only if it is a short lowercase token: provider text
# (which can echo the address or an OTP) can never pass this (R-PROVIDER-24, R-STATE-15).
_REJECTION_NAME = re.compile(r"[a-z0-9_]{1,40}")
# Line breaks escape_header does not cover, and the rest of C0/C1: nothing of that in a header.
_MSGID_SAFE = re.compile(r"[A-Za-z0-9._-]{1,200}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n\s*")
_SURROUNDING_NEWLINES = re.compile(r"^\s*\n|\n\s*$")


@dataclass(frozen=True)
class BuiltEmail:
    """One email, built once, in the shape both transports need.

    SMTP sends `as_mime()`; Resend posts the same `sender`/`to`/`subject`/`text`/`html` as JSON.
    """

    sender: str  # the From header, e.g. `Herald <no-reply@example.com>`
    envelope_from: str  # the bare address of `sender` (SMTP MAIL FROM)
    to: str
    subject: str
    text: str
    html: str
    message_id: str  # `<…@domain>`, generated here so SMTP can report it as the provider id
    action_url: str | None  # the CTA target, or None when there is no button

    def as_mime(self) -> EmailMessage:
        """multipart/alternative: the plain text first, the HTML last (the preferred part)."""
        mime = EmailMessage()
        mime["From"] = self.sender
        mime["To"] = self.to
        if self.subject.isascii() and "=?" not in self.subject:
            mime["Subject"] = self.subject
        else:
            # Encoded words made here and stored as they are: Python's own header folder
            # (3.11-3.13, cpython gh-144156) can cut an encoded word it is extending across a
            # fold and encode its tail again, so a subject with a non-ASCII character late in a
            # long line reached the recipient as `=?utf-8?b?…` text. email.header folds whole
            # encoded words of at most 78 characters a line, which the generator writes as
            # they are. ASCII holding `=?` goes this way too, so it is shown literally rather
            # than decoded as an encoded word by the mail client.
            encoded = Header(self.subject, "utf-8", header_name="Subject").encode(linesep="\n")
            mime.set_raw("Subject", encoded)
        mime["Date"] = formatdate(usegmt=True)
        mime["Message-ID"] = self.message_id
        # Asks auto-responders (out-of-office) not to answer a notification (RFC 3834).
        mime["Auto-Submitted"] = "auto-generated"
        mime.set_content(self.text)
        mime.add_alternative(self.html, subtype="html")
        return mime


def build_email(message: Message, settings: Settings) -> BuiltEmail:
    """Build the email for `message`. The caller has checked the address (address_problem)."""
    sender = header_safe(settings.email_from)
    envelope_from = parseaddr(sender)[1]
    subject = header_safe(message.title or "")
    # R-RENDER-25: checked again here; an unsafe URL means no button, and the send goes ahead.
    # An app-relative path passes the check but means nothing in a mail client (there is no page
    # to be relative to), so only an absolute https: URL becomes a button.
    action_url = safe_action_url_or_none(message.action_url)
    if action_url is not None and action_url.startswith("/"):
        action_url = None
    text = message.body
    if action_url is not None:
        text = f"{text.rstrip()}\n\n{CTA_LABEL}: {action_url}\n"
    html = render_html(
        subject=subject,
        body_html=message.body_html if message.body_html is not None else escape_html(message.body),
        preheader=preheader(message.body),
        action_url=action_url,
    )
    return BuiltEmail(
        sender=sender,
        envelope_from=envelope_from,
        to=message.to.strip(),
        subject=subject,
        text=text,
        html=html,
        # Stable per delivery: a send repeated after a crash carries the same Message-ID, so the
        # receiving side (and our own tests) can recognise the duplicate.
        message_id=(
            f"<{message.idempotency_key}@{_domain_of(envelope_from)}>"
            if message.idempotency_key and _MSGID_SAFE.fullmatch(message.idempotency_key)
            else make_msgid(domain=_domain_of(envelope_from))
        ),
        action_url=action_url,
    )


def header_safe(value: str) -> str:
    """A value that cannot split a header: line breaks collapsed (R-RENDER-12), controls gone."""
    return _CONTROL.sub(" ", escape_header(value)).strip()


def preheader(body: str) -> str:
    """The preview text mail clients show after the subject: the first non-blank line of the
    plain body, shortened, then HTML-escaped (escaped last, so no entity is cut in half)."""
    first = next((line.strip() for line in body.splitlines() if line.strip()), "")
    if len(first) > MAX_PREHEADER:
        first = first[: MAX_PREHEADER - 1].rstrip() + "…"
    return escape_html(first)


def paragraphs(body_html: str) -> str:
    """Blank-line separated blocks become <p>, single newlines <br>. Nothing is unescaped: the
    renderer has already escaped every value (R-RENDER-11), and this only adds tags."""
    normalised = body_html.replace("\r\n", "\n").replace("\r", "\n")
    normalised = _SURROUNDING_NEWLINES.sub("", normalised)
    blocks = [block.strip() for block in _PARAGRAPH_BREAK.split(normalised) if block.strip()]
    html_blocks = []
    for block in blocks:
        lines = "<br>\n".join(line.strip() for line in block.split("\n"))
        html_blocks.append(f'<p style="margin:0 0 16px 0;">{lines}</p>')
    return "\n".join(html_blocks)


def render_html(*, subject: str, body_html: str, preheader: str, action_url: str | None) -> str:
    """The layout: a hidden preheader, one centred white card, the subject as its heading, the
    body, and a button when there is a safe action URL (its href HTML-escaped, R-RENDER-25)."""
    heading = (
        '<h1 style="margin:0 0 24px 0;font-size:20px;line-height:1.3;font-weight:600;">'
        f"{escape_html(subject)}</h1>\n"
        if subject
        else ""
    )
    button = ""
    if action_url is not None:
        button = (
            '<table role="presentation" cellpadding="0" cellspacing="0" border="0" '
            'style="margin:8px 0 0 0;"><tr>'
            '<td style="border-radius:6px;background-color:#2563eb;">'
            f'<a href="{escape_html(action_url)}" target="_blank" rel="noopener" '
            'style="display:inline-block;padding:12px 20px;font-size:15px;font-weight:600;'
            f'color:#ffffff;text-decoration:none;border-radius:6px;">{CTA_LABEL}</a>'
            "</td></tr></table>\n"
        )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape_html(subject)}</title>\n</head>\n"
        '<body style="margin:0;padding:0;background-color:#f4f4f5;">\n'
        '<div style="display:none;max-height:0;overflow:hidden;opacity:0;mso-hide:all;">'
        f"{preheader}</div>\n"
        '<table role="presentation" width="100%" cellpadding="0" cellspacing="0" border="0" '
        'style="background-color:#f4f4f5;"><tr><td align="center" style="padding:24px 12px;">\n'
        '<table role="presentation" width="100%" cellpadding="0" cellspacing="0" border="0" '
        'style="max-width:560px;background-color:#ffffff;border-radius:8px;"><tr>'
        "<td style=\"padding:32px;font-family:-apple-system,BlinkMacSystemFont,'Segoe UI',"
        'Roboto,Helvetica,Arial,sans-serif;font-size:16px;line-height:1.5;color:#18181b;">\n'
        f"{heading}{paragraphs(body_html)}\n{button}"
        "</td></tr></table>\n"
        "</td></tr></table>\n"
        "</body>\n</html>\n"
    )


def mask_email(address: str | None) -> str:
    """`jane@example.com` → `j●●●@example.com` (R-PROVIDER-12).

    Always three dots, so the mask does not tell the local part's length; lowercased, since case
    carries nothing and one person's address should always mask the same way. Without a usable
    `@` nothing of the value is shown.
    """
    local, at, domain = (address or "").strip().lower().rpartition("@")
    # str.isprintable() is False for every whitespace character but the ASCII space, so a
    # printable domain without a space keeps every character: the usual address skips the
    # character-by-character filter (3 % of a worker's CPU per email, in py-spy).
    if not domain.isprintable() or " " in domain:
        domain = "".join(ch for ch in domain if ch.isprintable() and not ch.isspace())
    if not at or not local or not domain:
        return MASK
    first = local[0] if local[0].isprintable() and not local[0].isspace() else "●"
    return f"{first}{MASK}@{domain[:MAX_ADDRESS_LENGTH]}"


def address_problem(message: Message) -> ProviderOutcome | None:
    """EMAIL_NO_ADDRESS when `message.to` is not something an email can go to; else None.

    Non-retryable: a retry would find the same address. An address with a line break or a
    control character would also split the To header, so it is refused here, before any build.
    """
    to = message.to.strip()
    if not to:
        return ProviderOutcome.failure("EMAIL_NO_ADDRESS", retryable=False, detail="empty")
    local, at, domain = to.rpartition("@")
    if (
        len(to) > MAX_ADDRESS_LENGTH
        or not at
        or to.count("@") != 1
        or not local
        or not domain
        or any(ch.isspace() or not ch.isprintable() for ch in to)
        or any(ch in '<>(),;"' for ch in to)
    ):
        return ProviderOutcome.failure("EMAIL_NO_ADDRESS", retryable=False, detail="malformed")
    return None


def rejected(
    name: str | None,
    *,
    fallback: str,
    detail: str | None = None,
    status: str | None = None,
    not_sent: NotSent | None = None,
) -> ProviderOutcome:
    """The provider decided against this message: non-retryable (R-PROVIDER-7), coded
    `EMAIL_REJECTED:<name>` when the provider's error name is an allowlisted token, else
    `EMAIL_REJECTED:<fallback>` (an HTTP or SMTP status we wrote ourselves)."""
    suffix = allowlisted_name(name) or fallback
    return ProviderOutcome.failure(
        f"EMAIL_REJECTED:{suffix}", retryable=False, detail=detail, status=status, not_sent=not_sent
    )


def allowlisted_name(name: object) -> str | None:
    """A provider's error name if it is a short `[a-z0-9_]` token (case folded), else None."""
    if not isinstance(name, str):
        return None
    token = name.strip().lower()
    return token if _REJECTION_NAME.fullmatch(token) else None


def transport_failure(
    *,
    detail: str | None = None,
    status: str | None = None,
    retry_after_seconds: int | None = None,
    not_sent: NotSent | None = None,
) -> ProviderOutcome:
    """The message never got a decision (network, TLS, timeout, 4xx/5xx server trouble):
    retryable EMAIL_TRANSPORT (R-PROVIDER-8). `not_sent` when it certainly was not taken."""
    return ProviderOutcome.failure(
        "EMAIL_TRANSPORT",
        retryable=True,
        detail=detail,
        status=status,
        retry_after_seconds=retry_after_seconds,
        not_sent=not_sent,
    )


def unknown_failure(
    logger: logging.Logger, provider: str, message: Message, exc: BaseException
) -> ProviderOutcome:
    """An exception nobody mapped: a defect, so it is not retried (it would fail the same way),
    and it is logged with its class and stack frames but not its text, which may quote a header
    value built from the message."""
    logger.error(
        "email via %s to %s raised %s; recorded as EMAIL_UNKNOWN\n%s",
        provider,
        mask_email(message.to),
        type(exc).__name__,
        "".join(traceback.format_tb(exc.__traceback__)),
    )
    return ProviderOutcome.failure("EMAIL_UNKNOWN", retryable=False, detail=type(exc).__name__)


def scrub(text: str, message: Message, limit: int = 200) -> str:
    """An exception text safe for a log: the destination masked, bounded. Only for texts that
    come from our own side (socket, DNS, TLS, timeout errors), never a provider's answer."""
    to = message.to.strip()
    if to:
        text = text.replace(to, mask_email(to))
    return _CONTROL.sub(" ", text)[:limit]


def _domain_of(address: str) -> str:
    domain = address.rpartition("@")[2]
    return domain if re.fullmatch(r"[A-Za-z0-9.-]{1,253}", domain) else "herald.invalid"
