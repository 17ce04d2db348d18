"""The inbox list writes its JSON from plain dicts (centre.service.page_json) for speed; the
published model (NotificationPage, what the OpenAPI describes) stays the contract: for any page,
the bytes are exactly those the model writes, and they validate back into the model."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st

from herald.centre.queries import CentreRow
from herald.centre.schemas import NotificationPage
from herald.centre.service import page_json, page_model

EXAMPLES = settings(max_examples=200, deadline=None)

zones = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=45)), UTC])
stamps = st.builds(
    lambda d, tz: d.replace(tzinfo=tz),
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)),
    zones,
)
texts = st.text(max_size=40)  # quotes, backslashes, control characters, non-ASCII
rows = st.builds(
    CentreRow,
    recipient_id=st.integers(min_value=1, max_value=2**62),
    public_id=st.uuids().map(lambda u: UUID(str(u))),
    kind=texts,
    category=texts,
    priority=st.sampled_from(["low", "normal", "high", "critical"]),
    title=st.none() | texts,
    body=st.none() | texts,
    action_url=st.none() | texts,
    occurred_at=stamps,
    read_at=st.none() | stamps,
)


@EXAMPLES
@given(page=st.lists(rows, max_size=25), next_cursor=st.none() | texts)
def test_the_fast_page_is_byte_for_byte_the_models_json(
    page: list[CentreRow], next_cursor: str | None
) -> None:
    fast = page_json(page, next_cursor)
    assert fast == page_model(page, next_cursor).model_dump_json(by_alias=True).encode()
    assert NotificationPage.model_validate_json(fast) == page_model(page, next_cursor)
