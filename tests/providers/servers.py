"""Local servers that speak the providers' protocols, for the provider tests.

Each provider's helpers carry its name as a prefix (smtp_, resend_, …) so several can live here.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import socket
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from typing_extensions import override

# ---------------------------------------------------------------------------------------------
# The HTTP stand-ins' shared plumbing
# ---------------------------------------------------------------------------------------------


class _StubHTTPServer(ThreadingHTTPServer):
    """The loopback server of one stand-in: handler threads are joined at close (daemon_threads
    off), the backlog takes a concurrent-send test's connections, and `owner` is the stand-in
    its handlers read and record into."""

    daemon_threads = False
    request_queue_size = 128
    owner: Any


class StubService:
    """A provider stand-in on a free loopback port, served by one thread. `base_url` is known
    before it starts; `release` ends every held (delayed) answer at shutdown. A context manager:
    started on entry, stopped on exit."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.release = threading.Event()
        self._httpd = _StubHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.owner = self
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()  # joins the handler threads
        self._thread.join()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class StubHandler(BaseHTTPRequestHandler):
    """A stand-in's request handler: the body and lower-cased headers of the request, an answer
    that survives a client that gave up (a read-timeout test), and nothing on stderr."""

    server: _StubHTTPServer

    def read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def lower_headers(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers.items()}

    def answer(
        self,
        status: int,
        payload: bytes,
        headers: Mapping[str, str] | None = None,
        *,
        content_type: str | None = "application/json",
        delay_seconds: float = 0.0,
    ) -> None:
        if delay_seconds:
            self.server.owner.release.wait(delay_seconds)
        try:
            self.send_response(status)
            if content_type is not None:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up; nothing to answer

    @override
    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read what the stand-in recorded, not stderr."""


def json_payload(body: Any) -> bytes:
    """A reply body as sent: bytes as they are, anything else as JSON."""
    return body if isinstance(body, bytes) else json.dumps(body).encode()


# ---------------------------------------------------------------------------------------------
# SMTP (aiosmtpd)
# ---------------------------------------------------------------------------------------------


def smtp_free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (the OS just handed it out and took it back)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@dataclass(frozen=True)
class SmtpReceived:
    """One message the server accepted: the envelope and the raw DATA."""

    mail_from: str
    rcpt_tos: list[str]
    content: bytes


@dataclass
class SmtpRecordingHandler:
    """An aiosmtpd handler that records what it accepts and refuses on request.

    `refuse_rcpt` / `refuse_data` hold a full SMTP reply line (e.g. `550 5.1.1 …`); `{address}`
    in it is replaced by the recipient, so a test can check the reply text never leaks.
    `data_delay_seconds` holds each DATA reply that long, like a provider that takes its time
    (concurrent sessions wait side by side, not in turn).
    """

    received: list[SmtpReceived] = field(default_factory=list)
    refuse_rcpt: str | None = None
    refuse_data: str | None = None
    logins: list[str] = field(default_factory=list)  # usernames that authenticated
    data_delay_seconds: float = 0.0

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: list[str]
    ) -> str:
        if self.refuse_rcpt is not None:
            return self.refuse_rcpt.replace("{address}", address)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.data_delay_seconds:
            await asyncio.sleep(self.data_delay_seconds)
        if self.refuse_data is not None:
            return self.refuse_data
        self.received.append(
            SmtpReceived(
                mail_from=envelope.mail_from,
                rcpt_tos=list(envelope.rcpt_tos),
                content=bytes(envelope.original_content or envelope.content),
            )
        )
        return "250 2.0.0 Message accepted for delivery"


@dataclass(frozen=True)
class SmtpTestServer:
    host: str
    port: int
    handler: SmtpRecordingHandler


@contextmanager
def smtp_server(
    credentials: tuple[str, str] | None = None,
    *,
    handler: SmtpRecordingHandler | None = None,
    port: int | None = None,
) -> Iterator[SmtpTestServer]:
    """A real SMTP server (aiosmtpd, no TLS) on 127.0.0.1 and a free port (or `port`: a server
    that comes back where a stopped one was). With `credentials` it offers AUTH (over plain
    text: this is a test) and accepts only that username/password. `handler` lets a test
    configure the recording handler (a delay, refusals) up front."""
    handler = handler or SmtpRecordingHandler()
    auth: dict[str, Any] = {}
    if credentials is not None:

        def authenticator(
            server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
        ) -> AuthResult:
            ok = (
                isinstance(auth_data, LoginPassword)
                and (
                    auth_data.login.decode(),
                    auth_data.password.decode(),
                )
                == credentials
            )
            if ok:
                handler.logins.append(credentials[0])
            return AuthResult(success=ok, handled=False)

        auth = {"authenticator": authenticator, "auth_require_tls": False}
    controller = Controller(handler, hostname="127.0.0.1", port=port or smtp_free_port(), **auth)
    controller.start()
    try:
        yield SmtpTestServer(controller.hostname, controller.port, handler)
    finally:
        controller.stop()  # also closes the controller's own event loop


# ---------------------------------------------------------------------------------------------
# Resend (POST /emails, https://resend.com/docs/api-reference/emails/send-email)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResendRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class ResendReply:
    """What the server answers next. `body` is sent as JSON unless it is bytes (sent raw)."""

    status: int = 200
    body: Any = None  # None → a success body with a fresh id
    headers: dict[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0  # hold the answer this long (or until the server stops)


def resend_error(status: int, name: str, message: str) -> ResendReply:
    """Resend's documented error payload: `{"statusCode", "name", "message"}`."""
    return ResendReply(status=status, body={"statusCode": status, "name": name, "message": message})


