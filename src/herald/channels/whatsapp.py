"""WhatsApp Business Cloud API: one approved template message per phone number.

POST {HERALD_WHATSAPP_API_URL}/{phone_number_id}/messages with `Authorization: Bearer <token>` and
JSON `{"messaging_product": "whatsapp", "to": "<E.164 digits>", "type": "template", "template":
{"name", "language": {"code"}, "components": [{"type": "body", "parameters": [{"type": "text",
"text": …}, …]}]}}` — the kind's WhatsAppTemplate, its parameters filled from the event's values in
the template's order (herald.delivery.send). Outside the 24 hours after a person last wrote,
WhatsApp delivers only templates Meta approved, so Herald sends nothing else.

200 `{"messages": [{"id": "wamid.…", "message_status": "accepted"}]}` is the receipt; the id is
what the delivery receipts posted to the webhook name (herald.receipts). A refusal is
`{"error": {"code": 131026, "message": "…", …}}`; it is sorted by the Graph API's numeric code
only (its message can quote the number or a parameter), and the detail is `whatsapp_<code>`:

- 131026 the number cannot take WhatsApp messages → WHATSAPP_UNREACHABLE, permanent; the number
  is marked undeliverable on this channel (its later deliveries skip until the host changes it);
- 131047 re-engagement required (more than 24 hours since the person wrote; a template would not
  get this) → WHATSAPP_REENGAGEMENT, permanent;
- 130429 throughput, 131048 spam rate limit, 131056 too many messages to this number, 4/80007 the
  app's or account's call rate → WHATSAPP_RATE_LIMITED, retried after Retry-After or the code's
  own pause;
- 401, 190 (token expired or revoked), 10/200 (permission), 131031 (account locked), 131042
  (payment) → WHATSAPP_AUTH, retried: the operator fixes the token or account;
- the template's own refusals (132000 parameter count, 132001 no such template or language,
  132012 parameter format, 132015/132016 paused or disabled, 131008/131009 parameters) →
  WHATSAPP_TEMPLATE, permanent;
- 5xx, 1/2/131000/131016 (service errors), timeouts, connections → WHATSAPP_TRANSPORT, retried;
- any other 4xx → WHATSAPP_REJECTED, permanent.

The token rides in the Authorization header only, never in a log line, an outcome or an error.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Final, Literal, get_args
from urllib.parse import quote

import httpx

from herald.channels import sms
from herald.channels.base import (
    NOT_TAKEN_STATUSES,
    Message,
    ProviderOutcome,
    http_client,
    json_object,
    log_send_failure,
    transport_failure,
)
from herald.config import Settings

logger = logging.getLogger(__name__)

WhatsAppErrorCode = Literal[
    "WHATSAPP_RATE_LIMITED",  # 130429, 131048, 131056, 429: retry no earlier than the pause
    "WHATSAPP_TRANSPORT",  # 5xx, service errors, timeout, connection: retried
    "WHATSAPP_UNREACHABLE",  # 131026: the number cannot take WhatsApp messages: permanent
    "WHATSAPP_REENGAGEMENT",  # 131047: outside the 24-hour window: permanent
    "WHATSAPP_AUTH",  # 401/190 token, permissions, the account: fixable, so retried
    "WHATSAPP_TEMPLATE",  # the approved template refused this message: permanent
    "WHATSAPP_INVALID_NUMBER",  # not an E.164 number: permanent
    "WHATSAPP_REJECTED",  # any other refusal of this message: permanent
    "WHATSAPP_UNKNOWN",  # an answer that fits none of the above
]
WHATSAPP_ERROR_CODES: Final[tuple[str, ...]] = get_args(WhatsAppErrorCode)

UNDELIVERABLE: Final = 131026
REENGAGEMENT: Final = 131047
# Rate codes → the pause (seconds) when the answer has no Retry-After: 130429 the number's
# throughput, 131048 the spam rate limit, 131056 a pair's limit (one message each 6 s), 4 and
# 80007 the app's or the business account's call rate.
RATE_LIMITS: Final[dict[int, int]] = {130429: 5, 131048: 60, 131056: 6, 4: 60, 80007: 60}
AUTH_CODES: Final = frozenset({190, 10, 200, 131031, 131042})
TEMPLATE_CODES: Final = frozenset(
    {132000, 132001, 132005, 132007, 132012, 132015, 132016, 132068, 132069, 131008, 131009}
)
TRANSPORT_CODES: Final = frozenset({1, 2, 131000, 131016})
MAX_RETRY_AFTER_SECONDS: Final = 3600
# Meta's own cap on a body parameter's text.
MAX_PARAMETER = 1024

_MESSAGE_ID = re.compile(r"[A-Za-z0-9_.:=+/\-]{1,200}")
_STATUS = re.compile(r"[a-z_]{1,32}")


def graph_error_code(payload: dict[str, Any] | None) -> int | None:
    """The Graph API's numeric error.code, or None (never its message)."""
    error = payload.get("error") if payload is not None else None
    code = error.get("code") if isinstance(error, dict) else None
    if isinstance(code, bool) or not isinstance(code, int) or not 0 < code < 10_000_000:
        return None
    return code


