"""Fixtures shared by the integration tests that need them by name."""

from __future__ import annotations

from tests.integration.reminder_helpers import reminder_settings, reminders_client

__all__ = ["reminder_settings", "reminders_client"]