class ResendTestServer(StubService):
    """A local stand-in for api.resend.com. Replies queued with `reply_with` are used in order;
    when none is queued, a send succeeds with a fresh id."""

    def __init__(self) -> None:
        self.requests: list[ResendRequest] = []
        self.replies: deque[ResendReply] = deque()
        super().__init__(_ResendHandler)

    def reply_with(self, *replies: ResendReply) -> None:
        self.replies.extend(replies)


class _ResendHandler(StubHandler):
    def do_POST(self) -> None:
        owner: ResendTestServer = self.server.owner
        owner.requests.append(
            ResendRequest(
                method="POST", path=self.path, headers=self.lower_headers(), body=self.read_body()
            )
        )
        reply = owner.replies.popleft() if owner.replies else ResendReply()
        body = {"id": str(uuid.uuid4())} if reply.body is None else reply.body
        self.answer(
            reply.status, json_payload(body), reply.headers, delay_seconds=reply.delay_seconds
        )


def resend_server() -> ResendTestServer:
    return ResendTestServer()


# ---------------------------------------------------------------------------------------------
# SMS: Aakash (POST /sms/v3/send, POST /sms/v1/credit) and Twilio (POST …/Messages.json).
# One private stub server; the public helpers carry the aakash_ / twilio_ prefix.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _SmsRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes

    @property
    def form(self) -> dict[str, list[str]]:
        """The form fields exactly as the server decoded them (UTF-8, blank values kept)."""
        return parse_qs(self.body.decode("utf-8"), keep_blank_values=True)

    def field(self, name: str) -> str:
        """The single value of form field `name` (fails the test when absent or repeated)."""
        values = self.form[name]
        assert len(values) == 1, f"form field {name} sent {len(values)} times"
        return values[0]


AakashRequest = _SmsRequest
TwilioRequest = _SmsRequest


@dataclass(frozen=True)
class _SmsReply:
    """What the server answers next. `body`: JSON-able, raw bytes, or a function of the request
    (to echo what was sent, as Aakash's failure bodies do); None → the provider's success answer."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0  # hold the answer this long (or until the server stops)


AakashReply = _SmsReply
TwilioReply = _SmsReply


class _SmsStubServer(StubService):
    def __init__(self, default: Callable[[_SmsRequest], _SmsReply]) -> None:
        self.requests: list[_SmsRequest] = []
        self.replies: deque[_SmsReply] = deque()
        self._default = default
        super().__init__(_SmsHandler)
        self.url = self.base_url

    def reply_with(self, *replies: _SmsReply) -> None:
        self.replies.extend(replies)

    def answer(self, request: _SmsRequest) -> _SmsReply:
        self.requests.append(request)
        return self.replies.popleft() if self.replies else self._default(request)


class _SmsHandler(StubHandler):
    def _serve(self) -> None:
        owner: _SmsStubServer = self.server.owner
        request = _SmsRequest(
            method=self.command, path=self.path, headers=self.lower_headers(), body=self.read_body()
        )
        reply = owner.answer(request)
        body = reply.body(request) if callable(reply.body) else reply.body
        self.answer(
            reply.status, json_payload(body), reply.headers, delay_seconds=reply.delay_seconds
        )

    do_GET = _serve
    do_POST = _serve


# --- Aakash ----------------------------------------------------------------------------------

AAKASH_TOKEN = "aakash-test-token-0123456789"
AAKASH_SEND_PATH = "/sms/v3/send"
AAKASH_CREDIT_PATH = "/sms/v1/credit"
AAKASH_NOT_ENOUGH_BALANCE = {"error": True, "message": "Not enough balance.", "data": []}
AAKASH_AUTH_TOKEN_INVALID = {
    "error": True,
    "message": "The provided Auth Token is not valid.",
    "data": [],
}


def aakash_queued(request: _SmsRequest, message_id: int = 2673160) -> dict[str, Any]:
    """Aakash's success answer for one number, echoing the text as the real API does."""
    return {
        "error": False,
        "message": "1 messages has been queued for delivery.",
        "data": {
            "valid": [
                {
                    "id": message_id,
                    "mobile": request.field("to"),
                    "text": request.field("text"),
                    "credit": 1,
                    "network": "ncell",
                    "status": "queued",
                }
            ],
            "invalid": [],
        },
    }


