"""Provider construction and the boot checks: required channels, mocks, one warning each."""

from __future__ import annotations

import logging

import pytest

from herald.channels.providers import build_providers, check_providers, configured_channels
from herald.config import Settings
from herald.errors import ConfigurationError


def test_every_provider_is_built_without_credentials() -> None:
    """R-PROVIDER-13, R-PROVIDER-3: one provider per channel, constructed whether or not credentials
    exist, each saying whether it is configured."""
    providers = build_providers(Settings())
    assert sorted(providers) == [
        "email",
        "push",
        "slack",
        "sms",
        "teams",
        "telegram",
        "whatsapp",
    ]
    assert not any(p.is_configured() for p in providers.values())
    assert configured_channels(providers) == []


def test_required_unconfigured_channel_refuses_to_boot() -> None:
    """R-PROVIDER-16, R-PROVIDER-26, R-PROVIDER-17: a channel named in HERALD_REQUIRED_CHANNELS with no
    provider stops the process; requirement is per channel, so other unconfigured channels are fine."""
    settings = Settings(required_channels="sms", email_provider="mock")
    with pytest.raises(ConfigurationError, match="sms"):
        check_providers(settings, build_providers(settings))
    ok = Settings(required_channels="email", email_provider="mock")
    check_providers(
        ok, build_providers(ok)
    )  # email is configured (mock); sms/push/telegram are not


def test_required_mock_refuses_to_boot_in_production() -> None:
    """R-PROVIDER-19, R-PROVIDER-18: a mock reports itself configured, so requiring it passes in
    development but refuses to boot in production, where it would look healthy and send nothing."""
    dev = Settings(required_channels="email", email_provider="mock")
    check_providers(dev, build_providers(dev))
    prod = Settings(required_channels="email", email_provider="mock", environment="production")
    with pytest.raises(ConfigurationError, match="mock"):
        check_providers(prod, build_providers(prod))


def test_one_boot_warning_per_mock_or_unconfigured_channel(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R-OBS-2, R-OBS-3: at boot, one WARN per mock ("recorded, not sent") and per unconfigured channel
    ("skipped_unconfigured, re-driven"); nothing for a configured one."""
    settings = Settings(email_provider="mock", smtp_host=None)
    with caplog.at_level(logging.WARNING, logger="herald.channels.providers"):
        check_providers(settings, build_providers(settings))
    lines = [r.getMessage() for r in caplog.records if r.name == "herald.channels.providers"]
    assert len(lines) == 7
    assert sum("mock provider" in line for line in lines) == 1
    assert sum("skipped_unconfigured" in line for line in lines) == 6


def test_unknown_required_channel_is_a_configuration_error() -> None:
    """R-OPS-14: HERALD_REQUIRED_CHANNELS names only real channels."""
    with pytest.raises(ValueError, match="fax"):
        Settings(required_channels="email,fax")


def test_channel_concurrency_is_the_seeds() -> None:
    """R-CHAN-19: per-channel provider concurrency — sms 2, email 4, push 8 (Telegram 4, under its
    own rate limiter); SMS, which is paid, also claims in small batches."""
    from herald.delivery.worker import BATCH_LIMIT, CONCURRENCY

    assert CONCURRENCY == {
        "sms": 2,
        "email": 4,
        "push": 8,
        "telegram": 4,
        "slack": 4,
        "teams": 4,
        "whatsapp": 4,
    }
    assert BATCH_LIMIT["sms"] <= 2 * CONCURRENCY["sms"]


def test_importing_herald_starts_nothing() -> None:
    """R-OPS-1, R-OPS-2: importing the library and its API app starts no thread and no worker; workers
    run only in `herald worker` / `herald dev`."""
    import subprocess
    import sys

    code = (
        "import threading, herald, herald.api.app, herald.sending.service, herald.runtime.worker\n"
        "assert threading.active_count() == 1, threading.enumerate()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_herald_dev_keeps_a_failover_list_and_mocks_the_rest() -> None:
    """`herald dev` mocks each channel left unset; a channel with HERALD_*_PROVIDERS is set."""
    from herald.demo.dev import DevState, dev_settings

    settings = dev_settings(
        Settings(email_providers="smtp,smtp_backup", smtp_host="a", smtp_backup_host="b"),
        DevState(),
    )
    providers = build_providers(settings)
    assert providers["email"].name == "smtp+smtp_backup"
    assert providers["sms"].is_mock and providers["push"].is_mock