def _retry_after(response: httpx.Response, default: int | None) -> int | None:
    raw = (response.headers.get("Retry-After") or "").strip()
    if raw.isdigit():
        return min(int(raw), MAX_RETRY_AFTER_SECONDS)
    return default


def classify_send_answer(response: httpx.Response) -> ProviderOutcome:
    """Sort one Graph API answer into sent / failed by HTTP status and the numeric error code."""
    status = response.status_code
    status_text = str(status)
    payload = json_object(response)
    code = graph_error_code(payload)
    if 200 <= status < 300 and code is None:
        # A 200 is the receipt: Meta took the message. A body we cannot read does not undo that,
        # and a retry would send (and bill) a second one.
        message_id, state = None, None
        messages = payload.get("messages") if payload is not None else None
        if isinstance(messages, list) and messages and isinstance(messages[0], dict):
            found, word = messages[0].get("id"), messages[0].get("message_status")
            if isinstance(found, str) and _MESSAGE_ID.fullmatch(found):
                message_id = found
            if isinstance(word, str) and _STATUS.fullmatch(word):
                state = word
        return ProviderOutcome.sent(message_id, state or status_text)
    detail = f"whatsapp_{code}" if code is not None else f"http_{status}"
    if code in RATE_LIMITS or status == 429:
        return ProviderOutcome.failure(
            "WHATSAPP_RATE_LIMITED",
            retryable=True,
            detail=detail,
            status=status_text,
            retry_after_seconds=_retry_after(response, RATE_LIMITS.get(code or 0, 60)),
            not_sent="provider",
        )
    if code == UNDELIVERABLE:
        return ProviderOutcome.failure(
            "WHATSAPP_UNREACHABLE",
            retryable=False,
            detail=f"{detail}: not reachable on WhatsApp",
            status=status_text,
            destination_undeliverable=True,
        )
    if code == REENGAGEMENT:
        return ProviderOutcome.failure(
            "WHATSAPP_REENGAGEMENT",
            retryable=False,
            detail=f"{detail}: re-engagement required - 24 hours since the person wrote",
            status=status_text,
        )
    if status == 401 or code in AUTH_CODES:
        return ProviderOutcome.failure(
            "WHATSAPP_AUTH", retryable=True, detail=detail, status=status_text, not_sent="provider"
        )
    if status >= 500 or status == 408 or code in TRANSPORT_CODES:
        return ProviderOutcome.failure(
            "WHATSAPP_TRANSPORT",
            retryable=True,
            detail=detail,
            status=status_text,
            retry_after_seconds=_retry_after(response, None),
            not_sent="provider" if status in NOT_TAKEN_STATUSES else None,
        )
    if code in TEMPLATE_CODES:
        return ProviderOutcome.failure(
            "WHATSAPP_TEMPLATE", retryable=False, detail=detail, status=status_text
        )
    if 200 <= status < 300:
        # An error object in a 2xx: not Meta's shape for a success, and not a verdict.
        return ProviderOutcome.failure(
            "WHATSAPP_UNKNOWN", retryable=True, detail=detail, status=status_text
        )
    # Any other 4xx is a decision about this request: the same request gets the same answer.
    return ProviderOutcome.failure(
        "WHATSAPP_REJECTED", retryable=False, detail=detail, status=status_text
    )