def aakash_invalid_number(request: _SmsRequest) -> dict[str, Any]:
    """The number lands in data.invalid; the answer echoes the text (an OTP) back."""
    return {
        "error": True,
        "message": f"Invalid number {request.field('to')}: {request.field('text')}",
        "data": {
            "valid": [],
            "invalid": [
                {
                    "mobile": request.field("to"),
                    "text": request.field("text"),
                    "credit": 0,
                    "network": "N/A",
                    "status": "aborted",
                }
            ],
        },
    }


def _aakash_default(request: _SmsRequest) -> _SmsReply:
    if request.method != "POST":
        return _SmsReply(status=405, body={"error": True, "message": "Method not allowed."})
    form = request.form
    if form.get("auth_token") != [AAKASH_TOKEN]:
        return _SmsReply(body=AAKASH_AUTH_TOKEN_INVALID)
    if request.path == AAKASH_CREDIT_PATH:
        return _SmsReply(
            body={"available_credit": 1914, "total_sms_sent": 86, "response_code": 202}
        )
    if request.path == AAKASH_SEND_PATH:
        for name in ("to", "text"):
            if not form.get(name):
                return _SmsReply(body={"error": True, "message": f"The {name} field is required."})
        return _SmsReply(body=aakash_queued)
    return _SmsReply(status=404, body=b"<html>Not Found</html>")


def aakash_server() -> _SmsStubServer:
    """A local stand-in for sms.aakashsms.com: base URL `server.url + "/sms/v3"`."""
    return _SmsStubServer(_aakash_default)


# --- Twilio ----------------------------------------------------------------------------------

TWILIO_SID = "AC0123456789abcdef0123456789abcdef"
TWILIO_TOKEN = "twilio-test-token"
TWILIO_FROM = "+15005550006"
TWILIO_MESSAGE_SID = "SM0123456789abcdef0123456789abcdef"
TWILIO_MESSAGES_PATH = f"/2010-04-01/Accounts/{TWILIO_SID}/Messages.json"


def twilio_error(status: int, code: int, message: str) -> _SmsReply:
    """Twilio's documented error payload: `{"code", "message", "more_info", "status"}`."""
    return _SmsReply(
        status=status,
        body={
            "code": code,
            "message": message,
            "more_info": f"https://www.twilio.com/docs/errors/{code}",
            "status": status,
        },
    )


def _twilio_created(request: _SmsRequest) -> dict[str, Any]:
    return {
        "sid": TWILIO_MESSAGE_SID,
        "account_sid": TWILIO_SID,
        "to": request.field("To"),
        "from": (request.form.get("From") or request.form.get("MessagingServiceSid") or [""])[0],
        "body": request.field("Body"),
        "status": "queued",
        "num_segments": "1",
    }


def _twilio_default(request: _SmsRequest) -> _SmsReply:
    expected = "Basic " + base64.b64encode(f"{TWILIO_SID}:{TWILIO_TOKEN}".encode()).decode()
    if request.headers.get("authorization") != expected:
        return twilio_error(401, 20003, "Authenticate")
    if request.method != "POST" or request.path != TWILIO_MESSAGES_PATH:
        return twilio_error(404, 20404, f"The requested resource {request.path} was not found")
    return _SmsReply(status=201, body=_twilio_created)


def twilio_server() -> _SmsStubServer:
    """A local stand-in for api.twilio.com (checks basic auth and the account path)."""
    return _SmsStubServer(_twilio_default)


# ---------------------------------------------------------------------------------------------
# FCM HTTP v1 (POST /v1/projects/{p}/messages:send) with Google's OAuth token endpoint
# (https://firebase.google.com/docs/reference/fcm/rest/v1/projects.messages/send,
#  https://developers.google.com/identity/protocols/oauth2/service-account#httprest)
# ---------------------------------------------------------------------------------------------

FCM_TEST_SCOPE = "https://www.googleapis.com/auth/firebase.messaging"


@dataclass(frozen=True)
class FcmRequest:
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class FcmReply:
    """What the server answers next. `body` is sent as JSON unless it is bytes (sent raw);
    None → success (a message name, or on the token endpoint a fresh access token)."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0  # hold the answer this long (or until the server stops)


def fcm_error(
    status: int,
    status_name: str,
    message: str,
    *,
    error_code: str | None = None,
    field_violation: str | None = None,
    headers: dict[str, str] | None = None,
) -> FcmReply:
    """FCM v1's documented error payload (google.rpc.Status with an FcmError detail)."""
    details: list[dict[str, Any]] = []
    if error_code is not None:
        details.append(
            {
                "@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError",
                "errorCode": error_code,
            }
        )
    if field_violation is not None:
        details.append(
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": field_violation, "description": message}],
            }
        )
    body = {
        "error": {"code": status, "message": message, "status": status_name, "details": details}
    }
    return FcmReply(status=status, body=body, headers=headers or {})


