"""SMS text: encoding-aware segments, truncation, phone normalisation and masking."""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.channels import sms
from herald.channels.sms import (
    SMS_ERROR_CODES,
    is_gsm7,
    mask_phone,
    normalize_phone,
    parse_retry_after,
    segments,
    truncate_to_segments,
)

DEVANAGARI = "न"
EMOJI = "😀"

# Characters chosen to sit on every boundary: GSM basic, GSM extension (2 septets), non-GSM BMP
# (UCS-2), Devanagari with a combining vowel sign, an emoji (a surrogate pair), ZWJ, spaces.
_TRICKY = st.sampled_from(["a", " ", "{", "€", "\\", "é", "ç", "न", "ि", "्", EMOJI, "\u200d", "\n"])
tricky_text = st.lists(_TRICKY, max_size=700).map("".join)


def _utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


# --- segments ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 1),
        ("a" * 160, 1),
        ("a" * 161, 2),
        ("a" * 306, 2),
        ("a" * 307, 3),
        ("a" * 459, 3),
        ("a" * 460, 4),
    ],
)
def test_gsm_segments(text: str, expected: int) -> None:
    """R-CHAN-11: GSM-7 text is 160 septets in one segment, 153 per concatenated part."""
    assert is_gsm7(text)
    assert segments(text) == expected


def test_gsm_extension_characters_cost_two_septets() -> None:
    """R-CHAN-11: `{}[]~\\|^€` and form feed are ESC + septet, two septets each."""
    for ch in "{}[]~\\|^€\f":
        assert is_gsm7(ch)
        assert segments(ch * 80) == 1  # 160 septets
        assert segments(ch * 81) == 2  # 162 septets
    assert segments("a" * 159 + "€") == 2  # 161 septets


def test_gsm_escape_pair_is_never_split_across_parts() -> None:
    """R-CHAN-11: 306 septets fit two parts only if no escape pair straddles the boundary."""
    straddling = "a" * 152 + "{" + "a" * 152  # 152 | 2+151 | 1
    assert segments(straddling) == 3
    assert segments("a" * 153 + "{" + "a" * 151) == 2  # 153 | 2+151


def test_gsm_basic_table_is_gsm7_and_a_foreign_letter_is_not() -> None:
    """R-CHAN-11: the GSM 03.38 basic set stays GSM-7; one non-GSM letter makes the text UCS-2."""
    assert is_gsm7("@£$¥èéùìòÇØøÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ!\"#¤%&'()*+,-./:;<=>?¡ÄÖÑÜ§¿äöñüà")
    assert not is_gsm7("\x1b")  # ESC is not a character of its own
    latin = "a" * 100
    assert segments(latin) == 1
    assert segments(latin + "ç") == 2  # 101 UCS-2 units: lower-case ç is not GSM


@pytest.mark.parametrize(
    ("count", "expected"), [(1, 1), (70, 1), (71, 2), (134, 2), (135, 3), (201, 3), (202, 4)]
)
def test_devanagari_is_ucs2_at_70_and_67(count: int, expected: int) -> None:
    """R-CHAN-11: Devanagari is UCS-2: 70 characters in one segment, 67 per concatenated part."""
    text = DEVANAGARI * count
    assert not is_gsm7(text)
    assert segments(text) == expected


def test_nepali_sentence_is_not_counted_as_160_characters() -> None:
    """R-CHAN-11: a 100-character Nepali text is two UCS-2 segments, where a character count
    against the GSM limit would call it one — the count must be encoding-aware."""
    text = ("तपाईंको छोराको आज विद्यालयमा उपस्थिति दर्ता भयो। " * 3)[:100]
    assert len(text) == 100
    assert segments(text) == 2
    assert segments("a" * 100) == 1


def test_emoji_counts_two_utf16_units_and_is_never_split() -> None:
    """R-CHAN-11: an emoji is a surrogate pair (2 units), and a pair never straddles two parts."""
    assert segments(EMOJI * 35) == 1  # 70 units
    assert segments(EMOJI * 36) == 2  # 72 units
    assert segments(EMOJI * 99) == 3  # 33 pairs a part: 66 units each
    assert segments(EMOJI * 100) == 4  # 200 units, yet a 4th part: pairs are never split
    assert segments(DEVANAGARI * 66 + EMOJI + DEVANAGARI * 66) == 3  # 66 | 2+65 | 1
    assert segments(DEVANAGARI * 67 + EMOJI + DEVANAGARI * 65) == 2  # 67 | 2+65


# --- truncation ------------------------------------------------------------------------------


def test_a_text_that_fits_is_unchanged() -> None:
    """R-CHAN-10: truncation only touches a text longer than three segments."""
    for text in ["", "Your code is 493817", "a" * 459, DEVANAGARI * 201, EMOJI * 99]:
        assert truncate_to_segments(text) == text


def test_long_gsm_text_is_cut_to_three_segments_with_a_gsm_marker() -> None:
    """R-CHAN-10: a long GSM text is cut to at most 3 segments and stays GSM-7 ("..." marker)."""
    text = "word " * 200
    cut = truncate_to_segments(text)
    assert cut.endswith("...")
    assert is_gsm7(cut)
    assert segments(cut) == 3
    assert text.startswith(cut.removesuffix("..."))
    assert not cut.removesuffix("...").endswith(" ")  # trailing whitespace dropped


