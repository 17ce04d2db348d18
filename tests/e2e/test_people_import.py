"""`herald people import`: a real process loads a generated file with a few bad lines, twice."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.e2e.harness import last_line, run_cli

PEOPLE = 2_500  # more than two batches of 1,000


def _jsonl_lines() -> tuple[list[str], dict[int, str]]:
    """The file's lines and, for each bad line (1-based), a word its rejection reason holds."""
    lines: list[Any] = [
        # A person before the role they hold: kinds are applied in dependency order.
        {"type": "person", "externalId": "t-0", "fullName": "Asha", "roles": ["teacher"]},
        {"type": "role", "code": "teacher", "scopeKind": "staff", "permissions": ["send"]},
        {"type": "role", "code": "guardian", "scopeKind": "guardian"},
        {"type": "role", "code": "student", "scopeKind": "student"},
        {"type": "group", "externalId": "class-7a", "name": "Class 7A"},
    ]
    for i in range(PEOPLE):
        lines.append(
            {
                "type": "person",
                "externalId": f"s-{i}",
                "fullName": f"Student {i}",
                "email": f"s{i}@school.example",
                "roles": ["student"],
            }
        )
        if i < 50:
            lines.append({"type": "person", "externalId": f"g-{i}", "roles": ["guardian"]})
            lines.append(
                {
                    "type": "guardianship",
                    "studentExternalId": f"s-{i}",
                    "guardianExternalId": f"g-{i}",
                }
            )
            lines.append(
                {
                    "type": "membership",
                    "groupExternalId": "class-7a",
                    "personExternalId": f"s-{i}",
                    "memberRole": "student",
                }
            )
    bad: list[tuple[Any, str]] = [
        ("{not json", "not JSON"),
        ({"type": "robot", "externalId": "r-1"}, "type must be"),
        ({"type": "person", "externalId": "x-1", "email": "no at sign"}, "email"),
        ({"type": "person", "externalId": "x-2", "roles": ["wizard"]}, "DIRECTORY_ROLE_UNKNOWN"),
        ({"type": "person", "externalId": "s-7", "fullName": "Again"}, "repeats"),
        (
            {
                "type": "membership",
                "groupExternalId": "class-7a",
                "personExternalId": "nobody",
                "memberRole": "student",
            },
            "PERSON_NOT_FOUND",
        ),
        (
            {"type": "guardianship", "studentExternalId": "g-1", "guardianExternalId": "g-1"},
            "GUARDIAN",
        ),
    ]
    reasons: dict[int, str] = {}
    for offset, (line, _) in enumerate(bad):
        at = 10 + offset * 700  # spread over several batches
        lines.insert(at, line)
    # Their numbers once every insert is done.
    texts = [line if isinstance(line, str) else json.dumps(line) for line in lines]
    for line, word in bad:
        wanted = line if isinstance(line, str) else json.dumps(line)
        reasons[texts.index(wanted) + 1] = word
    return texts, reasons


async def _counts(engine: AsyncEngine, tenant: str) -> dict[str, int]:
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM person WHERE tenant_id = :t) AS people,"
                    " (SELECT count(*) FROM role WHERE tenant_id = :t) AS roles,"
                    " (SELECT count(*) FROM person_role WHERE tenant_id = :t) AS grants,"
                    " (SELECT count(*) FROM group_membership WHERE tenant_id = :t) AS members,"
                    " (SELECT count(*) FROM guardianship WHERE tenant_id = :t) AS guardians,"
                    " (SELECT max(updated_at)::text FROM person WHERE tenant_id = :t) AS touched"
                ),
                {"t": tenant},
            )
        ).one()
    return dict(row._mapping)