class FcmTestServer(StubService):
    """A local stand-in for fcm.googleapis.com and oauth2.googleapis.com/token.

    The token endpoint checks the JWT assertion's RS256 signature with `public_key_pem`, its
    issuer, scope, audience and lifetime, and issues access tokens valid for `expires_in`;
    messages:send accepts only a bearer token it issued. Queued replies (`reply_with`,
    `token_reply_with`) are used in order, after those checks."""

    def __init__(self, public_key_pem: bytes, client_email: str, project_id: str) -> None:
        self.public_key_pem = public_key_pem
        self.client_email = client_email
        self.project_id = project_id
        self.requests: list[FcmRequest] = []
        self.token_requests: list[dict[str, str]] = []
        self.assertion_claims: list[dict[str, Any]] = []
        self.issued_tokens: list[str] = []
        self.replies: deque[FcmReply] = deque()
        self.token_replies: deque[FcmReply] = deque()
        self.expires_in = 3600
        super().__init__(_FcmHandler)
        self.token_url = f"{self.base_url}/token"
        self.audience = self.token_url

    def reply_with(self, *replies: FcmReply) -> None:
        self.replies.extend(replies)

    def token_reply_with(self, *replies: FcmReply) -> None:
        self.token_replies.extend(replies)

    def check_assertion(self, assertion: str) -> bool:
        import jwt  # local: keeps this section's imports out of the shared header

        try:
            claims: dict[str, Any] = jwt.decode(
                assertion,
                self.public_key_pem,
                algorithms=["RS256"],
                audience=self.audience,
                options={"require": ["iss", "aud", "iat", "exp"]},
            )
        except jwt.PyJWTError:
            return False
        self.assertion_claims.append(claims)
        return (
            claims.get("iss") == self.client_email
            and claims.get("scope") == FCM_TEST_SCOPE
            and 0 < claims["exp"] - claims["iat"] <= 3600
        )


class _FcmHandler(StubHandler):
    def do_POST(self) -> None:
        owner: FcmTestServer = self.server.owner
        body = self.read_body()
        if self.path == "/token":
            form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
            owner.token_requests.append(form)
            reply = owner.token_replies.popleft() if owner.token_replies else FcmReply()
            if reply.body is None and reply.status == 200:
                if form.get(
                    "grant_type"
                ) != "urn:ietf:params:oauth:grant-type:jwt-bearer" or not owner.check_assertion(
                    form.get("assertion", "")
                ):
                    reply = FcmReply(
                        400, {"error": "invalid_grant", "error_description": "Invalid JWT"}
                    )
                else:
                    token = f"ya29.test-{uuid.uuid4().hex}"
                    owner.issued_tokens.append(token)
                    reply = FcmReply(
                        body={
                            "access_token": token,
                            "expires_in": owner.expires_in,
                            "token_type": "Bearer",
                        },
                        delay_seconds=reply.delay_seconds,
                    )
            self._answer(reply)
            return
        owner.requests.append(FcmRequest(path=self.path, headers=self.lower_headers(), body=body))
        if self.path != f"/v1/projects/{owner.project_id}/messages:send":
            self._answer(fcm_error(404, "NOT_FOUND", "Requested entity was not found."))
            return
        bearer = self.headers.get("Authorization", "").removeprefix("Bearer ")
        if bearer not in owner.issued_tokens:
            self._answer(
                fcm_error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
            )
            return
        reply = owner.replies.popleft() if owner.replies else FcmReply()
        if reply.body is None and reply.status == 200:
            name = f"projects/{owner.project_id}/messages/{uuid.uuid4().hex}"
            reply = FcmReply(body={"name": name}, delay_seconds=reply.delay_seconds)
        self._answer(reply)

    def _answer(self, reply: FcmReply) -> None:
        self.answer(
            reply.status,
            json_payload(reply.body),
            reply.headers,
            content_type="application/json; charset=UTF-8",
            delay_seconds=reply.delay_seconds,
        )


def fcm_server(public_key_pem: bytes, client_email: str, project_id: str) -> FcmTestServer:
    return FcmTestServer(public_key_pem, client_email, project_id)


# ---------------------------------------------------------------------------------------------
# Telegram Bot API (POST /bot{token}/sendMessage, https://core.telegram.org/bots/api)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TelegramRequest:
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class TelegramReply:
    """What the server answers next. `body` is sent as JSON unless it is bytes (sent raw);
    None → success with the next message_id."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0


def telegram_error(
    status: int, description: str, *, retry_after: int | None = None
) -> TelegramReply:
    """The Bot API's error answer: `{"ok": false, "error_code", "description", "parameters"}`."""
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if retry_after is not None:
        body["parameters"] = {"retry_after": retry_after}
    return TelegramReply(status=status, body=body)


class TelegramTestServer(StubService):
    """A local stand-in for api.telegram.org for one bot token (others get 401 Unauthorized)."""

    def __init__(self, bot_token: str) -> None:
        self.bot_token = bot_token
        self.requests: list[TelegramRequest] = []
        self.replies: deque[TelegramReply] = deque()
        self._next_message_id = 1000
        self._lock = threading.Lock()
        super().__init__(_TelegramHandler)

    def reply_with(self, *replies: TelegramReply) -> None:
        self.replies.extend(replies)

    def next_message_id(self) -> int:
        with self._lock:
            self._next_message_id += 1
            return self._next_message_id