def test_long_devanagari_text_is_cut_to_three_ucs2_segments() -> None:
    """R-CHAN-10, R-CHAN-11: Nepali text is cut to 3 UCS-2 segments (≤ 201 units) with "…"."""
    text = "विद्यालय " * 100
    cut = truncate_to_segments(text)
    assert cut.endswith("…")
    assert segments(cut) <= 3
    assert _utf16_units(cut) <= 201
    assert text.startswith(cut.removesuffix("…"))
    assert _utf16_units(cut) >= 195  # cut near the limit, not far short of it


def test_truncation_does_not_cut_inside_a_combining_cluster() -> None:
    """R-CHAN-10: the cut never leaves a Devanagari consonant without its vowel sign."""
    text = "कि" * 200  # क + the combining vowel sign ि, 400 UCS-2 units
    cut = truncate_to_segments(text).removesuffix("…")
    assert len(cut) % 2 == 0
    assert unicodedata.category(cut[-1]) == "Mc"


def test_truncation_never_splits_a_surrogate_pair() -> None:
    """R-CHAN-10: emoji are kept whole (the result encodes to UTF-16 and back unchanged)."""
    cut = truncate_to_segments(EMOJI * 150)
    assert cut.removesuffix("…") == EMOJI * len(cut.removesuffix("…"))
    assert cut.encode("utf-16-le").decode("utf-16-le") == cut
    assert segments(cut) <= 3


def test_truncation_to_one_segment_and_refusal_of_zero() -> None:
    """R-CHAN-10: max_segments is honoured for any positive value and refused below one."""
    assert segments(truncate_to_segments("a" * 1000, 1)) == 1
    assert truncate_to_segments("a" * 1000, 1) == "a" * 157 + "..."  # 160 septets exactly
    with pytest.raises(ValueError):
        truncate_to_segments("a", 0)


@given(st.text(max_size=2000))
def test_property_any_text_fits_in_three_segments(text: str) -> None:
    """R-CHAN-10: segments(truncate_to_segments(x)) <= 3 for any text; a fitting text is kept."""
    cut = truncate_to_segments(text)
    assert segments(cut) <= 3
    if segments(text) <= 3:
        assert cut == text


@given(tricky_text, st.integers(min_value=1, max_value=4))
def test_property_boundary_characters_fit_any_budget(text: str, budget: int) -> None:
    """R-CHAN-10, R-CHAN-11: with escape pairs, surrogate pairs and clusters at every boundary,
    the result fits `budget` segments, is a prefix of the text plus a marker, or is the text."""
    cut = truncate_to_segments(text, budget)
    assert segments(cut) <= budget
    if segments(text) <= budget:
        assert cut == text
    else:
        marker = "..." if is_gsm7(text) else "…"
        assert cut.endswith(marker)
        assert text.startswith(cut.removesuffix(marker))


# --- phone numbers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    ["+977 981-2345678", "9812345678", "+9779812345678", "009779812345678", " 981 234 5678 "],
)
def test_normalize_phone_nepali_forms(raw: str) -> None:
    """R-CHAN-8, R-CHAN-20: Nepali numbers in any usual form normalise to E.164."""
    assert normalize_phone(raw, "NP") == "+9779812345678"


def test_normalize_phone_defaults_to_nepal_and_honours_another_region() -> None:
    """R-CHAN-20: the default region reads national numbers; an international one is kept."""
    assert normalize_phone("9812345678") == "+9779812345678"
    assert normalize_phone("(415) 555-2671", "US") == "+14155552671"
    assert normalize_phone("+1 415 555 2671", "NP") == "+14155552671"


@pytest.mark.parametrize(
    "raw",
    [None, "", "   ", "abc", "12345", "98123456789", "+977", "not a phone", "+" + "9" * 80],
)
def test_normalize_phone_refuses_what_is_not_a_valid_number(raw: str | None) -> None:
    """R-CHAN-9: garbage, too short or invalid numbers give None (skipped_no_destination)."""
    assert normalize_phone(raw, "NP") is None


def test_mask_phone_keeps_country_code_and_last_four() -> None:
    """Logs carry a masked number only: `+977●●●●●●5678`."""
    assert mask_phone("+9779812345678") == "+977●●●●●●5678"
    assert mask_phone("+14155552671") == "+1●●●●●●2671"
    assert mask_phone("9812345678") == "●●●●"
    assert mask_phone("garbage") == "●●●●"
    assert "12345678" not in mask_phone("+9779812345678")


def test_is_e164() -> None:
    assert sms.is_e164("+9779812345678")
    assert not sms.is_e164("9812345678")
    assert not sms.is_e164("+977 9812345678")
    assert not sms.is_e164("+9779812345678,+9779812345679")


# --- shared provider helpers -----------------------------------------------------------------


def test_sms_error_table_is_fixed() -> None:
    """R-PROVIDER-25: the SMS error codes are one fixed table."""
    assert SMS_ERROR_CODES == (
        "SMS_INVALID_NUMBER",
        "SMS_UNSUPPORTED_DESTINATION",
        "SMS_INSUFFICIENT_BALANCE",
        "SMS_AUTH",
        "SMS_REJECTED",
        "SMS_TRANSPORT",
        "SMS_UNKNOWN",
    )


def test_parse_retry_after() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("30") == 30
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("999999") == 3600
    assert parse_retry_after("Wed, 01 Jan 2025 12:01:00 GMT", now=now) == 60
    assert parse_retry_after("Wed, 01 Jan 2025 11:00:00 GMT", now=now) == 0
