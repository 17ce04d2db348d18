"""Why a delivery stands where it does, in words an operator understands.

Shared by the trace (which also names the preference rule, from the person's preferences as they
stand now) and the history screen (which reads no person, so says only "preferences"). Every
reason is read from what the record holds: the status, the code part of `last_error`, and whether
a provider was called (a `skipped` attempt row is the mock provider's answer; an unconfigured
channel never calls anything).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from herald.kinds import Registry
from herald.preferences import queries as preference_queries
from herald.preferences.service import category_default

CHANNEL_WORDS: Mapping[str, str] = {
    "in_app": "inbox",
    "email": "email",
    "sms": "SMS",
    "push": "push",
    "telegram": "Telegram",
    "slack": "Slack",
    "teams": "Microsoft Teams",
    "whatsapp": "WhatsApp",
}

_NO_DESTINATION: Mapping[str, str] = {
    "email": "No email address on file for this person.",
    "sms": "No phone number on file for this person.",
    "push": "No active push device registered for this person.",
    "telegram": "This person has not linked Telegram, or blocked the bot.",
    "slack": "No Slack id on file for this person, or Slack said it is gone or closed to the bot.",
    "teams": "No Teams webhook on file for this person, or Teams said it was deleted.",
    "whatsapp": "No usable phone number on file for this person, or WhatsApp said it cannot reach it.",
    "in_app": "No destination for the inbox.",
}


def channel_word(channel: str) -> str:
    return CHANNEL_WORDS.get(channel, channel)


def error_code_of(last_error: str | None) -> str | None:
    """The code part of `last_error` ("CODE (detail)"), never the detail."""
    if not last_error:
        return None
    return last_error.split(" ", 1)[0].strip() or None


class PreferenceView:
    """One person's stored choices, resolved the way the fan-out resolves them (steps 2-4 of
    herald.preferences.service), but saying which step decided."""

    def __init__(
        self,
        switches: Mapping[str, bool],
        overrides: Mapping[tuple[str, str], bool],
    ) -> None:
        self.switches = switches
        self.overrides = overrides

    @classmethod
    async def load(cls, conn: AsyncConnection, tenant_id: str, person_id: int) -> PreferenceView:
        stored = await preference_queries.select_person_set(conn, tenant_id, person_id)
        return cls(stored.switches, stored.overrides)

    def rule(self, category: str, channel: str) -> tuple[str, bool]:
        """(which step decided, its answer): category | global | default."""
        override = self.overrides.get((category, channel))
        if override is not None:
            return "category", override
        switch = self.switches.get(channel)
        if switch is not None:
            return "global", switch
        return "default", category_default(category, channel)

    def explain(self, category: str, channel: str) -> tuple[str, str]:
        word = channel_word(channel)
        step, allowed = self.rule(category, channel)
        if allowed:
            return (
                "preference_changed_since",
                f"Switched off by their preferences at the time; their preferences now allow "
                f"{word} for {category}, so they were changed since.",
            )
        if step == "category":
            return (
                "preference_category_off",
                f"Switched off by their own setting: {word} off for {category} "
                f"(as their preferences stand now).",
            )
        if step == "global":
            return (
                "preference_global_off",
                f"Switched off by their own setting: {word} off for everything "
                f"(as their preferences stand now).",
            )
        return (
            "preference_default_off",
            f"Off by Herald's default for {category} on {word}; they never switched it on "
            f"(as their preferences stand now).",
        )


def delivery_reason(
    row: Mapping[str, Any],
    category: str,
    preferences: PreferenceView | None,
    registry: Registry | None = None,
    kind: str | None = None,
) -> tuple[str, str]:
    """(reasonCode, reason) for one delivery row."""
    status, channel = row["status"], row["channel"]
    word = channel_word(channel)
    code = error_code_of(row.get("last_error"))
    if status == "delivered":
        if channel == "in_app":
            return "in_inbox", "In their inbox."
        return "delivered", f"Delivered by the {word} provider (it confirmed delivery)."
    if status == "sent":
        return "sent", f"Handed to the {word} provider; no delivery receipt yet."
    if status == "queued":
        if row.get("replay_of_delivery_id") is not None:
            return "queued_replay", f"A replay, waiting to be sent by {word}."
        until = row.get("waiting_until")
        if until is not None:
            moment = until.astimezone(UTC).isoformat()
            if channel == "in_app":
                return (
                    "waiting",
                    f"waiting until {moment}: the person's own hour (deliverAt), then shown in "
                    "their inbox.",
                )
            return (
                "waiting",
                f"waiting until {moment}: the person's own hour (deliverAt) or the end of their "
                f"quiet hours, then sent by {word}.",
            )
        if row.get("attempts"):
            return "queued_retry", f"Waiting for another try on {word} after an earlier failure."
        return "queued", f"Waiting to be sent by {word}."
    if status == "processing":
        return "processing", f"Being sent by {word} right now."
    if status == "failed":
        return (
            "provider_failed_will_retry",
            f"The {word} provider refused it ({code or 'no code'}); Herald will try again.",
        )
    if status == "dead":
        return (
            "provider_failed_gave_up",
            f"The {word} provider refused it ({code or 'no code'}) and Herald gave up after "
            f"{row.get('attempts', 0)} attempt(s); it is in the dead letters.",
        )
    if status == "skipped_unconfigured":
        if row.get("provider_was_mock"):
            return (
                "mock_provider",
                f"Mock provider, not delivered: {word} is set to the mock provider, which "
                "records messages and sends nothing. Configure a real provider and backfill "
                "re-sends it.",
            )
        return (
            "provider_unconfigured",
            f"No provider configured for {word}; nothing was sent. Backfill re-sends it once "
            "one is configured.",
        )
    if status == "skipped_no_destination":
        return "no_destination", _NO_DESTINATION.get(channel, "No destination on file.")
    if status == "skipped_recipient_gone":
        return (
            "recipient_gone",
            "The person was suspended, limited or deleted when the message went out.",
        )
    if status == "skipped_no_template":
        known = registry.get(kind) if registry is not None and kind is not None else None
        if known is not None and channel not in known.channels:
            return "no_template", f"This kind has no {word} wording, so {word} was not used."
        return "no_template", f"No {word} wording for this kind in the person's language."
    if status == "skipped_preference":
        if preferences is None:
            return "preference", f"Switched off by their preferences for {word}."
        return preferences.explain(category, channel)
    return status, status
