"""What every SMS provider shares: the fixed error table, phone normalisation, masking, segments.

Segments are what an SMS provider bills (R-CHAN-10), and counting them is encoding-aware
(R-CHAN-11): a text written only in the GSM 03.38 alphabet travels as 7-bit septets (160 in one
segment, 153 per part once concatenated, an extension-table character costing two), anything else
as UCS-2 (70 UTF-16 code units in one segment, 67 per part, an emoji costing two). Devanagari is
UCS-2, so a plain character count over-charges Nepali text roughly twofold.
"""

from __future__ import annotations

import email.utils
import re
import unicodedata
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal, get_args

import httpx
import phonenumbers

from herald.channels.base import NOT_TAKEN_STATUSES, NotSent, ProviderOutcome

# The fixed SMS error table (R-PROVIDER-24, R-PROVIDER-25): the only codes an SMS provider puts in
# a ProviderOutcome, and so the only SMS codes that can reach last_error (R-STATE-15).
SmsErrorCode = Literal[
    "SMS_INVALID_NUMBER",  # the destination is not a valid number (ours or the provider's verdict)
    "SMS_UNSUPPORTED_DESTINATION",  # valid, but this provider cannot deliver there
    "SMS_INSUFFICIENT_BALANCE",  # Aakash "Not enough balance." (R-PROVIDER-21)
    "SMS_AUTH",  # the provider refused our credentials or account
    "SMS_REJECTED",  # the provider refused this message for another, stable reason
    "SMS_TRANSPORT",  # timeout, connection error, 429, 5xx, unreadable answer: worth a retry
    "SMS_UNKNOWN",  # an answer that fits none of the above
]
SMS_ERROR_CODES: tuple[SmsErrorCode, ...] = get_args(SmsErrorCode)

MAX_SEGMENTS = 3  # R-CHAN-10

GSM_SINGLE_SEPTETS = 160
GSM_PART_SEPTETS = 153
UCS2_SINGLE_UNITS = 70
UCS2_PART_UNITS = 67

# GSM 03.38 default alphabet (3GPP TS 23.038 §6.2.1), minus ESC, which is not a character.
GSM_BASIC = frozenset(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?"
    "¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"
)
# The extension table: each is ESC + one septet, so it costs two septets.
GSM_EXTENSION = frozenset("\f^{}\\[~]|€")

# The truncation marker, chosen per encoding so it never changes the encoding it is appended to:
# "…" is not GSM, so appending it to a GSM text would shrink every part from 153 to 67.
_MARKER_GSM = "..."
_MARKER_UCS2 = "…"

_E164 = re.compile(r"\+[1-9][0-9]{6,14}")
_MAX_PHONE_INPUT = 64
_MAX_RETRY_AFTER_SECONDS = 3600
_ZWJ = "\u200d"


# --- segments --------------------------------------------------------------------------------


def is_gsm7(text: str) -> bool:
    """True when every character of `text` is in the GSM 03.38 basic or extension table."""
    return all(ch in GSM_BASIC or ch in GSM_EXTENSION for ch in text)


def _costs(text: str, gsm: bool) -> list[int]:
    if gsm:
        return [2 if ch in GSM_EXTENSION else 1 for ch in text]
    # UTF-16 code units: a code point beyond the BMP (an emoji) is a surrogate pair.
    return [2 if ord(ch) > 0xFFFF else 1 for ch in text]


def _parts(costs: Sequence[int], single: int, per_part: int) -> int:
    total = sum(costs)
    if total == 0:
        return 0
    if total <= single:
        return 1
    # Concatenated: an escape pair or a surrogate pair is never split across two parts, so a
    # part may carry one unit less than its capacity; count the parts the way a sender packs them.
    parts, used = 1, 0
    for cost in costs:
        if used + cost > per_part:
            parts, used = parts + 1, 0
        used += cost
    return parts


def segments(text: str) -> int:
    """How many SMS segments `text` is billed as (R-CHAN-11). An empty text is zero segments."""
    if is_gsm7(text):
        return _parts(_costs(text, True), GSM_SINGLE_SEPTETS, GSM_PART_SEPTETS)
    return _parts(_costs(text, False), UCS2_SINGLE_UNITS, UCS2_PART_UNITS)


def _continues_previous(ch: str) -> bool:
    # A combining mark (a Devanagari vowel sign or virama), a variation selector or a ZWJ belongs
    # to the character before it; cutting just before one leaves a broken cluster.
    return (
        unicodedata.category(ch) in {"Mn", "Mc", "Me"} or ch == _ZWJ or "\ufe00" <= ch <= "\ufe0f"
    )