async def test_import_twice_reports_bad_lines_and_changes_nothing_the_second_time(
    e2e_env: dict[str, str], engine: AsyncEngine, tenant: str, tmp_path: Path
) -> None:
    texts, reasons = _jsonl_lines()
    path = tmp_path / "directory.jsonl"
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")

    dry = run_cli(["people", "import", str(path), "--tenant", tenant, "--dry-run"], e2e_env)
    assert dry.returncode == 3, dry.stderr
    assert json.loads(last_line(dry.stdout))["person"]["created"] == PEOPLE + 51
    assert (await _counts(engine, tenant))["people"] == 0  # a dry run writes nothing

    first = run_cli(["people", "import", str(path), "--tenant", tenant], e2e_env)
    assert first.returncode == 3, first.stderr
    report = json.loads(last_line(first.stdout))
    assert report["lines"] == len(texts)
    assert {r["line"] for r in report["rejected"]} == set(reasons)
    for rejection in report["rejected"]:
        assert reasons[rejection["line"]].lower() in rejection["reason"].lower(), rejection
        assert f"line {rejection['line']}:" in first.stderr
    assert report["role"] == {"created": 3, "updated": 0, "unchanged": 0}
    assert report["group"] == {"created": 1, "updated": 0, "unchanged": 0}
    assert report["person"] == {"created": PEOPLE + 51, "updated": 0, "unchanged": 0}
    assert report["membership"] == {"created": 50, "updated": 0, "unchanged": 0}
    assert report["guardianship"] == {"created": 50, "updated": 0, "unchanged": 0}
    # The dry run said what the real run did.
    assert json.loads(last_line(dry.stdout)) == {**report, "dryRun": True}
    after_first = await _counts(engine, tenant)
    assert after_first == {
        "people": PEOPLE + 51,
        "roles": 3,
        "grants": PEOPLE + 51,
        "members": 50,
        "guardians": 50,
        "touched": after_first["touched"],
    }

    second = run_cli(["people", "import", str(path), "--tenant", tenant], e2e_env)
    assert second.returncode == 3, second.stderr
    again = json.loads(last_line(second.stdout))
    assert again["rejected"] == report["rejected"]
    for kind in ("role", "group", "person", "membership", "guardianship"):
        assert again[kind]["created"] == again[kind]["updated"] == 0, (kind, again[kind])
        assert again[kind]["unchanged"] == report[kind]["created"]
    assert await _counts(engine, tenant) == after_first  # not even updated_at moved


async def test_csv_people_import_and_a_changed_row_is_updated(
    e2e_env: dict[str, str], engine: AsyncEngine, tenant: str, tmp_path: Path
) -> None:
    roles = tmp_path / "roles.jsonl"
    roles.write_text(
        json.dumps({"type": "role", "code": "teacher", "scopeKind": "staff"}) + "\n", "utf-8"
    )
    assert run_cli(["people", "import", str(roles), "--tenant", tenant], e2e_env).returncode == 0

    def write(rows: list[dict[str, str]]) -> Path:
        path = tmp_path / "people.csv"
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, ["externalId", "fullName", "email", "roles"])
            writer.writeheader()
            writer.writerows(rows)
        return path

    rows = [
        {"externalId": "p-1", "fullName": "Asha", "email": "", "roles": "teacher"},
        {"externalId": "p-2", "fullName": "Bikash", "email": "b@x.np", "roles": ""},
        {"externalId": "", "fullName": "Nobody", "email": "", "roles": ""},
    ]
    first = run_cli(["people", "import", str(write(rows)), "--tenant", tenant], e2e_env)
    assert first.returncode == 3, first.stderr
    report = json.loads(last_line(first.stdout))
    assert report["person"] == {"created": 2, "updated": 0, "unchanged": 0}
    assert [r["line"] for r in report["rejected"]] == [4]
    assert "externalId" in report["rejected"][0]["reason"]

    rows[1]["fullName"] = "Bikash Thapa"
    second = run_cli(["people", "import", str(write(rows[:2])), "--tenant", tenant], e2e_env)
    assert second.returncode == 0, second.stderr
    assert json.loads(last_line(second.stdout))["person"] == {
        "created": 0,
        "updated": 1,
        "unchanged": 1,
    }
    async with engine.connect() as conn:
        names = dict(
            (
                await conn.execute(
                    text("SELECT external_id, full_name FROM person WHERE tenant_id = :t"),
                    {"t": tenant},
                )
            ).all()
        )
    assert names == {"p-1": "Asha", "p-2": "Bikash Thapa"}
