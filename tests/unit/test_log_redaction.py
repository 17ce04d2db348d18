"""Issue 14: JSON log lines carry the ids, and no secret, token, address or rendered content passes
the redaction — logged here on purpose, every way a careless line might."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import secrets
import sys
from collections.abc import Iterator

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from herald.auth.service import KEY_PREFIX
from herald.config import Settings as HeraldSettings
from herald.observability import logs

SMTP_PASSWORD = "correct-horse-battery-staple"
RESET_TOKEN = secrets.token_urlsafe(32)
HEX_TOKEN = secrets.token_hex(16)
API_KEY = KEY_PREFIX + secrets.token_urlsafe(32)
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJnLTEiLCJ0ZW5hbnQiOiJ0LTEifQ.c2lnbmF0dXJlLWJ5dGVz"
EMAIL = "asha.rai@example.com"
PHONE = "+9779841234567"
CHAT_ID = "5123456789"
BODY = "Dear Asha, your report card for term 2 is ready: Maths A, Science B+."


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    settings = HeraldSettings(smtp_password=SMTP_PASSWORD, log_format="json")
    logs.remember_credentials(settings)
    handler.setFormatter(logs.formatter("worker", "json"))
    logger = logging.getLogger("herald.test_redaction")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield logger, stream
    finally:
        logger.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_nothing_sensitive_passes_whatever_logs_it(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured

    async def a_send() -> None:
        with logs.send_scope(request_id="req-1", event_id="e-1", delivery_id="d-1", tenant="t-1"):
            logs.mark_sensitive(BODY, "Report card ready")
            logger.info("rendered %s for %s", BODY, EMAIL)
            logger.info("reset link https://school.example/reset?token=%s sent", RESET_TOKEN)
            logger.warning("token=%s key=%s", HEX_TOKEN, API_KEY)
            logger.info("Authorization: Bearer %s", JWT)
            logger.info("smtp login with %s failed", SMTP_PASSWORD)
            logger.info("sms to %s, telegram chat %s", PHONE, CHAT_ID)
            logger.info("raw token %s and %s", RESET_TOKEN, HEX_TOKEN)
            logger.info(
                "fields",
                extra={
                    "to": EMAIL,
                    "body": BODY,
                    "password": SMTP_PASSWORD,
                    "variables": {"token": RESET_TOKEN},
                    "detail": f"subject was Report card ready, secret {RESET_TOKEN}",
                },
            )
            try:
                raise ValueError(f"could not send to {EMAIL} with token {RESET_TOKEN}")
            except ValueError:
                logger.exception("send failed")

    asyncio.run(a_send())
    text = stream.getvalue()
    for secret in (
        SMTP_PASSWORD,
        RESET_TOKEN,
        HEX_TOKEN,
        API_KEY,
        API_KEY.removeprefix(KEY_PREFIX),
        JWT,
        EMAIL,
        PHONE,
        CHAT_ID,
        BODY,
        "Report card ready",
    ):
        assert secret not in text, secret
    found = lines(stream)
    assert len(found) == 9
    for line in found:
        assert {"time", "level", "logger", "message", "role"} <= line.keys()
        assert line["role"] == "worker" and line["logger"] == "herald.test_redaction"
        assert (line["request_id"], line["event_id"], line["delivery_id"], line["tenant"]) == (
            "req-1",
            "e-1",
            "d-1",
            "t-1",
        )
    assert "Traceback" in str(found[-1]["exception"])


def test_ordinary_lines_keep_their_ids_and_words(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured
    event = "2a6280d9-4142-4410-af36-aaebf3acc567"
    logger.info("event %s complete: %s recipients", event, 2400)
    logger.warning("delivery %s via smtp: failed_retryable (EMAIL_SMTP_451) in 12 ms", event)
    [first, second] = lines(stream)
    assert first["message"] == f"event {event} complete: 2400 recipients"
    assert first["level"] == "info" and "request_id" not in first
    assert (
        second["message"]
        == f"delivery {event} via smtp: failed_retryable (EMAIL_SMTP_451) in 12 ms"
    )


def test_format_defaults_to_json_except_under_dev() -> None:
    assert logs.resolve_format(HeraldSettings(), dev=False) == "json"
    assert logs.resolve_format(HeraldSettings(), dev=True) == "text"
    assert logs.resolve_format(HeraldSettings(log_format="text"), dev=False) == "text"
    assert logs.resolve_format(HeraldSettings(log_format="json"), dev=True) == "json"


def test_a_token_without_a_digit_is_still_cut_but_identifiers_are_kept(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    """About one random 43-character token in 1,500 has no digit; its case flips still give it
    away, while snake_case and CamelCase names (index, error and class names) stay readable."""
    logger, stream = captured
    digitless = "qWeRtyUIopAsdFGhjKLzXcvBNmQ-wErTyuIOPaSdfGH"  # token_urlsafe's shape, no digit
    names = "notification_delivery_recipient_idx NotificationBroadcastSelfApproval"
    logger.info("reset link token %s sent", digitless)
    logger.info("index and error: %s", names)
    [cut, kept] = lines(stream)
    assert digitless not in json.dumps(cut) and logs.REDACTED in cut["message"]
    assert kept["message"] == f"index and error: {names}"


def test_a_sends_ids_and_sensitive_values_end_with_it(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    """The worker's senders go from one delivery to the next in one task: what one send bound
    and marked is on its own lines only, never on the next send's (nor kept, growing, for the
    rest of the batch)."""
    logger, stream = captured
    first, second = "Your library book is overdue", "Sports day moved to Friday"

    async def two_sends() -> None:
        with logs.send_scope(delivery_id="d-1", tenant="t-1", request_id=None):
            logs.mark_sensitive(first)
            logger.info("rendered %s", first)
        with logs.send_scope(delivery_id="d-2", tenant="t-1", request_id=None):
            logs.mark_sensitive(second)
            logger.info("previous send rendered %s, this one %s", first, second)
        logger.info("after the sends: %s", first)

    asyncio.run(two_sends())
    one, two, after = lines(stream)
    assert (one["delivery_id"], one["message"]) == ("d-1", "rendered [redacted]")
    assert "request_id" not in one
    assert two["delivery_id"] == "d-2"
    assert two["message"] == f"previous send rendered {first}, this one [redacted]"
    assert "delivery_id" not in after and after["message"] == f"after the sends: {first}"


# The two shortcuts of the log path (herald.observability.logs) are held to the long way here.

_FRAGMENTS = st.sampled_from(
    [
        "eyJ",
        "EYj",
        "Bearer ",
        "basic ",
        "token=",
        "Pass",
        "word",
        "pwd:",
        "secret",
        "api-",
        "Key",
        "otp",
        "@",
        "example.com",
        "+",
        "977",
        "123456",
        "-",
        "_",
        ".",
        " ",
        "/v1/me/notifications",
        "ſ",
        "paſſword=",
        "api_\u212aey: ",
        "\u212a",
        "+977 984",
        "123 4567",
        "é",
        "٣",
        "aB",
        "Zq9",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_FRAGMENTS, st.text(max_size=6)), max_size=16).map("".join))
def test_text_the_patterns_are_skipped_for_is_text_they_would_leave_alone(text: str) -> None:
    """redact_text skips the six substitutions where its one cheap check says none can match:
    a skip must never leave what a substitution would have cut."""
    if not logs._may_match(text):
        assert logs._redact_patterns(text) == text


_PATTERNS = [logs._JWT, logs._BEARER, logs._SECRET_PAIR, logs._EMAIL, logs._PHONE, logs._OPAQUE]


@settings(max_examples=600, deadline=None)
@given(
    st.sampled_from(_PATTERNS).flatmap(
        lambda pattern: st.tuples(
            st.just(pattern),
            st.from_regex(pattern)
            | st.from_regex(pattern, fullmatch=True, alphabet=st.characters(codec="ascii")),
        )
    )
)
def test_whatever_a_pattern_matches_is_never_skipped(case: tuple[re.Pattern[str], str]) -> None:
    """The other direction, from the patterns themselves: text generated to contain a match of
    any of the six always takes the substitutions."""
    pattern, text = case
    if pattern.search(text) is not None:
        assert logs._may_match(text), text


def test_the_ordinary_request_line_skips_the_patterns_and_a_token_does_not() -> None:
    assert not logs._may_match("GET /v1/me/notifications 200 in 3.2 ms")
    for text in (f"token {HEX_TOKEN}", f"to {EMAIL}", f"sms {PHONE}", f"Bearer {JWT}"):
        assert logs._may_match(text)
        assert logs.redact_text(text) != text


_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.\d+Z")


def _structlog_formatter(role: str, fmt: logs.LogFormat) -> logging.Formatter:
    """What logs.formatter was before its own formatter: structlog's, with the same steps."""
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=logs.pre_chain(role),
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            logs.renderer(fmt),
        ],
    )


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_herald_formatter_writes_the_line_structlogs_formatter_writes(fmt: logs.LogFormat) -> None:
    ours, theirs = logs.formatter("api", fmt), _structlog_formatter("api", fmt)
    logger = logging.getLogger("herald.test_formatter")

    def record(*args: object, **extra: object) -> logging.LogRecord:
        exc_info = extra.pop("exc_info", None)
        made = logger.makeRecord(
            logger.name, logging.WARNING, __file__, 1, *args, exc_info, extra=extra or None
        )
        return made

    try:
        raise ValueError(f"could not send to {EMAIL}")
    except ValueError:
        failure = sys.exc_info()

    def same(made: logging.LogRecord) -> str:
        before = dict(made.__dict__)
        # Each reads the clock: the times are compared to the second.
        a, b = (_STAMP.sub(r"\1", f.format(made)) for f in (ours, theirs))
        assert a == b
        assert made.__dict__ == before  # left as it came, for any other handler
        return a

    with logs.bound(request_id="req-7", tenant="t-9"):
        assert "GET /v1/me/notifications 200 in 3.2 ms" in same(
            record("GET %s %s in %.1f ms", ("/v1/me/notifications", 200, 3.25))
        )
        assert "count" in same(
            record("fields", (), detail=f"secret {RESET_TOKEN}", to=EMAIL, count=3)
        )
        assert "Traceback" in same(record("send failed for %s", (EMAIL,), exc_info=failure))
        with logs.send_scope(delivery_id="d-1", event_id=None, tenant="t-1"):
            logs.mark_sensitive(BODY)
            assert "d-1" in same(record("rendered %s", (BODY,)))
