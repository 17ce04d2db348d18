"""Email over SMTP (aiosmtplib): configured when HERALD_SMTP_HOST is set (the `smtp` provider),
or HERALD_SMTP_BACKUP_HOST (`smtp_backup`, a second server for failover).

One connection per send: the email worker sends a handful at a time (R-CHAN-19), and a fresh
connection cannot inherit a half-finished session from a timed-out send.

A failure is a certain non-send (`not_sent`, so failover may try another provider) when it came
before the message was handed over: the connect, greeting, TLS, EHLO and AUTH, or any 4xx reply
(the server refused to take it, now), or a 5xx to MAIL FROM (this server will not send for us).
A connection lost or a timeout once DATA has begun is ambiguous — the server may have queued the
message — and a 5xx to RCPT TO or to the message itself is a verdict on the message: neither is
ever sent through another provider in the same attempt.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import ssl
from dataclasses import dataclass, field
from typing import Any

import aiosmtplib
from typing_extensions import override

from herald.channels import email
from herald.channels.base import Message, ProviderOutcome
from herald.config import Settings

log = logging.getLogger(__name__)

IMPLICIT_TLS_PORT = 465
# The enhanced status code (RFC 3463) at the start of a reply, e.g. `5.1.1`: digits only, so it
# is safe to keep in a detail; the rest of the reply can quote the address and is dropped.
_ENHANCED_STATUS = re.compile(r"\s*([245]\.\d{1,3}\.\d{1,3})\b")


@dataclass(frozen=True)
class SmtpServer:
    """Where one SMTP provider sends: its name (the evidence's), host, port and login."""

    name: str
    host: str | None
    port: int
    username: str | None
    password: str | None = field(repr=False)  # never in a log line or a traceback's locals
    starttls: bool = True

    @staticmethod
    def primary(settings: Settings) -> SmtpServer:
        return SmtpServer(
            "smtp",
            settings.smtp_host,
            settings.smtp_port,
            settings.smtp_username,
            settings.smtp_password,
            settings.smtp_starttls,
        )

    @staticmethod
    def backup(settings: Settings) -> SmtpServer:
        return SmtpServer(
            "smtp_backup",
            settings.smtp_backup_host,
            settings.smtp_backup_port,
            settings.smtp_backup_username,
            settings.smtp_backup_password,
            settings.smtp_backup_starttls,
        )


class _Session(aiosmtplib.SMTP):
    """An SMTP session that notes when DATA began: from then on a lost connection or a timeout
    may leave the message queued at the server (the ambiguous failure)."""

    data_started = False

    @override
    async def data(self, message: str | bytes, /, **kwargs: Any) -> aiosmtplib.SMTPResponse:
        self.data_started = True
        return await super().data(message, **kwargs)


class SmtpEmailProvider:
    """The email channel over SMTP. Constructed with or without a host (R-PROVIDER-13)."""

    channel = "email"

    def __init__(self, settings: Settings, server: SmtpServer | None = None) -> None:
        self._settings = settings
        self._server = server or SmtpServer.primary(settings)
        self.name = self._server.name
        self._local_hostname: str | None = None

    def is_configured(self) -> bool:
        return bool(self._server.host)

    @property
    def is_mock(self) -> bool:
        return False

    async def aclose(self) -> None:
        """Nothing is held between sends."""

    async def send(self, message: Message) -> ProviderOutcome:
        if not self.is_configured():
            return ProviderOutcome.unconfigured()  # quietly (R-PROVIDER-14, R-OBS-4)
        problem = email.address_problem(message)
        if problem is not None:
            return problem
        session: list[_Session] = []
        try:
            built = email.build_email(message, self._settings)
            await self._deliver(built, session)
        except aiosmtplib.SMTPRecipientsRefused as exc:
            refusal = exc.recipients[0] if exc.recipients else None
            if refusal is None:
                return self._transport(message, exc, not_sent=True)
            return self._answered(message, refusal, stage="rcpt")
        except aiosmtplib.SMTPSenderRefused as exc:
            return self._answered(message, exc, stage="mail")
        except aiosmtplib.SMTPDataError as exc:
            return self._answered(message, exc, stage="data")
        except (aiosmtplib.SMTPException, OSError, ssl.SSLError, TimeoutError) as exc:
            # Connection refused, DNS, TLS, timeouts, a dropped session, a refused HELO or AUTH:
            # nothing was decided about this message, so it is retried (R-PROVIDER-8). Certainly
            # not sent unless DATA had begun (then the server may have queued it).
            data_started = bool(session) and session[0].data_started
            return self._transport(message, exc, not_sent=not data_started)
        except Exception as exc:
            return email.unknown_failure(log, self.name, message, exc)
        return ProviderOutcome.sent(built.message_id, status="250")

    async def _deliver(self, built: email.BuiltEmail, session: list[_Session]) -> None:
        settings, server = self._settings, self._server
        implicit_tls = server.port == IMPLICIT_TLS_PORT
        client = _Session(
            hostname=server.host,
            port=server.port,
            username=server.username or None,
            password=server.password if server.username else None,
            local_hostname=await self._ehlo_name(),
            # Every command after the connect waits at most the read timeout (R-PROVIDER-23).
            timeout=settings.provider_read_timeout_seconds,
            use_tls=implicit_tls,
            start_tls=server.starttls and not implicit_tls,
        )
        session.append(client)
        # The TCP connect and the server's greeting wait at most 3 s (R-PROVIDER-22).
        await client.connect(timeout=settings.provider_connect_timeout_seconds)
        try:
            await client.send_message(
                built.as_mime(), sender=built.envelope_from, recipients=[built.to]
            )
        finally:
            try:
                await client.quit()
            except (aiosmtplib.SMTPException, OSError):
                # The message is already accepted (or already failed); a failed QUIT changes
                # nothing about it.
                client.close()

    async def _ehlo_name(self) -> str:
        # getfqdn can be slow on a badly configured resolver: ask once per process, not per send.
        if self._local_hostname is None:
            self._local_hostname = await asyncio.to_thread(socket.getfqdn)
        return self._local_hostname

    def _answered(
        self, message: Message, exc: aiosmtplib.SMTPResponseException, *, stage: str
    ) -> ProviderOutcome:
        """The server answered with a code. 5xx is a decision about this message (R-PROVIDER-7);
        4xx means "try again later" (greylisting, a full queue), so it is transport. Either way
        the server did not take the message; only a 5xx to MAIL FROM (about us, the sender, not
        the message) lets another provider try it now."""
        code = exc.code
        enhanced = _ENHANCED_STATUS.match(exc.message or "")
        detail = f"smtp {code} {enhanced.group(1)}" if enhanced else f"smtp {code}"
        if 500 <= code < 600:
            log.warning(
                "email via %s to %s rejected: %s %s",
                self.name,
                email.mask_email(message.to),
                type(exc).__name__,
                detail,
            )
            return email.rejected(
                None,
                fallback=f"smtp_{code}",
                detail=detail,
                status=str(code),
                not_sent="provider" if stage == "mail" else None,
            )
        log.warning(
            "email via %s to %s deferred (will retry): %s %s",
            self.name,
            email.mask_email(message.to),
            type(exc).__name__,
            detail,
        )
        return email.transport_failure(detail=detail, status=str(code), not_sent="provider")

    def _transport(
        self, message: Message, exc: BaseException, *, not_sent: bool
    ) -> ProviderOutcome:
        # R-PROVIDER-9: the class and text tell DNS faults from outages. A reply from the server
        # is reduced to its code (its text can quote the address); our own socket, DNS and TLS
        # errors keep their text, with the address masked (R-PROVIDER-10).
        if isinstance(exc, aiosmtplib.SMTPResponseException):
            text = f"smtp {exc.code}"
            status: str | None = str(exc.code)
        else:
            text = email.scrub(str(exc), message)
            status = None
        log.warning(
            "email via %s to %s failed (transport, will retry): %s: %s",
            self.name,
            email.mask_email(message.to),
            type(exc).__name__,
            text,
        )
        return email.transport_failure(
            detail=type(exc).__name__, status=status, not_sent="provider" if not_sent else None
        )