def build_template_message(message: Message) -> dict[str, Any]:
    """The messages request's JSON: the approved template with its body parameters in order."""
    template = message.template
    assert template is not None
    parameters = [
        {"type": "text", "text": _clip(value, MAX_PARAMETER)} for value in template.parameters
    ]
    body: dict[str, Any] = {
        "name": template.name,
        "language": {"code": template.language},
    }
    if parameters:
        body["components"] = [{"type": "body", "parameters": parameters}]
    return {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        # The number as WhatsApp ids write it: E.164 without the plus.
        "to": message.to.lstrip("+"),
        "type": "template",
        "template": body,
    }


def _clip(text: str, limit: int) -> str:
    # A parameter may not hold a newline, a tab or more than four spaces in a row (132012).
    flat = re.sub(r"\s{4,}", "   ", re.sub(r"[\n\t]+", " ", text)).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class WhatsAppProvider:
    """The WhatsApp provider: configured when HERALD_WHATSAPP_TOKEN and
    HERALD_WHATSAPP_PHONE_NUMBER_ID are set."""

    channel = "whatsapp"
    name = "whatsapp"

    def __init__(self, settings: Settings) -> None:
        # Constructed with or without credentials (R-PROVIDER-13).
        self._token = (settings.whatsapp_token or "").strip() or None
        self._phone_number_id = (settings.whatsapp_phone_number_id or "").strip() or None
        self._client = http_client(settings, settings.whatsapp_api_url.rstrip("/") + "/")

    def is_configured(self) -> bool:
        return self._token is not None and self._phone_number_id is not None

    @property
    def is_mock(self) -> bool:
        return False

    async def send(self, message: Message) -> ProviderOutcome:
        """One POST for one number, one outcome. Never raises for a send problem."""
        if self._token is None or self._phone_number_id is None:
            return ProviderOutcome.unconfigured()
        masked = sms.mask_phone(message.to)
        if not sms.is_e164(message.to):
            logger.warning(
                "whatsapp refused destination to=%s code=WHATSAPP_INVALID_NUMBER", masked
            )
            return ProviderOutcome.failure(
                "WHATSAPP_INVALID_NUMBER", retryable=False, detail="not_e164"
            )
        if message.template is None:
            # Only approved templates reach a person outside the 24-hour window.
            return ProviderOutcome.failure(
                "WHATSAPP_TEMPLATE", retryable=False, detail="no_whatsapp_template"
            )
        path = f"{quote(self._phone_number_id, safe='')}/messages"
        try:
            response = await self._client.post(
                path,
                json=build_template_message(message),
                headers={"Authorization": f"Bearer {self._token}"},
            )
        except httpx.HTTPError as exc:
            return transport_failure(
                "WHATSAPP_TRANSPORT", exc, log=logger, provider="whatsapp", to=masked
            )
        outcome = classify_send_answer(response)
        if outcome.outcome == "sent":
            logger.info(
                "whatsapp accepted to=%s template=%s id=%s",
                masked,
                message.template.name,
                outcome.provider_message_id,
            )
        else:
            log_send_failure(logger, "whatsapp", masked, response, outcome)
        return outcome

    async def aclose(self) -> None:
        await self._client.aclose()
