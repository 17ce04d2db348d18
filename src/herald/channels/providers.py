"""Build one provider per channel per process (R-PROVIDER-3) and run the boot checks.

Every provider is constructed whether or not its credentials exist (R-PROVIDER-13). At boot each
mock logs one WARN that messages are recorded, not sent (R-OBS-2), and each unconfigured channel
one WARN that its deliveries will be recorded skipped_unconfigured and re-driven automatically
once configured (R-OBS-3) — never a warning per send (R-OBS-4). A channel named in
HERALD_REQUIRED_CHANNELS refuses to boot when unconfigured (R-PROVIDER-16, R-PROVIDER-26), and,
in production, when mocked (R-PROVIDER-19); there is no global "require everything" switch
(R-PROVIDER-17). A channel listing several providers (HERALD_EMAIL_PROVIDERS,
HERALD_SMS_PROVIDERS) gets one FailoverProvider over them (herald.channels.failover), and refuses
to boot when one of them is not configured.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from herald.channels.base import Provider
from herald.config import Settings
from herald.errors import ConfigurationError

log = logging.getLogger(__name__)


CHANNELS = ("email", "sms", "push", "telegram", "slack", "teams", "whatsapp")


def build_providers(settings: Settings) -> dict[str, Provider]:
    return {channel: build_channel(settings, channel) for channel in CHANNELS}


def build_channel(settings: Settings, channel: str) -> Provider:
    """One channel's provider from `settings`: the deployment's, or a tenant's own (the
    deployment's Settings with the tenant's provider accounts laid over them,
    herald.channels.accounts)."""
    from herald.channels.mock import MockProvider

    if channel == "email":
        return _channel_provider(settings, "email", settings.email_provider_list)
    if channel == "sms":
        return _channel_provider(settings, "sms", settings.sms_provider_list)
    if channel == "push":
        if settings.push_provider == "mock":
            return MockProvider("push", settings)
        from herald.channels.fcm import FcmPushProvider
        from herald.channels.push import PushProvider
        from herald.channels.webpush import WebPushProvider

        return PushProvider(FcmPushProvider(settings), WebPushProvider(settings))
    if channel == "telegram":
        if settings.telegram_provider == "mock":
            return MockProvider("telegram", settings)
        from herald.channels.telegram import TelegramProvider

        return TelegramProvider(settings)
    # Slack and Teams (issue 46): channels for staff.
    if channel == "slack":
        if settings.slack_provider == "mock":
            return MockProvider("slack", settings)
        from herald.channels.slack import SlackProvider

        return SlackProvider(settings)
    if channel == "teams":
        if settings.teams_provider == "mock":
            return MockProvider("teams", settings)
        from herald.channels.teams import TeamsProvider

        return TeamsProvider(settings)
    # WhatsApp Business Cloud API (issue 46): approved templates to each person's phone.
    if channel == "whatsapp":
        if settings.whatsapp_provider == "mock":
            return MockProvider("whatsapp", settings)
        from herald.channels.whatsapp import WhatsAppProvider

        return WhatsAppProvider(settings)
    raise ValueError(f"no provider for channel {channel!r}")


def _channel_provider(settings: Settings, channel: str, names: list[str]) -> Provider:
    """The channel's one provider, or a FailoverProvider over several, in the order listed."""
    built = [_named(settings, channel, name) for name in names]
    if len(built) == 1:
        return built[0]
    from herald.channels.failover import FailoverProvider

    return FailoverProvider(
        channel,
        built,
        threshold=settings.provider_circuit_failures,
        cooldown=settings.provider_circuit_cooldown_seconds,
    )


def _named(settings: Settings, channel: str, name: str) -> Provider:
    if name == "mock":
        from herald.channels.mock import MockProvider

        return MockProvider(channel, settings)
    if name == "resend":
        from herald.channels.resend import ResendEmailProvider

        return ResendEmailProvider(settings)
    if name in ("smtp", "smtp_backup"):
        from herald.channels.smtp import SmtpEmailProvider, SmtpServer

        server = SmtpServer.backup(settings) if name == "smtp_backup" else None
        return SmtpEmailProvider(settings, server)
    if name == "twilio":
        from herald.channels.twilio import TwilioSmsProvider

        return TwilioSmsProvider(settings)
    from herald.channels.aakash import AakashSmsProvider

    return AakashSmsProvider(settings)


# What configures each provider, for the line that refuses a list naming an unconfigured one.
_CONFIGURED_BY = {
    "smtp": "HERALD_SMTP_HOST",
    "smtp_backup": "HERALD_SMTP_BACKUP_HOST",
    "resend": "HERALD_RESEND_API_KEY",
    "aakash": "HERALD_AAKASH_AUTH_TOKEN",
    "twilio": "HERALD_TWILIO_ACCOUNT_SID, HERALD_TWILIO_AUTH_TOKEN and HERALD_TWILIO_FROM",
}


def check_providers(settings: Settings, providers: Mapping[str, Provider]) -> None:
    """The boot checks and the one-time warnings; raises ConfigurationError to refuse to start."""
    from herald.channels.failover import FailoverProvider

    for channel, listed in sorted(providers.items()):
        # A failover list says the deployment means each provider in it: one that cannot send
        # would be passed over on every send, silently.
        if isinstance(listed, FailoverProvider):
            for member in listed.providers:
                if not member.is_configured():
                    raise ConfigurationError(
                        f"HERALD_{channel.upper()}_PROVIDERS names {member.name}, which is not "
                        f"configured (set {_CONFIGURED_BY.get(member.name, 'its settings')})"
                    )
    for channel in sorted(settings.required_channel_set - {"in_app"}):
        provider = providers.get(channel)
        if provider is None or not provider.is_configured():
            raise ConfigurationError(
                f"HERALD_REQUIRED_CHANNELS names {channel}, whose provider is not configured"
            )
        if provider.is_mock and settings.is_production:
            raise ConfigurationError(
                f"HERALD_REQUIRED_CHANNELS names {channel}, which is mocked in production"
            )
    for channel, provider in sorted(providers.items()):
        if provider.is_mock:
            log.warning(
                "%s: mock provider — messages are recorded for `herald dev`, not sent", channel
            )
        elif not provider.is_configured():
            log.warning(
                "%s: no provider configured — deliveries are recorded skipped_unconfigured and "
                "re-driven automatically once it is (for a tenant, also once its own provider "
                "account configures it)",
                channel,
            )


def configured_channels(providers: Mapping[str, Provider]) -> list[str]:
    """Channels whose provider can really send now: what backfill may re-drive (R-BACKFILL-3)."""
    return sorted(c for c, p in providers.items() if p.is_configured() and not p.is_mock)


async def close_providers(providers: Mapping[str, Provider]) -> None:
    for provider in providers.values():
        try:
            await provider.aclose()
        except Exception:
            log.warning("closing the %s provider failed", provider.name, exc_info=True)