class _TelegramHandler(StubHandler):
    def do_POST(self) -> None:
        owner: TelegramTestServer = self.server.owner
        body = self.read_body()
        owner.requests.append(
            TelegramRequest(path=self.path, headers=self.lower_headers(), body=body)
        )
        prefix = f"/bot{owner.bot_token}/"
        if not self.path.startswith(prefix):
            self._answer(telegram_error(401, "Unauthorized"))
            return
        if self.path.removeprefix(prefix) != "sendMessage":
            self._answer(telegram_error(404, "Not Found"))
            return
        reply = owner.replies.popleft() if owner.replies else TelegramReply()
        if reply.body is None and reply.status == 200:
            sent = json.loads(body)
            result = {
                "message_id": owner.next_message_id(),
                "chat": {"id": sent.get("chat_id"), "type": "private"},
                "date": 1_700_000_000,
                "text": sent.get("text"),
            }
            reply = TelegramReply(
                body={"ok": True, "result": result}, delay_seconds=reply.delay_seconds
            )
        self._answer(reply)

    def _answer(self, reply: TelegramReply) -> None:
        self.answer(
            reply.status, json_payload(reply.body), reply.headers, delay_seconds=reply.delay_seconds
        )


def telegram_server(bot_token: str) -> TelegramTestServer:
    return TelegramTestServer(bot_token)


# ---------------------------------------------------------------------------------------------
# Slack Web API (POST /api/chat.postMessage with a bearer bot token) and a Microsoft Teams
# incoming/Workflows webhook receiver (POST of a message with an Adaptive Card attachment).
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChatRequest:
    """One request a chat stand-in received."""

    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class ChatReply:
    """What the server answers next. `body` is sent as JSON unless it is bytes (sent raw); None
    → the API's success (Slack: `{"ok": true, "channel", "ts"}`; Teams: 202 with no body)."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0


def slack_error(error: str, *, status: int = 200, retry_after: int | None = None) -> ChatReply:
    """The Web API's error answer, `{"ok": false, "error": "…"}` (HTTP 200 for most errors; 429
    with Retry-After for `ratelimited`)."""
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    return ChatReply(status=status, body={"ok": False, "error": error}, headers=headers)


class ChatTestServer(StubService):
    """A local stand-in for slack.com/api (`kind="slack"`, one bot token: any other is answered
    `invalid_auth`, none `not_authed`) or for Teams webhooks (`kind="teams"`: any path under
    /webhook/ is a live webhook; `gone` holds paths answered 404)."""

    def __init__(self, kind: str, bot_token: str | None = None) -> None:
        self.kind = kind
        self.bot_token = bot_token
        self.requests: list[ChatRequest] = []
        self.replies: deque[ChatReply] = deque()
        self.gone: set[str] = set()
        self._ts = 1_700_000_000
        self._lock = threading.Lock()
        super().__init__(_ChatHandler)

    @property
    def api_url(self) -> str:
        """Slack: the Web API's base URL (HERALD_SLACK_BASE_URL)."""
        return f"{self.base_url}/api/"

    def webhook_url(self, name: str) -> str:
        """Teams: a webhook URL on this server, with a secret-looking token in its path."""
        return f"{self.base_url}/webhook/{name}/IncomingWebhook/{uuid.uuid5(uuid.NAMESPACE_URL, name).hex}"

    def reply_with(self, *replies: ChatReply) -> None:
        self.replies.extend(replies)

    def next_ts(self) -> str:
        with self._lock:
            self._ts += 1
            return f"{self._ts}.000100"


class _ChatHandler(StubHandler):
    def do_POST(self) -> None:
        owner: ChatTestServer = self.server.owner
        request = ChatRequest(path=self.path, headers=self.lower_headers(), body=self.read_body())
        owner.requests.append(request)
        if owner.kind == "slack":
            self._slack(owner, request)
        else:
            self._teams(owner, request)

    def _slack(self, owner: ChatTestServer, request: ChatRequest) -> None:
        if request.path != "/api/chat.postMessage":
            self._answer(slack_error("unknown_method", status=404))
            return
        auth = request.headers.get("authorization", "")
        if not auth:
            self._answer(slack_error("not_authed"))
            return
        if auth != f"Bearer {owner.bot_token}":
            self._answer(slack_error("invalid_auth"))
            return
        reply = owner.replies.popleft() if owner.replies else ChatReply()
        if reply.body is None and reply.status == 200:
            sent = json.loads(request.body)
            reply = ChatReply(
                body={"ok": True, "channel": sent.get("channel"), "ts": owner.next_ts()},
                delay_seconds=reply.delay_seconds,
            )
        self._answer(reply)

    def _teams(self, owner: ChatTestServer, request: ChatRequest) -> None:
        if not request.path.startswith("/webhook/") or request.path in owner.gone:
            self._answer(ChatReply(status=404, body=b"Not Found"))
            return
        reply = owner.replies.popleft() if owner.replies else ChatReply(status=202, body=b"")
        self._answer(reply)

    def _answer(self, reply: ChatReply) -> None:
        self.answer(
            reply.status,
            json_payload(reply.body),
            reply.headers,
            content_type="text/plain" if isinstance(reply.body, bytes) else "application/json",
            delay_seconds=reply.delay_seconds,
        )


