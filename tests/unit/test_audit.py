"""The audit service's pure parts: per-field changes, labels and JSON-safe values."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from herald.audit.service import actor_label, field_changes, module_of, record_audit
from herald.auth.service import Operator


def test_field_changes_lists_only_changed_fields_with_before_and_after() -> None:
    """R-ADMIN-6: each changed field with its before and after value; unchanged fields omitted."""
    before = {"title": "A", "body": "same", "status": "draft", "version": 1}
    after = {"title": "B", "body": "same", "status": "draft", "version": 2}
    assert field_changes(before, after, ("title", "body", "status", "version")) == {
        "title": {"before": "A", "after": "B"},
        "version": {"before": 1, "after": 2},
    }


def test_field_changes_reports_a_field_that_appears_or_disappears() -> None:
    """R-ADMIN-6: a value going to or from null is a change, with null on its side."""
    assert field_changes({"title": None}, {"title": "T"}, ("title",)) == {
        "title": {"before": None, "after": "T"}
    }
    assert field_changes({"title": "T"}, {"title": None}, ("title",)) == {
        "title": {"before": "T", "after": None}
    }


def test_labels_and_modules() -> None:
    """R-ADMIN-8: template audit entries belong to module NotificationTemplate; actors are labelled
    by kind so a person and a key with the same id text cannot be confused."""
    person = Operator("t", "person", "x1", 7, frozenset(), False)
    key = Operator("t", "api_key", "x1", None, frozenset(), True)
    assert actor_label(person) == "person:x1"
    assert actor_label(key) == "api_key:x1"
    assert module_of("notification_template") == "NotificationTemplate"


async def test_an_unknown_action_is_refused_before_any_sql() -> None:
    """R-SEC-18: the action vocabulary is closed; a typo fails loudly in the caller, not later."""
    operator = Operator("t", "person", "x1", 7, frozenset(), False)
    with pytest.raises(ValueError, match="unknown audit action"):
        await record_audit(None, operator, "frobnicate", "notification_template", "1", {})  # type: ignore[arg-type]


def test_json_safe_values() -> None:
    """R-ADMIN-6: uuids and timestamps in before/after values are stored as strings."""
    from herald.audit.service import _json_safe

    some_id = uuid.uuid4()
    stamp = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert _json_safe({"a": some_id, "b": [stamp, 1, None], "c": {"d": True}}) == {
        "a": str(some_id),
        "b": [stamp.isoformat(), 1, None],
        "c": {"d": True},
    }
