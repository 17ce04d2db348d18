"""Push over Firebase Cloud Messaging's HTTP v1 API, authenticated with a service account.

The service account signs a short JWT (RS256) that Google's token endpoint trades for an OAuth
access token; the token is cached until shortly before it expires, and one refresh serves every
send waiting on it. Each send chooses FCM's platform block from the device's platform (R-CHAN-14)
and sorts FCM's answer into sent / retryable / permanent, flagging a dead token so the channel can
deactivate it in the same send (R-CHAN-16). Codes come only from PUSH_ERROR_CODES and the detail
only from FCM's enumerated errorCode or an HTTP status, never FCM's message text (R-PROVIDER-24,
R-PROVIDER-25, R-STATE-15). The device token never reaches a log line unmasked.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Final, Literal, get_args
from urllib.parse import quote

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from typing_extensions import override

from herald.channels import push
from herald.channels.base import Message, ProviderOutcome, http_client, opaque_transport_failure
from herald.config import Settings

logger = logging.getLogger(__name__)

PushErrorCode = Literal[
    "PUSH_TOKEN_INVALID",  # UNREGISTERED, or INVALID_ARGUMENT about the token: deactivate it
    "PUSH_SENDER_MISMATCH",  # the token belongs to another Firebase project: deactivate it
    "PUSH_AUTH",  # OAuth token refused or not obtainable; the service account may be fixed
    "PUSH_TRANSPORT",  # timeout, connection, 429, 5xx: try again later
    "PUSH_REJECTED",  # FCM refused the message itself (not the token): do not retry
    "PUSH_RESPONSE_INVALID",  # a 2xx answer that is not FCM's: maybe never reached FCM
]
PUSH_ERROR_CODES: Final[tuple[str, ...]] = get_args(PushErrorCode)

# FCM v1's enumerated errorCode values (google.firebase.fcm.v1.FcmError): the only FCM words
# allowed into a detail.
FCM_ERROR_NAMES: Final[frozenset[str]] = frozenset(
    {
        "UNSPECIFIED_ERROR",
        "INVALID_ARGUMENT",
        "UNREGISTERED",
        "SENDER_ID_MISMATCH",
        "QUOTA_EXCEEDED",
        "UNAVAILABLE",
        "INTERNAL",
        "THIRD_PARTY_AUTH_ERROR",
    }
)

FCM_SCOPE: Final = "https://www.googleapis.com/auth/firebase.messaging"
_JWT_BEARER_GRANT: Final = "urn:ietf:params:oauth:grant-type:jwt-bearer"
_ASSERTION_LIFETIME_SECONDS: Final = 3600
# Refresh this long before the access token expires (at most half its life), so a send never
# carries a token that expires in flight.
_REFRESH_MARGIN_SECONDS: Final = 300.0
MAX_RETRY_AFTER_SECONDS: Final = 86_400
_HIGH_PRIORITIES: Final = frozenset({"high", "urgent"})


@dataclass(frozen=True)
class ServiceAccount:
    project_id: str
    client_email: str
    private_key: RSAPrivateKey
    private_key_id: str | None
    token_uri: str | None

    @override
    def __repr__(self) -> str:  # never print the key
        return f"ServiceAccount(project_id={self.project_id!r}, client_email={self.client_email!r})"


class _PushFailure(Exception):
    """Internal: carries an already-sorted outcome out of the token refresh."""

    def __init__(self, outcome: ProviderOutcome) -> None:
        super().__init__(outcome.error_code)
        self.outcome = outcome


class FcmPushProvider:
    """The push provider: configured when HERALD_FCM_SERVICE_ACCOUNT_FILE is a usable key file."""

    channel = "push"
    name = "fcm"

    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._settings = settings
        self._clock = clock
        self._account = (
            service_account_of_json(settings.fcm_service_account_json)
            if settings.fcm_service_account_json
            else load_service_account(settings.fcm_service_account_file)
        )
        if self._account is not None and settings.fcm_project_id:
            self._account = replace(self._account, project_id=settings.fcm_project_id)
        self._client: httpx.AsyncClient | None = None
        self._token_lock = asyncio.Lock()
        self._access_token: str | None = None
        self._token_valid_until = 0.0

    def is_configured(self) -> bool:
        return self._account is not None

    @property
    def is_mock(self) -> bool:
        return False

    async def send(self, message: Message) -> ProviderOutcome:
        account = self._account
        if account is None:
            return ProviderOutcome.unconfigured()
        if not message.to:
            return ProviderOutcome(outcome="skipped", skip_reason="no_destination")
        try:
            access_token = await self._get_access_token(account)
        except _PushFailure as failure:
            self._log_failure(failure.outcome, message)
            return failure.outcome
        outcome = await self._post_message(account, access_token, message)
        if outcome.outcome == "sent":
            logger.debug("push sent to device %s", mask_device_token(message.to))
        else:
            self._log_failure(outcome, message)
        return outcome

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # -- sending ---------------------------------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = http_client(self._settings, self._settings.fcm_base_url)
        return self._client

    async def _post_message(
        self, account: ServiceAccount, access_token: str, message: Message
    ) -> ProviderOutcome:
        path = f"/v1/projects/{quote(account.project_id, safe='')}/messages:send"
        try:
            response = await self._http().post(
                path,
                json={"message": build_fcm_message(message)},
                headers={"Authorization": f"Bearer {access_token}"},
            )
        # Exception text can carry the URL; map on the type only.
        except httpx.HTTPError as exc:
            return opaque_transport_failure("PUSH_TRANSPORT", exc)
        outcome = classify_fcm_response(response.status_code, response.content, response.headers)
        if response.status_code in (401, 403):
            # The cached token may be revoked or belong to the wrong project: fetch a new one
            # next time (unless a concurrent send already did).
            self._drop_access_token(access_token)
        return outcome

    # -- OAuth -----------------------------------------------------------------------------------

    async def _get_access_token(self, account: ServiceAccount) -> str:
        token = self._cached_token()
        if token is not None:
            return token
        async with self._token_lock:
            # Whoever held the lock before us may have refreshed it already.
            token = self._cached_token()
            if token is not None:
                return token
            token, expires_in = await self._exchange_assertion(account)
            margin = min(_REFRESH_MARGIN_SECONDS, expires_in / 2)
            self._access_token = token
            self._token_valid_until = self._clock() + expires_in - margin
            return token

    def _cached_token(self) -> str | None:
        if self._access_token is not None and self._clock() < self._token_valid_until:
            return self._access_token
        return None

    def _drop_access_token(self, used: str) -> None:
        if self._access_token == used:
            self._access_token = None
            self._token_valid_until = 0.0

    async def _exchange_assertion(self, account: ServiceAccount) -> tuple[str, float]:
        token_url = self._settings.fcm_token_url
        assertion = sign_assertion(account, audience=account.token_uri or token_url)
        try:
            response = await self._http().post(
                token_url, data={"grant_type": _JWT_BEARER_GRANT, "assertion": assertion}
            )
        except httpx.TimeoutException:
            raise _auth_failure("token_timeout") from None
        except httpx.HTTPError:
            raise _auth_failure("token_connection") from None
        if response.status_code != 200:
            raise _auth_failure(f"token_http_{response.status_code}")
        body = _json_object(response.content)
        token = body.get("access_token") if body is not None else None
        expires_in = body.get("expires_in") if body is not None else None
        if (
            not isinstance(token, str)
            or not token
            or isinstance(expires_in, bool)
            or not isinstance(expires_in, int | float)
            or expires_in <= 0
        ):
            raise _auth_failure("token_response_invalid")
        return token, float(expires_in)

    def _log_failure(self, outcome: ProviderOutcome, message: Message) -> None:
        logger.warning(
            "push send failed: code=%s detail=%s retryable=%s device=%s",
            outcome.error_code,
            outcome.detail,
            outcome.retryable,
            mask_device_token(message.to),
        )


def _auth_failure(detail: str) -> _PushFailure:
    return _PushFailure(ProviderOutcome.failure("PUSH_AUTH", retryable=True, detail=detail))


# -- pure pieces (tested directly) ---------------------------------------------------------------


def load_service_account(path: Path | None) -> ServiceAccount | None:
    """The service account in `path`, or None (logged, never raised) when it is not usable."""
    if path is None:
        return None
    try:
        raw = json.loads(path.read_bytes())
    except (OSError, ValueError):
        logger.warning(
            "FCM service account file %s is not readable JSON; push is unconfigured", path
        )
        return None
    account, problem = parse_service_account(raw)
    if account is None:
        logger.warning("FCM service account file %s %s; push is unconfigured", path, problem)
    return account


def service_account_of_json(text: str) -> ServiceAccount | None:
    """The service account in HERALD_FCM_SERVICE_ACCOUNT_JSON (or a tenant's account), or None,
    logged without a byte of its content."""
    try:
        raw = json.loads(text)
    except ValueError:
        logger.warning("the FCM service account JSON is not JSON; push is unconfigured")
        return None
    account, problem = parse_service_account(raw)
    if account is None:
        logger.warning("the FCM service account JSON %s; push is unconfigured", problem)
    return account


def parse_service_account(raw: object) -> tuple[ServiceAccount | None, str]:
    """(the account, "") or (None, what is wrong with it — never any of its values)."""
    if not isinstance(raw, dict):
        return None, "is not a JSON object"
    project_id = raw.get("project_id")
    client_email = raw.get("client_email")
    private_key = raw.get("private_key")
    private_key_id = raw.get("private_key_id")
    token_uri = raw.get("token_uri")
    if not (
        isinstance(project_id, str)
        and project_id
        and isinstance(client_email, str)
        and client_email
        and isinstance(private_key, str)
    ):
        return None, "lacks project_id, client_email or private_key"
    try:
        key = load_pem_private_key(private_key.encode("utf-8"), password=None)
    except (ValueError, TypeError):
        key = None
    if not isinstance(key, RSAPrivateKey):
        return None, "holds no RSA private key"
    account = ServiceAccount(
        project_id=project_id,
        client_email=client_email,
        private_key=key,
        private_key_id=private_key_id
        if isinstance(private_key_id, str) and private_key_id
        else None,
        token_uri=token_uri if isinstance(token_uri, str) and token_uri else None,
    )
    return account, ""


def sign_assertion(account: ServiceAccount, *, audience: str, now: float | None = None) -> str:
    """The RS256 JWT a service account presents to the token endpoint (one hour's life)."""
    issued_at = int(time.time() if now is None else now)
    claims = {
        "iss": account.client_email,
        "scope": FCM_SCOPE,
        "aud": audience,
        "iat": issued_at,
        "exp": issued_at + _ASSERTION_LIFETIME_SECONDS,
    }
    headers = {"kid": account.private_key_id} if account.private_key_id else None
    return jwt.encode(claims, account.private_key, algorithm="RS256", headers=headers)


def build_fcm_message(message: Message) -> dict[str, Any]:
    """FCM v1's `message` object, with the block of the device's platform only (R-CHAN-14)."""
    notification: dict[str, str] = {"body": message.body}
    if message.title:
        notification["title"] = message.title
    body: dict[str, Any] = {"token": message.to, "notification": notification}
    if message.action_url:
        body["data"] = {"actionUrl": message.action_url}
    high = message.priority in _HIGH_PRIORITIES
    if message.platform == "android":
        body["android"] = {"priority": "high" if high else "normal"}
    elif message.platform == "ios":
        aps: dict[str, Any] = {"sound": "default"} if high else {}
        body["apns"] = {
            "headers": {"apns-priority": "10" if high else "5"},
            "payload": {"aps": aps},
        }
    elif message.platform == "web":
        webpush: dict[str, Any] = {"headers": {"Urgency": "high" if high else "normal"}}
        # FCM opens only an https link; an app-relative path stays in data.actionUrl.
        if message.action_url and message.action_url.lower().startswith("https://"):
            webpush["fcm_options"] = {"link": message.action_url}
        body["webpush"] = webpush
    return body


def classify_fcm_response(
    status: int, content: bytes, headers: Mapping[str, str]
) -> ProviderOutcome:
    """Sort FCM's answer into an outcome; only the errorCode enum or the status reaches detail."""
    if 200 <= status < 300:
        body = _json_object(content)
        name = body.get("name") if body is not None else None
        if not isinstance(name, str) or not name:
            return ProviderOutcome.failure(
                "PUSH_RESPONSE_INVALID", retryable=True, detail=f"http_{status}"
            )
        return ProviderOutcome.sent(name, status=str(status))
    error = _fcm_error(content)
    error_code = error.error_code
    detail = error_code or f"http_{status}"
    status_text = str(status)
    if error_code == "UNREGISTERED" or (error_code == "INVALID_ARGUMENT" and error.about_token):
        return push.token_gone(detail, status_text)
    if error_code == "SENDER_ID_MISMATCH":
        return push.token_gone(detail, status_text, "PUSH_SENDER_MISMATCH")
    return push.failure_by_status(
        status,
        detail,
        parse_retry_after(headers.get("retry-after")),
        transient=error_code in ("QUOTA_EXCEEDED", "UNAVAILABLE", "INTERNAL"),
    )


def parse_retry_after(value: str | None, *, now: float | None = None) -> int | None:
    """Retry-After as whole seconds (delta-seconds or an HTTP date), bounded; None if absent."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return min(int(value), MAX_RETRY_AFTER_SECONDS)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    seconds = when.timestamp() - (time.time() if now is None else now)
    return min(max(0, int(seconds + 0.999)), MAX_RETRY_AFTER_SECONDS)


def mask_device_token(token: str) -> str:
    """At most the last 6 characters of a device token, for logs."""
    if len(token) <= 12:
        return "***"
    return f"***{token[-6:]}"


@dataclass(frozen=True)
class _FcmError:
    error_code: str | None  # an allowlisted FCM errorCode, or None
    about_token: bool  # a field violation (or FCM's invalid-token wording) names the token


def _fcm_error(content: bytes) -> _FcmError:
    body = _json_object(content)
    error = body.get("error") if body is not None else None
    if not isinstance(error, dict):
        return _FcmError(None, False)
    error_code: str | None = None
    about_token = False
    details = error.get("details")
    for item in details if isinstance(details, list) else []:
        if not isinstance(item, dict):
            continue
        code = item.get("errorCode")
        if error_code is None and isinstance(code, str) and code in FCM_ERROR_NAMES:
            error_code = code
        violations = item.get("fieldViolations")
        for violation in violations if isinstance(violations, list) else []:
            if isinstance(violation, dict) and violation.get("field") == "message.token":
                about_token = True
    if error_code is None:
        status = error.get("status")
        if isinstance(status, str) and status in FCM_ERROR_NAMES:
            error_code = status
    # FCM often says only "The registration token is not a valid FCM registration token". The
    # text is read to decide, never copied anywhere.
    text = error.get("message")
    if isinstance(text, str) and "registration token" in text.lower():
        about_token = True
    return _FcmError(error_code, about_token)


def _json_object(content: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(content)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None