def truncate_to_segments(text: str, max_segments: int = MAX_SEGMENTS) -> str:
    """`text` cut so that it is billed as at most `max_segments` segments (R-CHAN-10).

    A text that already fits is returned unchanged. A longer one is cut on a character boundary
    (never inside a surrogate pair or a GSM escape pair, and where possible not inside a
    combining cluster), trailing whitespace is dropped, and a marker is appended so the reader
    knows the text was cut: "…" for UCS-2 text, "..." for GSM text (so the marker never turns a
    GSM text into UCS-2). The marker is budgeted for: the result always fits.
    """
    if max_segments < 1:
        raise ValueError("max_segments must be at least 1")
    if segments(text) <= max_segments:
        return text
    gsm = is_gsm7(text)
    marker = _MARKER_GSM if gsm else _MARKER_UCS2
    # Every character costs at least one unit, so no longer prefix can fit: this bounds the work.
    if gsm:
        bound = max(GSM_SINGLE_SEPTETS, max_segments * GSM_PART_SEPTETS)
    else:
        bound = max(UCS2_SINGLE_UNITS, max_segments * UCS2_PART_UNITS)
    candidate = text[:bound]

    def fits(length: int) -> bool:
        return segments(candidate[:length] + marker) <= max_segments

    low, high = 0, len(candidate)  # fits(0): the marker alone is one segment
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    cut = low
    while (
        cut > 0
        and cut < len(candidate)
        and (_continues_previous(candidate[cut]) or candidate[cut - 1] == _ZWJ)
    ):
        cut -= 1
    if cut == 0:  # a text that is one endless cluster: cut where it fits after all
        cut = low
    result = candidate[:cut].rstrip() + marker
    # fits(low) was checked; keep the tidier cut only if it is checked too.
    return result if segments(result) <= max_segments else candidate[:low] + marker


# --- phone numbers ---------------------------------------------------------------------------


def normalize_phone(raw: str | None, default_region: str = "NP") -> str | None:
    """`raw` as an E.164 number (`+9779812345678`), or None when it is not a valid number.

    A national number is read in `default_region` (HERALD_SMS_DEFAULT_REGION). None means the
    delivery has no destination (skipped_no_destination, R-CHAN-9, R-CHAN-20), never a failure.
    """
    if raw is None:
        return None
    raw = raw.strip()
    if not raw or len(raw) > _MAX_PHONE_INPUT:
        return None
    try:
        number = phonenumbers.parse(raw, default_region.upper() or None)
    except phonenumbers.NumberParseException:
        return None
    if not phonenumbers.is_valid_number(number):
        return None
    return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)


def is_e164(number: str) -> bool:
    """True for a syntactically E.164 number: `+`, a non-zero digit, 7 to 15 digits in all."""
    return _E164.fullmatch(number) is not None


def mask_phone(number: str) -> str:
    """`+9779812345678` → `+977●●●●●●5678`: country code and last four digits kept, for logs."""
    digits = re.sub(r"[^0-9]", "", number)
    try:
        country = str(phonenumbers.parse(number, None).country_code)
    except phonenumbers.NumberParseException:
        country = ""
    if not country or not number.strip().startswith("+") or not digits.startswith(country):
        return "●" * 4
    rest = digits[len(country) :]
    if len(rest) <= 4:
        return f"+{country}" + "●" * len(rest)
    return f"+{country}" + "●" * (len(rest) - 4) + rest[-4:]


# --- outcome helpers shared by the SMS providers ---------------------------------------------


def sms_failure(
    code: SmsErrorCode,
    *,
    retryable: bool,
    detail: str | None = None,
    retry_after_seconds: int | None = None,
    destination_undeliverable: bool = False,
    not_sent: NotSent | None = None,
) -> ProviderOutcome:
    """A failed outcome whose code is type-checked against the SMS table (R-PROVIDER-25)."""
    return ProviderOutcome.failure(
        code,
        retryable=retryable,
        detail=detail,
        retry_after_seconds=retry_after_seconds,
        destination_undeliverable=destination_undeliverable,
        not_sent=not_sent,
    )


def throttled_or_unavailable(response: httpx.Response, detail: str) -> ProviderOutcome | None:
    """SMS_TRANSPORT, retried, for a 429 (after its Retry-After), a 408 or a 5xx; None for any
    other status, which the provider sorts by its own codes. Only 429 and 503 say the provider
    took nothing (NOT_TAKEN_STATUSES), so only they may fail over."""
    status = response.status_code
    if status == 429:
        return sms_failure(
            "SMS_TRANSPORT",
            retryable=True,
            detail=detail,
            retry_after_seconds=parse_retry_after(response.headers.get("Retry-After")),
            not_sent="provider",
        )
    if status >= 500 or status == 408:
        return sms_failure(
            "SMS_TRANSPORT",
            retryable=True,
            detail=detail,
            not_sent="provider" if status in NOT_TAKEN_STATUSES else None,
        )
    return None


def http_detail(status: int) -> str:
    """The allowlisted detail for an HTTP status: `http_503`."""
    return f"http_{int(status)}"


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> int | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), bounded to an hour."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = int(value)
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = int((when - (now or datetime.now(UTC))).total_seconds())
    return max(0, min(seconds, _MAX_RETRY_AFTER_SECONDS))
