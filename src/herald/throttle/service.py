"""The throttle (issue 16): a per-person, per-category cap on paid channels within a window.

Off by default (HERALD_THROTTLE_SMS_PER_CATEGORY=0). When set, a claimed SMS delivery whose
person already had that many SMS in the same category within HERALD_THROTTLE_WINDOW_SECONDS is
recorded `skipped_throttled` instead of sent: no attempt, no dead letter, visible in the history
as such. In-app and the free channels are never throttled, nor the security and account
categories (one-time codes and resets must arrive). Checked when the worker loads its claimed
batch, so it counts what was really sent, not what was planned. Each skip is counted in
herald_throttle_skips_total{channel, category}.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.config import Settings
from herald.observability import metrics
from herald.throttle import queries

PAID_CHANNELS = ("sms",)


def enabled(settings: Settings, channel: str) -> bool:
    return channel in PAID_CHANNELS and settings.throttle_sms_per_category > 0


async def mark_throttled(
    conn: AsyncConnection, contexts: Sequence[dict[str, Any]], settings: Settings
) -> None:
    """Flag the contexts (of one tenant, under it) that are past the cap: `throttled` = True."""
    if not contexts or not enabled(settings, contexts[0]["channel"]):
        return
    over = await queries.throttled_deliveries(
        conn,
        [c["id"] for c in contexts],
        cap=settings.throttle_sms_per_category,
        window_seconds=settings.throttle_window_seconds,
        exempt=vocabulary.UNSUPPRESSIBLE_CATEGORIES,
    )
    for context in contexts:
        context["throttled"] = context["id"] in over
    for category in over.values():
        metrics.THROTTLE_SKIPS.labels(contexts[0]["channel"], category).inc()
