"""The inbox list's items leave PostgreSQL already written as JSON (centre.queries.item_json) and
the page is joined from them (centre.service.page_json); the published model (NotificationPage,
what the OpenAPI describes) stays the contract: for any values, PostgreSQL's bytes are exactly
those the model writes, and they validate back into the model."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import DateTime, Engine, Text, bindparam, select
from sqlalchemy import Uuid as UUIDType

from herald.centre.queries import PageRow, item_json
from herald.centre.schemas import NotificationItem, NotificationPage
from herald.centre.service import page_json

EXAMPLES = settings(max_examples=150, deadline=None)

zones = st.sampled_from(
    [UTC, timezone(timedelta(hours=5, minutes=45)), timezone(-timedelta(hours=8))]
)
stamps = st.builds(
    lambda d, tz, whole: d.replace(tzinfo=tz, microsecond=0 if whole else d.microsecond),
    st.datetimes(min_value=datetime(1000, 1, 2), max_value=datetime(9999, 12, 30)),
    zones,
    st.booleans(),
)
# Quotes, backslashes, every control character PostgreSQL can store (not NUL), non-ASCII,
# U+2028: each escaped (or not) the same way by both writers.
texts = st.text(
    alphabet=st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=40
)


def make_item(**values: Any) -> NotificationItem:
    return NotificationItem(**values)


items = st.builds(
    make_item,
    id=st.uuids().map(lambda u: UUID(str(u))),
    kind=texts,
    category=texts,
    priority=st.sampled_from(["low", "normal", "high", "critical"]),
    title=st.none() | texts,
    body=st.none() | texts,
    action_url=st.none() | texts,
    occurred_at=stamps,
    read_at=st.none() | stamps,
)

_STATEMENT = select(
    item_json(
        public_id=bindparam("public_id", type_=UUIDType),
        kind=bindparam("kind", type_=Text),
        category=bindparam("category", type_=Text),
        priority=bindparam("priority", type_=Text),
        title=bindparam("title", type_=Text),
        body=bindparam("body", type_=Text),
        action_url=bindparam("action_url", type_=Text),
        occurred_at=bindparam("occurred_at", type_=DateTime(timezone=True)),
        read_at=bindparam("read_at", type_=DateTime(timezone=True)),
    )
)


def written_by_postgres(engine: Engine, item: NotificationItem) -> str:
    values: dict[str, Any] = {
        "public_id": item.id,
        "kind": item.kind,
        "category": item.category,
        "priority": item.priority,
        "title": item.title,
        "body": item.body,
        "action_url": item.action_url,
        "occurred_at": item.occurred_at,
        "read_at": item.read_at,
    }
    with engine.connect() as conn:
        return str(conn.execute(_STATEMENT, values).scalar_one())


def in_utc(item: NotificationItem) -> NotificationItem:
    """The same item as the API states it: every timestamp in UTC (PostgreSQL keeps the
    instant, not the zone it was written in)."""
    return item.model_copy(
        update={
            "occurred_at": item.occurred_at.astimezone(UTC),
            "read_at": item.read_at.astimezone(UTC) if item.read_at else None,
        }
    )


@EXAMPLES
@given(page=st.lists(items, max_size=5), next_cursor=st.none() | texts)
def test_postgres_writes_the_models_bytes(
    sync_engine: Engine, page: list[NotificationItem], next_cursor: str | None
) -> None:
    rows = []
    for item in page:
        written = written_by_postgres(sync_engine, item)
        assert written == in_utc(item).model_dump_json(by_alias=True)
        rows.append(PageRow(recipient_id=1, occurred_at=item.occurred_at, item=written))
    model = NotificationPage(items=[in_utc(item) for item in page], next_cursor=next_cursor)
    fast = page_json(rows, next_cursor)
    assert fast == model.model_dump_json(by_alias=True).encode()
    assert NotificationPage.model_validate_json(fast) == model
