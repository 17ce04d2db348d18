"""The claim size of a channel (delivery.worker.Pace): what its provider sends in BATCH_SECONDS."""

from __future__ import annotations

from herald.delivery.worker import BATCH_LIMIT, BATCH_SECONDS, PACED_LIMIT, Pace


def test_a_full_batch_sets_the_next_claim_to_the_providers_pace_within_the_bounds() -> None:
    pace = Pace("email")
    assert pace.limit == BATCH_LIMIT["email"]
    pace.observe(200, 200, 200 / 300)  # 300 a second
    assert pace.limit == int(300 * BATCH_SECONDS)
    pace.observe(pace.limit, pace.limit, 0.01)  # at once
    assert pace.limit == PACED_LIMIT["email"]
    pace.observe(pace.limit, pace.limit, 100.0)  # the provider slowed to 10 a second
    assert pace.limit == BATCH_LIMIT["email"]


def test_a_batch_the_queue_could_not_fill_changes_nothing() -> None:
    pace = Pace("email")
    pace.observe(3, 200, 0.001)  # three rows were due, sent at once: no measure of the pace
    assert pace.limit == BATCH_LIMIT["email"]


def test_sms_and_telegram_keep_their_small_batches() -> None:
    for channel in ("sms", "telegram"):
        pace = Pace(channel)
        pace.observe(pace.limit, pace.limit, 0.001)
        assert pace.limit == BATCH_LIMIT[channel]
