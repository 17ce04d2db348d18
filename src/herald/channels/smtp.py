"""Email over SMTP (aiosmtplib): configured when HERALD_SMTP_HOST is set.

One connection per send: the email worker sends a handful at a time (R-CHAN-19), and a fresh
connection cannot inherit a half-finished session from a timed-out send.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import ssl

import aiosmtplib

from herald.channels import email
from herald.channels.base import Message, ProviderOutcome
from herald.config import Settings

log = logging.getLogger(__name__)

IMPLICIT_TLS_PORT = 465
# The enhanced status code (RFC 3463) at the start of a reply, e.g. `5.1.1`: digits only, so it
# is safe to keep in a detail; the rest of the reply can quote the address and is dropped.
_ENHANCED_STATUS = re.compile(r"\s*([245]\.\d{1,3}\.\d{1,3})\b")


class SmtpEmailProvider:
    """The email channel over SMTP. Constructed with or without a host (R-PROVIDER-13)."""

    channel = "email"
    name = "smtp"

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._local_hostname: str | None = None

    def is_configured(self) -> bool:
        return bool(self._settings.smtp_host)

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
        try:
            built = email.build_email(message, self._settings)
            await self._deliver(built)
        except aiosmtplib.SMTPRecipientsRefused as exc:
            refusal = exc.recipients[0] if exc.recipients else None
            if refusal is None:
                return self._transport(message, exc)
            return self._answered(message, refusal)
        except (aiosmtplib.SMTPSenderRefused, aiosmtplib.SMTPDataError) as exc:
            return self._answered(message, exc)
        except (aiosmtplib.SMTPException, OSError, ssl.SSLError, TimeoutError) as exc:
            # Connection refused, DNS, TLS, timeouts, a dropped session, a refused HELO or AUTH:
            # nothing was decided about this message, so it is retried (R-PROVIDER-8).
            return self._transport(message, exc)
        except Exception as exc:
            return email.unknown_failure(log, self.name, message, exc)
        return ProviderOutcome.sent(built.message_id, status="250")

    async def _deliver(self, built: email.BuiltEmail) -> None:
        settings = self._settings
        implicit_tls = settings.smtp_port == IMPLICIT_TLS_PORT
        client = aiosmtplib.SMTP(
            hostname=settings.smtp_host,
            port=settings.smtp_port,
            username=settings.smtp_username or None,
            password=settings.smtp_password if settings.smtp_username else None,
            local_hostname=await self._ehlo_name(),
            # Every command after the connect waits at most the read timeout (R-PROVIDER-23).
            timeout=settings.provider_read_timeout_seconds,
            use_tls=implicit_tls,
            start_tls=settings.smtp_starttls and not implicit_tls,
        )
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

    def _answered(self, message: Message, exc: aiosmtplib.SMTPResponseException) -> ProviderOutcome:
        """The server answered with a code. 5xx is a decision about this message (R-PROVIDER-7);
        4xx means "try again later" (greylisting, a full queue), so it is transport."""
        code = exc.code
        enhanced = _ENHANCED_STATUS.match(exc.message or "")
        detail = f"smtp {code} {enhanced.group(1)}" if enhanced else f"smtp {code}"
        if 500 <= code < 600:
            log.warning(
                "email via smtp to %s rejected: %s %s",
                email.mask_email(message.to),
                type(exc).__name__,
                detail,
            )
            return email.rejected(None, fallback=f"smtp_{code}", detail=detail, status=str(code))
        log.warning(
            "email via smtp to %s deferred (will retry): %s %s",
            email.mask_email(message.to),
            type(exc).__name__,
            detail,
        )
        return email.transport_failure(detail=detail, status=str(code))

    def _transport(self, message: Message, exc: BaseException) -> ProviderOutcome:
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
            "email via smtp to %s failed (transport, will retry): %s: %s",
            email.mask_email(message.to),
            type(exc).__name__,
            text,
        )
        return email.transport_failure(detail=type(exc).__name__, status=status)
