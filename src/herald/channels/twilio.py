"""Twilio Programmable Messaging: one Messages resource created per number.

POST {HERALD_TWILIO_BASE_URL}/2010-04-01/Accounts/{sid}/Messages.json with HTTP basic auth
(account sid, auth token) and form `To`, `From` (or `MessagingServiceSid` when HERALD_TWILIO_FROM
is a Messaging Service sid, `MG…`), `Body`. 201 `{"sid": "SM…", "status": "queued"}` is the
receipt; a refusal is 4xx `{"code": 21211, "message": "…", "status": 400}`. The failure is sorted
by Twilio's numeric code only: its `message` can quote the number or the body, so it never leaves
this module, and the detail is `twilio_<code>` (R-PROVIDER-24/25, R-STATE-15).
"""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import quote

import httpx

from herald.channels import sms
from herald.channels.base import (
    Message,
    NotSent,
    ProviderOutcome,
    http_client,
    json_object,
    log_send_failure,
    transport_failure,
)
from herald.config import Settings

logger = logging.getLogger(__name__)

_SID = re.compile(r"[A-Za-z]{2}[A-Za-z0-9]{1,62}")
_STATUS = re.compile(r"[a-z_]{1,32}")

# Twilio's REST error codes (https://www.twilio.com/docs/api/errors) → (code, retryable).
TWILIO_ERROR_TABLE: dict[int, tuple[sms.SmsErrorCode, bool]] = {
    20003: ("SMS_AUTH", False),  # authentication failed
    20005: ("SMS_AUTH", False),  # account not active
    20404: ("SMS_AUTH", False),  # resource not found: the account sid is wrong
    20429: ("SMS_TRANSPORT", True),  # too many requests
    21211: ("SMS_INVALID_NUMBER", False),  # invalid 'To' phone number
    21217: ("SMS_INVALID_NUMBER", False),  # phone number does not appear to be valid
    21401: ("SMS_INVALID_NUMBER", False),  # invalid phone number
    21614: ("SMS_INVALID_NUMBER", False),  # 'To' is not a valid mobile number
    21408: ("SMS_UNSUPPORTED_DESTINATION", False),  # sending to this region is not enabled
    21612: ("SMS_UNSUPPORTED_DESTINATION", False),  # cannot route to this number
    21610: ("SMS_REJECTED", False),  # the recipient unsubscribed (replied STOP)
    21608: ("SMS_REJECTED", False),  # trial account: the number is not verified
    21212: ("SMS_REJECTED", False),  # invalid 'From' number
    21606: ("SMS_REJECTED", False),  # 'From' is not an SMS-capable number of this account
    21660: ("SMS_REJECTED", False),  # 'From' does not belong to this account
    21611: ("SMS_TRANSPORT", True),  # the sender's queue is full: later, it drains
}


def _twilio_code(payload: dict[str, Any] | None) -> int | None:
    code = payload.get("code") if payload is not None else None
    if isinstance(code, bool) or not isinstance(code, int) or not 0 < code < 100_000:
        return None
    return code


def classify_send_answer(response: httpx.Response) -> ProviderOutcome:
    """Sort one Twilio answer into sent / failed by HTTP status and Twilio's numeric code."""
    status = response.status_code
    payload = json_object(response)
    if 200 <= status < 300:
        # 201 is the receipt: the message resource exists and will be billed. A body we cannot
        # read does not undo that, and a retry would send (and bill) a second message.
        sid = payload.get("sid") if payload is not None else None
        state = payload.get("status") if payload is not None else None
        return ProviderOutcome.sent(
            sid if isinstance(sid, str) and _SID.fullmatch(sid) else None,
            state if isinstance(state, str) and _STATUS.fullmatch(state) else None,
        )
    code = _twilio_code(payload)
    detail = f"twilio_{code}" if code is not None else sms.http_detail(status)
    unavailable = sms.throttled_or_unavailable(response, detail)
    if unavailable is not None:
        return unavailable
    if code is not None and code in TWILIO_ERROR_TABLE:
        error_code, retryable = TWILIO_ERROR_TABLE[code]
        return sms.sms_failure(
            error_code, retryable=retryable, detail=detail, not_sent=_not_sent(error_code, code)
        )
    if status in (401, 403):
        return sms.sms_failure("SMS_AUTH", retryable=False, detail=detail, not_sent="provider")
    # Any other 4xx is a decision about this request: the same request gets the same answer.
    return sms.sms_failure("SMS_REJECTED", retryable=False, detail=detail)


# Refusals about our account or sender rather than the message: Twilio created no message, and
# another provider may send it (herald.channels.failover).
_ACCOUNT_REFUSALS = frozenset({20429, 21212, 21606, 21611, 21660})


def _not_sent(error_code: sms.SmsErrorCode, twilio_code: int) -> NotSent | None:
    if error_code == "SMS_AUTH" or twilio_code in _ACCOUNT_REFUSALS:
        return "provider"
    if error_code == "SMS_UNSUPPORTED_DESTINATION":
        return "destination"
    return None


class TwilioSmsProvider:
    """The Twilio SMS provider. Configured when account sid, auth token and from are all set."""

    channel = "sms"
    name = "twilio"

    def __init__(self, settings: Settings) -> None:
        # Constructed with or without credentials (R-PROVIDER-13).
        self._sid = settings.twilio_account_sid or None
        self._token = settings.twilio_auth_token or None
        self._from = settings.twilio_from or None
        # Where Twilio posts delivery receipts (herald.receipts), when the deployment has one.
        self._status_callback = settings.twilio_status_callback_url or None
        self._client = http_client(settings, settings.twilio_base_url.rstrip("/") + "/")

    def is_configured(self) -> bool:
        return self._sid is not None and self._token is not None and self._from is not None

    @property
    def is_mock(self) -> bool:
        return False

    async def send(self, message: Message) -> ProviderOutcome:
        """One POST for one number, one outcome (R-PROVIDER-4). Never raises for a send problem."""
        if self._sid is None or self._token is None or self._from is None:
            return ProviderOutcome.unconfigured()  # R-PROVIDER-14
        masked = sms.mask_phone(message.to)
        if not sms.is_e164(message.to):
            logger.warning("twilio refused destination to=%s code=SMS_INVALID_NUMBER", masked)
            return sms.sms_failure("SMS_INVALID_NUMBER", retryable=False, detail="not_e164")
        body = sms.truncate_to_segments(message.body, sms.MAX_SEGMENTS)  # R-CHAN-10
        sender = "MessagingServiceSid" if self._from.startswith("MG") else "From"
        form = {"To": message.to, sender: self._from, "Body": body}
        if self._status_callback is not None:
            form["StatusCallback"] = self._status_callback
        path = f"2010-04-01/Accounts/{quote(self._sid, safe='')}/Messages.json"
        try:
            response = await self._client.post(path, data=form, auth=(self._sid, self._token))
        except httpx.HTTPError as exc:
            return transport_failure("SMS_TRANSPORT", exc, log=logger, provider="twilio", to=masked)
        outcome = classify_send_answer(response)
        if outcome.outcome == "sent":
            logger.info(
                "twilio queued to=%s sid=%s segments=%d",
                masked,
                outcome.provider_message_id,
                sms.segments(body),
            )
        else:
            log_send_failure(logger, "twilio", masked, response, outcome)
        return outcome

    async def balance(self) -> float | None:
        """Twilio offers no credit API Herald reads: None, and the credit check stays quiet."""
        return None

    async def aclose(self) -> None:
        await self._client.aclose()