def slack_server(bot_token: str) -> ChatTestServer:
    return ChatTestServer("slack", bot_token)


def teams_server() -> ChatTestServer:
    return ChatTestServer("teams")


# ---------------------------------------------------------------------------------------------
# WhatsApp Business Cloud API: the Graph API's messages edge, and Meta's signed webhook
# ---------------------------------------------------------------------------------------------

WHATSAPP_TOKEN = "EAAwhatsapp-test-token-0123456789abcdef"
WHATSAPP_PHONE_NUMBER_ID = "106540352242922"
WHATSAPP_APP_SECRET = "whatsapp-app-secret-0123456789abcdef"
WHATSAPP_VERIFY_TOKEN = "whatsapp-verify-token-fedcba9876543210"
WHATSAPP_VERSION = "v21.0"


def whatsapp_error(
    code: int, *, status: int = 400, message: str = "", retry_after: int | None = None
) -> ChatReply:
    """The Graph API's error answer: `{"error": {"message", "type", "code", "error_data",
    "fbtrace_id"}}`. The message may quote the number or a parameter, as Meta's do."""
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    body = {
        "error": {
            "message": message or f"(#{code}) refused",
            "type": "OAuthException",
            "code": code,
            "error_data": {"messaging_product": "whatsapp", "details": message or "refused"},
            "fbtrace_id": "AbCdEf0123",
        }
    }
    return ChatReply(status=status, body=body, headers=headers)


class WhatsAppTestServer:
    """A local stand-in for graph.facebook.com's `/{version}/{phone_number_id}/messages`.

    It checks what Meta checks: the bearer token (none → 401 code 2500, another → 401 code 190),
    the phone number id in the path (another → 400 code 100), the body's shape (JSON,
    messaging_product whatsapp, type template, digits for `to`) and the template: `templates`
    holds the approved (name, language) → body parameter count; an unknown one is 132001, a
    different count 132000, a parameter that is not text 132012. Scripted replies (`reply_with`)
    answer in order once those checks pass. `api_url` is HERALD_WHATSAPP_API_URL."""

    def __init__(self, token: str = WHATSAPP_TOKEN) -> None:
        self.token = token
        self.phone_number_id = WHATSAPP_PHONE_NUMBER_ID
        self.templates: dict[tuple[str, str], int] = {}
        self.requests: list[ChatRequest] = []
        self.replies: deque[ChatReply] = deque()
        self._seq = 0
        self._lock = threading.Lock()
        self._httpd = _WhatsAppHTTPServer(("127.0.0.1", 0), _WhatsAppHandler)
        self._httpd.owner = self
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/{WHATSAPP_VERSION}"

    def approve(self, name: str, language: str, parameters: int) -> None:
        self.templates[(name, language)] = parameters

    def reply_with(self, *replies: ChatReply) -> None:
        self.replies.extend(replies)

    def next_id(self) -> str:
        with self._lock:
            self._seq += 1
            # Unique across servers too: receipts find their delivery across every tenant.
            return f"wamid.HBgLOTc3OTgxMjM0NTY3OBUCABEYEj{uuid.uuid4().hex}{self._seq:04d}"

    def sent(self) -> list[dict[str, Any]]:
        """The message bodies the server accepted or refused, in order."""
        return [r.json() for r in self.requests]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


class _WhatsAppHTTPServer(ThreadingHTTPServer):
    daemon_threads = False
    request_queue_size = 128
    owner: WhatsAppTestServer


def _whatsapp_check(owner: WhatsAppTestServer, request: ChatRequest) -> ChatReply | None:
    """Meta's own refusals, before any scripted reply."""
    auth = request.headers.get("authorization", "")
    if not auth.startswith("Bearer "):
        return whatsapp_error(2500, status=401, message="An active access token must be used")
    if auth != f"Bearer {owner.token}":
        return whatsapp_error(190, status=401, message="Invalid OAuth access token")
    if request.path != f"/{WHATSAPP_VERSION}/{owner.phone_number_id}/messages":
        return whatsapp_error(100, message="Unsupported post request")
    try:
        sent = json.loads(request.body)
    except ValueError:
        return whatsapp_error(100, message="Invalid JSON")
    if not isinstance(sent, dict) or sent.get("messaging_product") != "whatsapp":
        return whatsapp_error(100, message="messaging_product is required")
    to = sent.get("to")
    if not isinstance(to, str) or not to.lstrip("+").isdigit():
        return whatsapp_error(100, message="Invalid parameter: to")
    template = sent.get("template")
    if sent.get("type") != "template" or not isinstance(template, dict):
        return whatsapp_error(131047, message="Re-engagement message")
    language = template.get("language")
    code = language.get("code") if isinstance(language, dict) else None
    key = (template.get("name"), code)
    if key not in owner.templates:
        return whatsapp_error(132001, status=404, message="Template name does not exist")
    parameters: list[Any] = []
    for component in template.get("components") or []:
        if isinstance(component, dict) and component.get("type") == "body":
            parameters.extend(component.get("parameters") or [])
    if len(parameters) != owner.templates[key]:
        return whatsapp_error(132000, message="Number of parameters does not match")
    for parameter in parameters:
        if (
            not isinstance(parameter, dict)
            or parameter.get("type") != "text"
            or not isinstance(parameter.get("text"), str)
            or not parameter["text"]
            or "\n" in parameter["text"]
        ):
            return whatsapp_error(132012, message="Parameter format does not match")
    return None


