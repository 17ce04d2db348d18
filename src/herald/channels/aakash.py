"""Aakash SMS (Nepal), API v3: one form POST per number, the verdict in the JSON body.

Aakash answers most failures with HTTP 200 and `"error": true` (R-PROVIDER-20), and its failure
body echoes the text it was asked to send — for an OTP, the OTP (R-STATE-15). So the answer is
classified by comparing its `message` with the few documented messages, and only a fixed code from
SMS_ERROR_CODES plus a fixed detail token ever leaves this module (R-PROVIDER-24/25); the body is
never logged.

Send: POST {HERALD_AAKASH_BASE_URL}/send, form `auth_token`, `to` (the 10-digit national number;
Aakash delivers only inside Nepal), `text`. Credit: POST …/sms/v1/credit, form `auth_token`,
answering `{"available_credit": 1000, "total_sms_sent": 500, "response_code": 202}` — the credit
endpoint lives beside the v3 base, so its URL is the base with its trailing `/v3` replaced by
`/v1/credit`.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any

import httpx
import phonenumbers

from herald.channels import sms
from herald.channels.base import (
    Message,
    NotSent,
    ProviderOutcome,
    bounded_detail,
    http_client,
    json_object,
    log_send_failure,
    transport_failure,
)
from herald.config import Settings
from herald.errors import SmsBalanceUnavailable

logger = logging.getLogger(__name__)

NEPAL_COUNTRY_CODE = 977
_NATIONAL_MOBILE = re.compile(r"[0-9]{10}")
_MESSAGE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_STATUS = re.compile(r"[a-z_]{1,32}")
_VERSION_SUFFIX = re.compile(r"/v[0-9]+/?$")

# The documented `message` values, matched whole (never searched within: the body echoes the text,
# and an OTP text must not be able to steer the classification).
_NOT_ENOUGH_BALANCE = "not enough balance"
_AUTH_TOKEN_INVALID = "the provided auth token is not valid"


def _known_message(message: object) -> str | None:
    if not isinstance(message, str):
        return None
    normalised = message.strip().rstrip(".").strip().casefold()
    if normalised == _NOT_ENOUGH_BALANCE:
        return "balance"
    if normalised == _AUTH_TOKEN_INVALID:
        return "auth"
    return None


def credit_url(base_url: str) -> str:
    """The credit endpoint for a send base URL: `…/sms/v3` → `…/sms/v1/credit`."""
    base = base_url.rstrip("/")
    return _VERSION_SUFFIX.sub("", base) + "/v1/credit"


def _entries(data: object, key: str) -> list[dict[str, Any]]:
    if not isinstance(data, dict):
        return []
    entries = data.get(key)
    if not isinstance(entries, list):
        return []
    return [entry for entry in entries if isinstance(entry, dict)]


def _message_id(value: object) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and _MESSAGE_ID.fullmatch(value):
        return value
    return None


def _status(value: object) -> str | None:
    return value if isinstance(value, str) and _STATUS.fullmatch(value) else None


def _invalid_number() -> ProviderOutcome:
    """Aakash listed the number in `data.invalid` (status `aborted`, no credit taken): Aakash has
    no delivery reports Herald reads and no numeric codes, so this is its one word that a number
    cannot take SMS. The number is marked undeliverable (undeliverable_address), as a Twilio
    30005/30006 receipt marks it: later SMS to it are skipped until the host changes it."""
    return sms.sms_failure(
        "SMS_INVALID_NUMBER",
        retryable=False,
        detail="aakash:invalid_number",
        destination_undeliverable=True,
    )


def classify_send_answer(response: httpx.Response) -> ProviderOutcome:
    """Sort one Aakash answer into sent / failed. Reads the body, never copies text out of it."""
    status = response.status_code
    unavailable = sms.throttled_or_unavailable(response, sms.http_detail(status))
    if unavailable is not None:
        return unavailable

    payload = json_object(response)
    if payload is None:
        if 200 <= status < 300:
            # Aakash's verdict is in the body, so a 200 without one is no receipt (a proxy page,
            # a truncated answer): retry.
            return sms.sms_failure("SMS_TRANSPORT", retryable=True, detail="malformed_body")
        if status in (401, 403):
            return sms.sms_failure("SMS_AUTH", retryable=False, detail=sms.http_detail(status))
        return sms.sms_failure("SMS_REJECTED", retryable=False, detail=sms.http_detail(status))

    known = _known_message(payload.get("message"))
    if known == "balance":
        # R-PROVIDER-21: every retry is a guaranteed failure and a paid HTTP call.
        # Aakash refused before taking anything: another provider may send it.
        return sms.sms_failure(
            "SMS_INSUFFICIENT_BALANCE",
            retryable=False,
            detail="aakash:not_enough_balance",
            not_sent="provider",
        )
    if known == "auth" or status in (401, 403):
        return sms.sms_failure(
            "SMS_AUTH", retryable=False, detail="aakash:auth_token_invalid", not_sent="provider"
        )

    error = payload.get("error")
    valid = _entries(payload.get("data"), "valid")
    invalid = _entries(payload.get("data"), "invalid")
    if error is False and 200 <= status < 300:
        if valid:
            first = valid[0]
            return ProviderOutcome.sent(_message_id(first.get("id")), _status(first.get("status")))
        if invalid:
            return _invalid_number()
        # Aakash said it accepted the call but listed nothing: a retry risks a second paid send.
        return sms.sms_failure("SMS_UNKNOWN", retryable=False, detail="aakash:no_receipt")
    if error is True:
        if invalid and not valid:
            return _invalid_number()
        # Any other refusal (a missing field, an unknown sender…) is about this request; the same
        # request would be refused again at the same cost.
        return sms.sms_failure("SMS_REJECTED", retryable=False, detail="aakash:error")
    if 200 <= status < 300:
        return sms.sms_failure("SMS_TRANSPORT", retryable=True, detail="malformed_body")
    return sms.sms_failure("SMS_REJECTED", retryable=False, detail=sms.http_detail(status))


def destination_refusal(to: str) -> tuple[sms.SmsErrorCode, str] | None:
    """Why Aakash cannot take `to` (code, detail), or None when it is a Nepali mobile number."""
    if not sms.is_e164(to):
        return "SMS_INVALID_NUMBER", "not_e164"
    try:
        number = phonenumbers.parse(to, None)
    except phonenumbers.NumberParseException:
        return "SMS_INVALID_NUMBER", "not_e164"
    if number.country_code != NEPAL_COUNTRY_CODE:
        # Aakash delivers only inside Nepal; sending would be refused (or billed) for nothing.
        return "SMS_UNSUPPORTED_DESTINATION", "aakash:not_nepal"
    if not _NATIONAL_MOBILE.fullmatch(str(number.national_number)):
        return "SMS_INVALID_NUMBER", "aakash:not_10_digits"
    return None


def national_number(to: str) -> str:
    """The 10-digit national number Aakash expects, for a `to` destination_refusal() accepted."""
    return str(phonenumbers.parse(to, None).national_number)


class AakashSmsProvider:
    """The Aakash SMS provider. Configured when HERALD_AAKASH_AUTH_TOKEN is set."""

    channel = "sms"
    name = "aakash"

    def __init__(self, settings: Settings) -> None:
        # Constructed with or without credentials (R-PROVIDER-13).
        self._token = settings.aakash_auth_token or None
        self._credit_url = credit_url(settings.aakash_base_url)
        self._client = http_client(settings, settings.aakash_base_url.rstrip("/") + "/")

    def is_configured(self) -> bool:
        return self._token is not None

    @property
    def is_mock(self) -> bool:
        return False

    async def send(self, message: Message) -> ProviderOutcome:
        """One POST for one number, one outcome (R-PROVIDER-4). Never raises for a send problem."""
        if self._token is None:
            return ProviderOutcome.unconfigured()  # R-PROVIDER-14
        masked = sms.mask_phone(message.to)
        refusal = destination_refusal(message.to)
        if refusal is not None:
            code, detail = refusal
            logger.warning("aakash refused destination to=%s code=%s", masked, code)
            # Outside Nepal is Aakash's limit, not the number's: another provider may reach it.
            elsewhere: NotSent | None = (
                "destination" if code == "SMS_UNSUPPORTED_DESTINATION" else None
            )
            return sms.sms_failure(code, retryable=False, detail=detail, not_sent=elsewhere)
        national = national_number(message.to)
        text = sms.truncate_to_segments(message.body, sms.MAX_SEGMENTS)  # R-CHAN-10
        form = {"auth_token": self._token, "to": national, "text": text}
        try:
            response = await self._client.post("send", data=form)
        except httpx.HTTPError as exc:
            return transport_failure("SMS_TRANSPORT", exc, log=logger, provider="aakash", to=masked)
        outcome = classify_send_answer(response)
        if outcome.outcome == "sent":
            logger.info(
                "aakash queued to=%s id=%s segments=%d",
                masked,
                outcome.provider_message_id,
                sms.segments(text),
            )
        else:
            log_send_failure(logger, "aakash", masked, response, outcome)
        return outcome

    async def balance(self) -> float | None:
        """The remaining credit, for the daily credit check (R-CREDIT-1).

        None when unconfigured (the check then returns quietly, R-CREDIT-3). A failure raises
        SmsBalanceUnavailable with an allowlisted reason; the caller logs it (R-CREDIT-5).
        """
        if self._token is None:
            return None
        try:
            response = await self._client.post(self._credit_url, data={"auth_token": self._token})
        except httpx.HTTPError as exc:
            raise _balance_error(type(exc).__name__) from exc
        if not 200 <= response.status_code < 300:
            raise _balance_error(sms.http_detail(response.status_code))
        payload = json_object(response)
        if payload is None:
            raise _balance_error("malformed_body")
        if payload.get("error") is True:
            known = _known_message(payload.get("message"))
            reason = "auth_token_invalid" if known == "auth" else "error"
            raise _balance_error(f"aakash:{reason}")
        credit = payload.get("available_credit")
        if isinstance(credit, bool):
            raise _balance_error("malformed_body")
        value: float | None = None
        if isinstance(credit, int | float):
            value = float(credit)
        elif isinstance(credit, str):
            try:
                value = float(credit.strip())
            except ValueError:
                value = None
        if value is None or not math.isfinite(value):
            raise _balance_error("malformed_body")
        return value

    async def aclose(self) -> None:
        await self._client.aclose()


def _balance_error(reason: str) -> SmsBalanceUnavailable:
    return SmsBalanceUnavailable(
        f"The Aakash credit balance could not be read ({bounded_detail(reason)})."
    )
