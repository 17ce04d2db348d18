"""Issue 14: JSON log lines carry the ids, and no secret, token, address or rendered content passes
the redaction — logged here on purpose, every way a careless line might."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import secrets
from collections.abc import Iterator

import pytest

from herald.auth.service import KEY_PREFIX
from herald.config import Settings
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
    settings = Settings(smtp_password=SMTP_PASSWORD, log_format="json")
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
    assert logs.resolve_format(Settings(), dev=False) == "json"
    assert logs.resolve_format(Settings(), dev=True) == "text"
    assert logs.resolve_format(Settings(log_format="text"), dev=False) == "text"
    assert logs.resolve_format(Settings(log_format="json"), dev=True) == "json"


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
