"""`herald people import` at size: a generated JSON Lines directory, imported twice.

    .venv/bin/python bench/import.py [--people 100000] [--batch 1000]

Uses HERALD_BENCH_DATABASE_URL (the bench creates and drops its own database), else the embedded
PostgreSQL under .herald/bench. The file holds three roles and `--people` people, each with one
role, a tenth of them also in one of a hundred groups. Prints, in the same run: the baseline (a
plain COPY of the same people into the person table, the floor of any import), the first import
(everything created) and the second (everything unchanged, nothing written), in seconds and rows
per second. Runs the importer in process (what the CLI calls, without the progress bar). Never part
of the test run's pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import create_database, drop_database  # noqa: E402

from herald.db import embedded, migrate  # noqa: E402
from herald.db.engine import libpq_url, make_async_engine  # noqa: E402
from herald.directory import importer  # noqa: E402

TENANT = "bench"
GROUPS = 100


def write_file(path: Path, people: int) -> int:
    lines = 0
    with path.open("w", encoding="utf-8") as handle:
        for code, scope in (("student", "student"), ("guardian", "guardian"), ("teacher", "staff")):
            handle.write(json.dumps({"type": "role", "code": code, "scopeKind": scope}) + "\n")
            lines += 1
        for g in range(GROUPS):
            handle.write(json.dumps({"type": "group", "externalId": f"g{g}", "name": f"G {g}"}))
            handle.write("\n")
            lines += 1
        for i in range(people):
            person = {
                "type": "person",
                "externalId": f"p{i}",
                "fullName": f"Person {i}",
                "email": f"p{i}@example.com",
                "phone": f"+97798{i:08d}",
                "roles": ["student" if i % 3 else "guardian"],
            }
            handle.write(json.dumps(person) + "\n")
            lines += 1
        for i in range(0, people, 10):
            member = {
                "type": "membership",
                "groupExternalId": f"g{i % GROUPS}",
                "personExternalId": f"p{i}",
                "memberRole": "student",
            }
            handle.write(json.dumps(member) + "\n")
            lines += 1
    return lines


def baseline_copy(url: str, people: int) -> float:
    started = time.perf_counter()
    with (
        psycopg.connect(libpq_url(url)) as conn,
        conn.cursor().copy(
            "COPY person (tenant_id, external_id, full_name, email, phone) FROM STDIN"
        ) as copy,
    ):
        for i in range(people):
            copy.write_row(
                ("baseline", f"p{i}", f"Person {i}", f"p{i}@example.com", f"+97798{i:08d}")
            )
    return time.perf_counter() - started


async def run_import(url: str, path: Path, batch: int) -> tuple[float, importer.ImportReport]:
    engine = make_async_engine(url, pool_size=1)
    try:
        started = time.perf_counter()
        report = await importer.import_file(engine, TENANT, path, batch_size=batch)
        return time.perf_counter() - started, report
    finally:
        await engine.dispose()


def show(label: str, seconds: float, rows: int) -> None:
    print(f"{label:<28} {seconds:8.2f} s  {rows / seconds:10,.0f} lines/s")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--people", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=importer.DEFAULT_BATCH)
    args = parser.parse_args()
    server = os.environ.get("HERALD_BENCH_DATABASE_URL") or embedded.start(
        ROOT / ".herald" / "bench"
    )
    name = f"herald_bench_{uuid.uuid4().hex[:8]}"
    url = create_database(server, name)
    try:
        migrate.upgrade(url)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "directory.jsonl"
            lines = write_file(path, args.people)
            print(f"{args.people:,} people, {lines:,} lines, batches of {args.batch}")
            show("baseline: COPY people", baseline_copy(url, args.people), args.people)
            for label in ("import, first run", "import, second run"):
                seconds, report = asyncio.run(run_import(url, path, args.batch))
                show(label, seconds, lines)
                people = report.tallies["person"]
                print(
                    f"{'':<28} people {people.created:,} created, {people.updated:,} updated, "
                    f"{people.unchanged:,} unchanged; {len(report.rejected)} rejected"
                )
    finally:
        drop_database(server, name)


if __name__ == "__main__":
    main()