class _WhatsAppHandler(BaseHTTPRequestHandler):
    server: _WhatsAppHTTPServer

    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        request = ChatRequest(
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=self.rfile.read(length),
        )
        owner.requests.append(request)
        reply = _whatsapp_check(owner, request)
        if reply is None:
            reply = owner.replies.popleft() if owner.replies else ChatReply()
        if reply.body is None and reply.status == 200:
            to = json.loads(request.body)["to"]
            reply = ChatReply(
                body={
                    "messaging_product": "whatsapp",
                    "contacts": [{"input": to, "wa_id": to.lstrip("+")}],
                    "messages": [{"id": owner.next_id(), "message_status": "accepted"}],
                }
            )
        payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass

    @override
    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read the recorded requests, not stderr."""


@contextmanager
def whatsapp_server(token: str = WHATSAPP_TOKEN) -> Iterator[WhatsAppTestServer]:
    server = WhatsAppTestServer(token)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def whatsapp_status_webhook(
    message_id: str,
    status: str,
    *,
    recipient: str = "9779812345678",
    error_code: int | None = None,
    more: list[dict[str, Any]] | None = None,
) -> bytes:
    """The body Meta posts for a message's status change (the `messages` field's `statuses`),
    as raw bytes: the signature is over exactly these."""
    entry: dict[str, Any] = {
        "id": message_id,
        "status": status,
        "timestamp": "1733580000",
        "recipient_id": recipient,
    }
    if status == "sent":
        entry["conversation"] = {"id": "c0ffee", "origin": {"type": "utility"}}
        entry["pricing"] = {"billable": True, "pricing_model": "PMP", "category": "utility"}
    if error_code is not None:
        entry["errors"] = [
            {
                "code": error_code,
                "title": "Message undeliverable",
                "message": f"Message to {recipient} undeliverable",
                "error_data": {"details": f"could not reach {recipient}"},
            }
        ]
    payload = {
        "object": "whatsapp_business_account",
        "entry": [
            {
                "id": "102290129340398",
                "changes": [
                    {
                        "field": "messages",
                        "value": {
                            "messaging_product": "whatsapp",
                            "metadata": {
                                "display_phone_number": "15550783881",
                                "phone_number_id": WHATSAPP_PHONE_NUMBER_ID,
                            },
                            "statuses": [entry, *(more or [])],
                        },
                    }
                ],
            }
        ],
    }
    return json.dumps(payload).encode()


def whatsapp_signature(body: bytes, secret: str = WHATSAPP_APP_SECRET) -> str:
    """X-Hub-Signature-256 as Meta sends it: `sha256=` and the hex HMAC-SHA256 of the raw body
    keyed by the app secret."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


# ---------------------------------------------------------------------------------------------
# JWKS: an identity provider's key set (GET /.well-known/jwks.json), rotatable by the test.
# ---------------------------------------------------------------------------------------------


class JwksTestServer(StubService):
    """Serves `keys` as a JWK Set and counts the fetches; a test rotates by replacing `keys`."""

    def __init__(self) -> None:
        self.keys: list[dict[str, Any]] = []
        self.fetches = 0
        super().__init__(_JwksHandler)
        self.url = f"{self.base_url}/.well-known/jwks.json"


class _JwksHandler(StubHandler):
    def do_GET(self) -> None:
        owner: JwksTestServer = self.server.owner
        owner.fetches += 1
        self.answer(200, json_payload({"keys": owner.keys}))


def jwks_server() -> JwksTestServer:
    return JwksTestServer()


# ---------------------------------------------------------------------------------------------
# Web Push (RFC 8030 push service, VAPID RFC 8292, aes128gcm RFC 8291)
# ---------------------------------------------------------------------------------------------


@dataclass
class WebPushSubscription:
    """A browser's side of a subscription: its ECDH key pair and auth secret, made here, so the
    test server can decrypt what Herald encrypted to the public half."""

    endpoint: str
    private_key: Any  # cryptography's EllipticCurvePrivateKey
    auth: bytes

    @property
    def p256dh(self) -> str:
        from cryptography.hazmat.primitives import serialization

        raw = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    @property
    def auth_b64(self) -> str:
        return base64.urlsafe_b64encode(self.auth).rstrip(b"=").decode()

    def as_json(self) -> dict[str, Any]:
        """PushSubscription.toJSON()'s shape."""
        return {
            "endpoint": self.endpoint,
            "expirationTime": None,
            "keys": {"p256dh": self.p256dh, "auth": self.auth_b64},
        }


