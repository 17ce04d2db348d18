"""Build one provider per channel per process (R-PROVIDER-3) and run the boot checks.

Every provider is constructed whether or not its credentials exist (R-PROVIDER-13). At boot each
mock logs one WARN that messages are recorded, not sent (R-OBS-2), and each unconfigured channel
one WARN that its deliveries will be recorded skipped_unconfigured and re-driven automatically
once configured (R-OBS-3) — never a warning per send (R-OBS-4). A channel named in
HERALD_REQUIRED_CHANNELS refuses to boot when unconfigured (R-PROVIDER-16, R-PROVIDER-26), and,
in production, when mocked (R-PROVIDER-19); there is no global "require everything" switch
(R-PROVIDER-17).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from herald.channels.base import Provider
from herald.config import Settings
from herald.errors import ConfigurationError

log = logging.getLogger(__name__)


def build_providers(settings: Settings) -> dict[str, Provider]:
    from herald.channels.mock import MockProvider

    providers: dict[str, Provider] = {}
    email = settings.email_provider
    if email == "resend":
        from herald.channels.resend import ResendEmailProvider

        providers["email"] = ResendEmailProvider(settings)
    elif email == "mock":
        providers["email"] = MockProvider("email", settings)
    else:
        from herald.channels.smtp import SmtpEmailProvider

        providers["email"] = SmtpEmailProvider(settings)

    sms = settings.sms_provider
    if sms == "twilio":
        from herald.channels.twilio import TwilioSmsProvider

        providers["sms"] = TwilioSmsProvider(settings)
    elif sms == "mock":
        providers["sms"] = MockProvider("sms", settings)
    else:
        from herald.channels.aakash import AakashSmsProvider

        providers["sms"] = AakashSmsProvider(settings)

    if settings.push_provider == "mock":
        providers["push"] = MockProvider("push", settings)
    else:
        from herald.channels.fcm import FcmPushProvider

        providers["push"] = FcmPushProvider(settings)

    if settings.telegram_provider == "mock":
        providers["telegram"] = MockProvider("telegram", settings)
    else:
        from herald.channels.telegram import TelegramProvider

        providers["telegram"] = TelegramProvider(settings)

    # Slack and Teams (issue 46): channels for staff.
    if settings.slack_provider == "mock":
        providers["slack"] = MockProvider("slack", settings)
    else:
        from herald.channels.slack import SlackProvider

        providers["slack"] = SlackProvider(settings)

    if settings.teams_provider == "mock":
        providers["teams"] = MockProvider("teams", settings)
    else:
        from herald.channels.teams import TeamsProvider

        providers["teams"] = TeamsProvider(settings)
    return providers


def check_providers(settings: Settings, providers: Mapping[str, Provider]) -> None:
    """The boot checks and the one-time warnings; raises ConfigurationError to refuse to start."""
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
                "re-driven automatically once it is",
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
