"""Browser push: Web Push (RFC 8030) with VAPID (RFC 8292), encrypted as aes128gcm (RFC 8291).

A browser's subscription is a device like a phone's token (platform `webpush`): its push
service's endpoint URL, and the two keys the browser made for it, `p256dh` (its ECDH public key)
and `auth` (a shared secret). Each message is encrypted to those keys by `pywebpush` (through
`http_ece`; no cryptography is written here) and posted to the endpoint, signed with Herald's
VAPID key so the push service knows who sends.

The VAPID key pair is Herald's own, made on first use: its private key is kept in a file outside
the database (HERALD_WEBPUSH_VAPID_KEY_FILE, or `webpush-vapid.key` in the data dir), encrypted
with the vault key (herald.secrets.vault), so the file alone gives nothing away. Every node that
sends must share that one file: a browser subscribed under one public key accepts pushes signed
by that key only.

The endpoint is checked against SSRF when the device is registered and again before each send
(herald.channels.destination), and the request goes to the address that was checked. The push
service's answer is sorted like FCM's (R-CHAN-16): 404 and 410 mean the subscription is gone and
the device is invalidated in the same send, 429 and 5xx are retried (honouring Retry-After), 401
and 403 mean the VAPID signature was refused. The endpoint never reaches a log line.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import httpx
from cryptography.fernet import InvalidToken, MultiFernet
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid02
from pywebpush import WebPusher, WebPushException

from herald.channels import destination, push
from herald.channels.base import Message, ProviderOutcome, http_client
from herald.channels.fcm import parse_retry_after
from herald.config import Settings
from herald.errors import ConfigurationError
from herald.secrets.vault import key_ring

logger = logging.getLogger(__name__)

KEY_FILE_NAME: Final = "webpush-vapid.key"
# A VAPID JWT is valid for at most 24 hours (RFC 8292 §2); one is signed per audience and reused
# until this long before it expires.
_JWT_LIFETIME_SECONDS: Final = 12 * 3600
_JWT_REFRESH_MARGIN_SECONDS: Final = 3600
# RFC 8030 §5.2: the push service may refuse a payload over 4096 bytes (after encryption). The
# body is cut first, so a long announcement still arrives with its title and opening words.
MAX_PAYLOAD_BYTES: Final = 3000
_HIGH_PRIORITIES: Final = frozenset({"high", "urgent"})


def key_file(settings: Settings) -> Path:
    return settings.webpush_vapid_key_file or Path(settings.data_dir) / KEY_FILE_NAME


def load_or_create_vapid(settings: Settings) -> Vapid02:
    """The VAPID key pair, made on first use. The file holds the private key's PEM encrypted with
    the vault key; two processes starting together on a fresh data dir both end up with the
    winner's key (written beside the name, then linked into place)."""
    path = key_file(settings)
    ring = key_ring(settings)
    if not path.exists():
        private = ec.generate_private_key(ec.SECP256R1())
        pem = private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, staging = tempfile.mkstemp(prefix=f".{KEY_FILE_NAME}.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:  # mkstemp creates it 0600
                handle.write(ring.encrypt(pem))
                handle.flush()
                os.fsync(handle.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(staging, path)
        finally:
            os.unlink(staging)
    try:
        pem = ring.decrypt(path.read_bytes().strip())
    except InvalidToken:
        raise ConfigurationError(
            f"{path}: the Web Push key file is not encrypted with this vault key "
            "(HERALD_VAULT_KEY or HERALD_VAULT_OLD_KEYS)"
        ) from None
    return Vapid02.from_pem(pem)


def rotate_key_file(settings: Settings, ring: MultiFernet) -> bool:
    """Re-encrypt the VAPID key file under `ring`'s first key (`herald vault rotate-key`); False
    when there is no file. The key pair itself is unchanged, so no browser subscribes again. The
    new file replaces the old one whole (written beside it, then renamed)."""
    path = key_file(settings)
    if not path.exists():
        return False
    try:
        rotated = ring.rotate(path.read_bytes().strip())
    except InvalidToken:
        raise ConfigurationError(
            f"{path}: the Web Push key file opens under neither the new nor an old vault key"
        ) from None
    fd, staging = tempfile.mkstemp(prefix=f".{KEY_FILE_NAME}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(rotated)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(staging, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging)
        raise
    return True


def public_key(vapid: Vapid02) -> str:
    """The applicationServerKey a browser subscribes with: the uncompressed P-256 point, base64url
    without padding."""
    raw = vapid.public_key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def payload(message: Message) -> bytes:
    """What the service worker receives: JSON with the title, body, link and kind; the body cut
    so the whole stays under MAX_PAYLOAD_BYTES."""
    document: dict[str, str] = {"title": message.title or "", "body": message.body}
    if message.action_url:
        document["url"] = message.action_url
    if message.kind:
        document["kind"] = message.kind
    encoded = json.dumps(document, ensure_ascii=False).encode()
    over = len(encoded) - MAX_PAYLOAD_BYTES
    if over > 0:
        # Cut the body's UTF-8 by what is over (plus the ellipsis), never inside a character; a
        # character JSON escapes (a quote, a newline) takes more room than its UTF-8, so repeat.
        body = document["body"].encode()
        while over > 0 and body:
            body = body[: max(0, len(body) - over - 3)]
            document["body"] = body.decode(errors="ignore") + "…"
            encoded = json.dumps(document, ensure_ascii=False).encode()
            over = len(encoded) - MAX_PAYLOAD_BYTES
    return encoded


def origin(endpoint: str) -> str:
    parts = urlsplit(endpoint)
    default = {"https": 443, "http": 80}.get(parts.scheme)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    return f"{parts.scheme}://{host}" + (f":{port}" if port and port != default else "")


class WebPushProvider:
    """Push to browsers: configured when HERALD_WEBPUSH_VAPID_SUBJECT is set."""

    channel = "push"
    name = "webpush"

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._vapid = load_or_create_vapid(settings) if settings.webpush_vapid_subject else None
        self._client: httpx.AsyncClient | None = None
        # audience → (Authorization header, valid until)
        self._signatures: dict[str, tuple[str, float]] = {}

    def is_configured(self) -> bool:
        return self._vapid is not None

    @property
    def is_mock(self) -> bool:
        return False

    def _authorization(self, audience: str) -> str:
        assert self._vapid is not None and self._settings.webpush_vapid_subject is not None
        now = time.time()
        cached = self._signatures.get(audience)
        if cached is not None and cached[1] - _JWT_REFRESH_MARGIN_SECONDS > now:
            return cached[0]
        expires = int(now) + _JWT_LIFETIME_SECONDS
        claims = {"aud": audience, "sub": self._settings.webpush_vapid_subject, "exp": expires}
        header = str(self._vapid.sign(claims)["Authorization"])
        self._signatures[audience] = (header, float(expires))
        return header

    async def send(self, message: Message) -> ProviderOutcome:
        if self._vapid is None:
            return ProviderOutcome.unconfigured()
        if not message.to or message.push_keys is None:
            return ProviderOutcome(outcome="skipped", skip_reason="no_destination")
        p256dh, auth = message.push_keys
        try:
            pusher = WebPusher({"endpoint": message.to, "keys": {"p256dh": p256dh, "auth": auth}})
            body = pusher.encode(payload(message), "aes128gcm")["body"]
        except (WebPushException, ValueError, TypeError):
            # Keys that were checked at registration and no longer decode: the device is useless.
            return ProviderOutcome.failure(
                "PUSH_TOKEN_INVALID", retryable=False, detail="keys", invalidate_token=True
            )
        settings = self._settings
        try:
            target = await destination.resolve(message.to, settings)
        except (destination.WebhookUrlForbidden, destination.WebhookUrlInvalid):
            return ProviderOutcome.failure(
                "PUSH_TOKEN_INVALID",
                retryable=False,
                detail="endpoint_forbidden",
                invalidate_token=True,
            )
        except destination.WebhookUrlUnresolvable:
            return ProviderOutcome.failure("PUSH_TRANSPORT", retryable=True, detail="dns")
        headers = {
            "host": target.host_header(),
            "authorization": self._authorization(origin(message.to)),
            "content-encoding": "aes128gcm",
            "content-type": "application/octet-stream",
            "ttl": str(settings.webpush_ttl_seconds),
            "urgency": "high" if message.priority in _HIGH_PRIORITIES else "normal",
        }
        extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
        client = self._http()
        try:
            response = await client.post(
                target.request_url(), content=body, headers=headers, extensions=extensions
            )
        except httpx.HTTPError as exc:
            return ProviderOutcome.failure(
                "PUSH_TRANSPORT", retryable=True, detail=type(exc).__name__
            )
        return classify_webpush_response(response.status_code, response.headers)

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = http_client(self._settings, "")
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def classify_webpush_response(status: int, headers: Mapping[str, str]) -> ProviderOutcome:
    """Sort a push service's answer (RFC 8030 §5, §8.4); only the status reaches the detail."""
    detail = f"http_{status}"
    status_text = str(status)
    if status in (200, 201, 202):
        return ProviderOutcome.sent(None, status=status_text)
    if status in (404, 410):
        # The subscription expired or the user revoked it: deactivate the device now.
        return push.token_gone(detail, status_text)
    # 400 (malformed), 413 (payload too large) and anything else not retried: this message
    # will not go.
    return push.failure_by_status(status, detail, parse_retry_after(headers.get("retry-after")))