def webpush_subscription(endpoint: str) -> WebPushSubscription:
    """A browser's fresh subscription keys for `endpoint`."""
    import os

    from cryptography.hazmat.primitives.asymmetric import ec

    return WebPushSubscription(
        endpoint=endpoint, private_key=ec.generate_private_key(ec.SECP256R1()), auth=os.urandom(16)
    )


@dataclass(frozen=True)
class WebPushReceived:
    """A push the server accepted: its plaintext (decrypted here), headers and VAPID claims."""

    path: str
    headers: dict[str, str]
    plaintext: bytes
    claims: dict[str, Any]
    vapid_key: str  # the `k` of the Authorization header

    def json(self) -> Any:
        return json.loads(self.plaintext)


@dataclass(frozen=True)
class WebPushReply:
    status: int = 201
    headers: dict[str, str] = field(default_factory=dict)


class WebPushTestServer(StubService):
    """A local push service. Each POST to /push/<id> must carry `Authorization: vapid t=…,k=…`
    whose JWT verifies (ES256) under `k`, names this server's origin as `aud`, has a `sub`
    (mailto: or https:) and expires within 24 hours; its body must decrypt (aes128gcm) under the
    subscription's private key and auth secret. A request failing any check is answered 400/401
    and recorded in `refused` with the reason; queued replies (`reply_with`) are used in order
    after the checks pass."""

    def __init__(self) -> None:
        self.subscriptions: dict[str, WebPushSubscription] = {}
        self.received: list[WebPushReceived] = []
        self.refused: list[str] = []
        self.replies: deque[WebPushReply] = deque()
        # Subscriptions the browser dropped: answered 410 Gone, as a push service does.
        self.gone: set[str] = set()
        super().__init__(_WebPushHandler)
        self.origin = self.base_url

    def subscribe(self) -> WebPushSubscription:
        name = uuid.uuid4().hex
        subscription = webpush_subscription(f"{self.origin}/push/{name}")
        self.subscriptions[name] = subscription
        return subscription

    def reply_with(self, *replies: WebPushReply) -> None:
        self.replies.extend(replies)

    def check(self, path: str, headers: dict[str, str], body: bytes) -> WebPushReceived | str:
        """The accepted push, or why it is refused."""
        import time

        import http_ece
        import jwt
        from cryptography.hazmat.primitives.asymmetric import ec

        subscription = self.subscriptions.get(path.removeprefix("/push/"))
        if subscription is None:
            return "unknown subscription"
        scheme, _, params = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "vapid":
            return "no vapid authorization"
        parts = dict(p.split("=", 1) for p in params.split(",") if "=" in p)
        if "t" not in parts or "k" not in parts:
            return "vapid t or k missing"
        raw_key = base64.urlsafe_b64decode(parts["k"] + "=" * (-len(parts["k"]) % 4))
        public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), raw_key)
        try:
            claims: dict[str, Any] = jwt.decode(
                parts["t"],
                public,
                algorithms=["ES256"],
                audience=self.origin,
                options={"require": ["aud", "exp", "sub"]},
            )
        except jwt.PyJWTError as exc:
            return f"vapid jwt: {type(exc).__name__}"
        if claims["exp"] > time.time() + 86_400:
            return "vapid jwt lives longer than 24 hours"
        if not str(claims["sub"]).startswith(("mailto:", "https:")):
            return "vapid sub is not mailto: or https:"
        if headers.get("content-encoding") != "aes128gcm":
            return "content-encoding is not aes128gcm"
        if "ttl" not in headers:
            return "no TTL header"
        try:
            plaintext = http_ece.decrypt(
                body,
                private_key=subscription.private_key,
                auth_secret=subscription.auth,
                version="aes128gcm",
            )
        except Exception as exc:
            return f"decrypt: {type(exc).__name__}"
        return WebPushReceived(path, headers, plaintext, claims, parts["k"])


class _WebPushHandler(StubHandler):
    def do_POST(self) -> None:
        owner: WebPushTestServer = self.server.owner
        checked = owner.check(self.path, self.lower_headers(), self.read_body())
        if isinstance(checked, str):
            owner.refused.append(checked)
            self._answer(WebPushReply(401 if checked.startswith("vapid") else 400))
            return
        if self.path.removeprefix("/push/") in owner.gone:
            reply = WebPushReply(410)
        else:
            reply = owner.replies.popleft() if owner.replies else WebPushReply()
        if 200 <= reply.status < 300:
            owner.received.append(checked)
        self._answer(reply)

    def _answer(self, reply: WebPushReply) -> None:
        headers = dict(reply.headers)
        if reply.status == 201:
            headers.setdefault("Location", f"{self.server.owner.origin}/message/1")
        self.answer(reply.status, b"", headers, content_type=None)


def webpush_server() -> WebPushTestServer:
    return WebPushTestServer()
