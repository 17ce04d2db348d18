"""queries.sql files: named statements, and fragments that statements of one file share."""

from __future__ import annotations

from pathlib import Path

import pytest

from herald.db import sqlfile

SOURCE = """
-- fragment: tail
picked AS (SELECT id FROM t WHERE x = :x)

-- name: first
WITH {{tail}}
SELECT id FROM picked;

-- name: second
-- A comment of its own.
WITH {{tail}}, more AS (SELECT 1)
SELECT count(*) FROM picked
"""


def write(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "queries.sql"
    path.write_text(source, encoding="utf-8")
    return path


def test_fragments_are_put_into_each_statement_and_are_no_statement(tmp_path: Path) -> None:
    statements = sqlfile.load_text(write(tmp_path, SOURCE))
    assert set(statements) == {"first", "second"}
    assert statements["first"] == (
        "WITH picked AS (SELECT id FROM t WHERE x = :x)\nSELECT id FROM picked"
    )
    assert statements["second"].startswith("-- A comment of its own.\nWITH picked AS (")
    assert "{{" not in statements["second"]
    assert sqlfile.load(write(tmp_path, SOURCE))["first"].compile().params == {"x": None}


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("-- name: a\nSELECT {{nope}}", "used before it is defined"),
        ("-- name: a\nSELECT {{late}}\n-- fragment: late\n1", "used before it is defined"),
        ("-- name: a\nSELECT 1\n-- name: a\nSELECT 2", "defined twice"),
        ("-- fragment: a\n1\n-- name: a\nSELECT 2", "defined twice"),
    ],
)
def test_a_missing_or_doubled_name_stops_the_load(
    tmp_path: Path, source: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        sqlfile.load_text(write(tmp_path, source))


def test_the_delivery_statements_share_one_outbox() -> None:
    """record_outcomes and reclaim_expired_leases write webhook messages and dead letters with
    the same SQL (the ended_outbox fragment)."""
    path = Path(sqlfile.__file__).parent.parent / "delivery" / "queries.sql"
    statements = sqlfile.load_text(path)
    for name in ("record_outcomes", "reclaim_expired_leases"):
        assert "INSERT INTO webhook_message" in statements[name]
        assert "INSERT INTO dead_letter" in statements[name]
    assert path.read_text().count("INSERT INTO webhook_message") == 1


def test_an_included_files_fragments_are_usable(tmp_path: Path) -> None:
    (tmp_path / "shared.sql").write_text("-- fragment: one\n1\n", encoding="utf-8")
    statements = sqlfile.load_text(
        write(tmp_path, "-- include: shared.sql\n\n-- name: a\nSELECT {{one}}")
    )
    assert statements == {"a": "SELECT 1"}


@pytest.mark.parametrize(
    ("shared", "source", "message"),
    [
        ("-- name: s\nSELECT 1", "-- include: shared.sql\n-- name: a\nSELECT 1", "only"),
        ("-- fragment: one\n1", "-- include: shared.sql\n-- fragment: one\n2", "twice"),
        ("-- include: x.sql\n-- fragment: one\n1", "-- include: shared.sql", "includes nothing"),
    ],
)
def test_an_include_holds_fragments_only_and_names_stay_unique(
    tmp_path: Path, shared: str, source: str, message: str
) -> None:
    (tmp_path / "shared.sql").write_text(shared, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        sqlfile.load_text(write(tmp_path, source))


def test_one_delivery_webhook_payload_for_outcomes_reclaims_and_receipts() -> None:
    """The payload of delivery.<status> is written once (webhooks/payloads.sql) and put into the
    worker's two ending statements and the receipts' emit_for_deliveries."""
    src = Path(sqlfile.__file__).parent.parent
    delivery = sqlfile.load_text(src / "delivery" / "queries.sql")
    webhooks = sqlfile.load_text(src / "webhooks" / "queries.sql")
    for sql in (
        delivery["record_outcomes"],
        delivery["reclaim_expired_leases"],
        webhooks["emit_for_deliveries"],
    ):
        assert "'deliveryId', dv.public_id, 'eventId', ev.public_id" in sql
    for path in (src / "delivery" / "queries.sql", src / "webhooks" / "queries.sql"):
        assert "'deliveryId'" not in path.read_text()
