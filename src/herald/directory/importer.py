"""Directory import from a file: what `herald people import` runs (DESIGN.md §5.1).

The file is either JSON Lines (one object a line, its `type` one of role, group, person,
membership, guardianship) or CSV with a header row (a `type` column, or none: every row a person).
Field names are the API's (camelCase); in CSV an empty cell is an absent field and list fields
(`roles`, `permissions`) are separated by `;`. docs/importing-people.md shows
both.

Lines are applied by kind, in dependency order — roles, groups, people, memberships,
guardianships — so a line may name a role or group defined further down. Each kind goes in
batches of at most `batch_size` lines, one transaction per batch under the tenant's row-level
security, through the same service functions as the HTTP API (`upsert_people` is
`POST /v1/people:batch`). A line that cannot be read, repeats an earlier key or is refused by the
service is rejected with its line number and reason, and the rest still go in: a refused batch is
retried line by line. Before each batch the stored rows are read back and lines that would change
nothing are counted `unchanged` and not written, so a second run of the same file writes nothing.

A dry run does all of that inside one transaction (each batch a savepoint) and rolls it back, so
its counts and rejections are the ones a real run would give.
"""

from __future__ import annotations

import csv
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald.db import tenancy
from herald.directory import service
from herald.directory.queries import readback, records
from herald.directory.schemas import (
    MAX_BATCH,
    ExternalId,
    GroupInput,
    MembershipInput,
    PersonBatchItem,
    RoleCode,
    RoleInput,
)
from herald.errors import HeraldError

Kind = Literal["role", "group", "person", "membership", "guardianship"]
KINDS: Final[tuple[Kind, ...]] = ("role", "group", "person", "membership", "guardianship")
DEFAULT_BATCH: Final = 1_000
_LIST_FIELDS: Final = frozenset({"roles", "permissions"})
_TRUE: Final = frozenset({"true", "1", "yes"})
_FALSE: Final = frozenset({"false", "0", "no"})

M = TypeVar("M", bound=BaseModel)


# ---------------------------------------------------------------------------------------------
# Line models: the API's inputs plus the key the URL carries there.


class RoleLine(RoleInput):
    code: RoleCode


class GroupLine(GroupInput):
    external_id: ExternalId


class MembershipLine(MembershipInput):
    group_external_id: ExternalId
    person_external_id: ExternalId


class GuardianshipLine(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    student_external_id: ExternalId
    guardian_external_id: ExternalId


_MODELS: Final[dict[Kind, type[BaseModel]]] = {
    "role": RoleLine,
    "group": GroupLine,
    "person": PersonBatchItem,
    "membership": MembershipLine,
    "guardianship": GuardianshipLine,
}


# ---------------------------------------------------------------------------------------------
# The report


@dataclass
class Tally:
    created: int = 0
    updated: int = 0
    unchanged: int = 0

    @property
    def total(self) -> int:
        return self.created + self.updated + self.unchanged


@dataclass(frozen=True)
class Rejected:
    line: int
    reason: str


@dataclass
class ImportReport:
    dry_run: bool
    lines: int = 0
    tallies: dict[Kind, Tally] = field(default_factory=lambda: {kind: Tally() for kind in KINDS})
    rejected: list[Rejected] = field(default_factory=list)

    def reject(self, line: int, reason: str) -> None:
        self.rejected.append(Rejected(line, reason))

    def as_json(self) -> dict[str, Any]:
        return {
            "dryRun": self.dry_run,
            "lines": self.lines,
            **{
                kind: {"created": t.created, "updated": t.updated, "unchanged": t.unchanged}
                for kind, t in self.tallies.items()
            },
            "rejected": [{"line": r.line, "reason": r.reason} for r in sorted_rejections(self)],
        }


def sorted_rejections(report: ImportReport) -> list[Rejected]:
    return sorted(report.rejected, key=lambda r: r.line)


# ---------------------------------------------------------------------------------------------
# Reading


@dataclass(frozen=True)
class Line:
    number: int
    kind: Kind
    item: Any  # the validated line model of `kind`


def _problem(error: ValidationError) -> str:
    """Field and message of each problem, never the value (a line may carry personal data)."""
    parts = []
    for e in error.errors(include_input=False, include_url=False)[:5]:
        where = ".".join(str(p) for p in e["loc"])
        parts.append(f"{where}: {e['msg']}" if where else e["msg"])
    return "; ".join(parts)


def _validate(number: int, raw: Any, report: ImportReport, default: Kind | None) -> Line | None:
    if not isinstance(raw, dict):
        report.reject(number, "not a JSON object")
        return None
    kind = raw.pop("type", default)
    if kind not in _MODELS:
        report.reject(number, f"type must be one of {', '.join(KINDS)}")
        return None
    try:
        item = _MODELS[kind].model_validate(raw)
    except ValidationError as error:
        report.reject(number, _problem(error))
        return None
    return Line(number, kind, item)


def _jsonl(path: Path, report: ImportReport) -> Iterator[Line]:
    with path.open(encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            report.lines = number
            if not text.strip():
                continue
            try:
                raw = json.loads(text)
            except UnicodeDecodeError:
                report.reject(number, "not UTF-8")
                continue
            except json.JSONDecodeError as error:
                report.reject(number, f"not JSON: {error.msg} (column {error.colno})")
                continue
            line = _validate(number, raw, report, None)
            if line is not None:
                yield line


def _csv_cell(name: str, value: str) -> Any:
    if name in _LIST_FIELDS:
        return [part.strip() for part in value.split(";") if part.strip()]
    if name == "superadmin" and value.lower() in _TRUE | _FALSE:
        return value.lower() in _TRUE
    return value


def _csv(path: Path, report: ImportReport) -> Iterator[Line]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle, strict=True)
        default: Kind | None = None if "type" in (reader.fieldnames or []) else "person"
        try:
            for row in reader:
                number = reader.line_num
                report.lines = number
                if None in row:
                    report.reject(number, "more cells than the header has columns")
                    continue
                raw = {
                    name: _csv_cell(name, value.strip())
                    for name, value in row.items()
                    if value is not None and value.strip() != ""
                }
                if not raw:
                    continue
                line = _validate(number, raw, report, default)
                if line is not None:
                    yield line
        except csv.Error as error:
            report.reject(reader.line_num, f"not CSV: {error}")


def read(path: Path, report: ImportReport) -> dict[Kind, list[Line]]:
    """Every valid line of the file by kind; the invalid ones and repeated keys are rejected."""
    lines = _csv(path, report) if path.suffix.lower() == ".csv" else _jsonl(path, report)
    by_kind: dict[Kind, list[Line]] = {kind: [] for kind in KINDS}
    first: dict[tuple[Kind, Any], int] = {}
    for line in lines:
        key = (line.kind, _key(line))
        if key in first:
            report.reject(line.number, f"repeats the {line.kind} of line {first[key]}")
            continue
        first[key] = line.number
        by_kind[line.kind].append(line)
    return by_kind


def _key(line: Line) -> Any:
    item = line.item
    match line.kind:
        case "role":
            return item.code
        case "group" | "person":
            return item.external_id
        case "membership":
            return (item.group_external_id, item.person_external_id)
        case _:
            return (item.student_external_id, item.guardian_external_id)


# ---------------------------------------------------------------------------------------------
# Writing


Apply = Callable[[AsyncConnection, Sequence[Line], Tally], Awaitable[None]]


class _Importer:
    def __init__(
        self, engine: AsyncEngine, tenant_id: str, report: ImportReport, batch_size: int
    ) -> None:
        self.engine = engine
        self.tenant_id = tenant_id
        self.report = report
        self.batch_size = batch_size
        self._dry_conn: AsyncConnection | None = None

    @asynccontextmanager
    async def unit(self) -> AsyncIterator[AsyncConnection]:
        """One batch's transaction (a savepoint of the one rolled-back transaction in a dry run)."""
        if self._dry_conn is not None:
            async with self._dry_conn.begin_nested():
                yield self._dry_conn
            return
        async with self.engine.begin() as conn:
            await tenancy.enter_tenant(conn, self.tenant_id)
            yield conn

    async def batch(self, lines: Sequence[Line], apply: Apply, tally: Tally) -> None:
        """Apply a batch in one transaction; when the service refuses it, line by line."""
        counted = Tally()
        try:
            async with self.unit() as conn:
                await apply(conn, lines, counted)
        except HeraldError:
            counted = Tally()  # what the refused batch counted was rolled back with it
            for line in lines:
                one = Tally()
                try:
                    async with self.unit() as conn:
                        await apply(conn, [line], one)
                except HeraldError as error:
                    self.report.reject(line.number, f"{error.code}: {error.message}")
                else:
                    _add(counted, one)
        _add(tally, counted)

    # The kinds -----------------------------------------------------------------------------

    async def roles(self, conn: AsyncConnection, lines: Sequence[Line], tally: Tally) -> None:
        stored = await readback.stored_roles(conn, self.tenant_id, [x.item.code for x in lines])
        for line in lines:
            role: RoleLine = line.item
            now = stored.get(role.code)
            wanted = readback.StoredRole(
                name=role.name or role.code,
                scope_kind=role.scope_kind,
                permissions=tuple(role.permission_list()),
                is_superadmin=role.superadmin,
            )
            if now == wanted:
                tally.unchanged += 1
                continue
            result = await service.upsert_role(conn, self.tenant_id, role.code, role)
            _count(tally, result.created)

    async def groups(self, conn: AsyncConnection, lines: Sequence[Line], tally: Tally) -> None:
        ids = [x.item.external_id for x in lines]
        stored = await readback.stored_groups(conn, self.tenant_id, ids)
        for line in lines:
            group: GroupLine = line.item
            if stored.get(group.external_id) == (group.name, group.kind):
                tally.unchanged += 1
                continue
            result = await service.upsert_group(conn, self.tenant_id, group.external_id, group)
            _count(tally, result.created)

    async def people(self, conn: AsyncConnection, lines: Sequence[Line], tally: Tally) -> None:
        items: list[PersonBatchItem] = [x.item for x in lines]
        stored = await readback.stored_people(conn, self.tenant_id, [p.external_id for p in items])
        changed = []
        for person in items:
            now = stored.get(person.external_id)
            if now is not None and now == _as_stored(person):
                tally.unchanged += 1
            else:
                changed.append(person)
        if changed:
            result = await service.upsert_people(conn, self.tenant_id, changed)
            tally.created += result.created
            tally.updated += result.updated

    async def memberships(self, conn: AsyncConnection, lines: Sequence[Line], tally: Tally) -> None:
        pairs = [(x.item.group_external_id, x.item.person_external_id) for x in lines]
        stored = await readback.live_memberships(conn, self.tenant_id, pairs)
        changed = []
        for line, pair in zip(lines, pairs, strict=True):
            member: MembershipLine = line.item
            if stored.get(pair) == member.member_role:
                tally.unchanged += 1
            else:
                changed.append((*pair, member.member_role))
        created = await service.put_memberships(conn, self.tenant_id, changed) if changed else 0
        tally.created += created
        tally.updated += len(changed) - created

    async def guardianships(
        self, conn: AsyncConnection, lines: Sequence[Line], tally: Tally
    ) -> None:
        pairs = [(x.item.student_external_id, x.item.guardian_external_id) for x in lines]
        stored = await readback.live_guardianships(conn, self.tenant_id, pairs)
        changed = [pair for pair in pairs if pair not in stored]
        tally.unchanged += len(pairs) - len(changed)
        created = await service.put_guardianships(conn, self.tenant_id, changed) if changed else 0
        tally.created += created
        tally.updated += len(changed) - created

    async def run(
        self, by_kind: dict[Kind, list[Line]], progress: Callable[[Kind, int], None]
    ) -> None:
        appliers: dict[Kind, Apply] = {
            "role": self.roles,
            "group": self.groups,
            "person": self.people,
            "membership": self.memberships,
            "guardianship": self.guardianships,
        }
        for kind in KINDS:
            lines = by_kind[kind]
            for start in range(0, len(lines), self.batch_size):
                chunk = lines[start : start + self.batch_size]
                await self.batch(chunk, appliers[kind], self.report.tallies[kind])
                progress(kind, len(chunk))

    async def run_dry(
        self, by_kind: dict[Kind, list[Line]], progress: Callable[[Kind, int], None]
    ) -> None:
        async with self.engine.connect() as conn:
            transaction = await conn.begin()
            try:
                await tenancy.enter_tenant(conn, self.tenant_id)
                self._dry_conn = conn
                await self.run(by_kind, progress)
            finally:
                self._dry_conn = None
                await transaction.rollback()


def _as_stored(person: PersonBatchItem) -> readback.StoredPerson:
    return readback.StoredPerson(
        row=records.PersonRow(
            external_id=person.external_id,
            full_name=person.full_name,
            email=person.email,
            phone=person.phone,
            locale=person.locale,
            timezone=person.timezone,
            country=person.country,
            status=person.status,
            telegram_chat_id=person.telegram_chat_id,
            slack_id=person.slack_id,
            teams_webhook_url=person.teams_webhook_url,
        ),
        roles=frozenset(person.role_codes()),
    )


def _count(tally: Tally, created: bool) -> None:
    if created:
        tally.created += 1
    else:
        tally.updated += 1


def _add(into: Tally, more: Tally) -> None:
    into.created += more.created
    into.updated += more.updated
    into.unchanged += more.unchanged


async def import_file(
    engine: AsyncEngine,
    tenant_id: str,
    path: Path,
    *,
    dry_run: bool = False,
    batch_size: int = DEFAULT_BATCH,
    on_read: Callable[[dict[Kind, int]], None] = lambda counts: None,
    progress: Callable[[Kind, int], None] = lambda kind, n: None,
) -> ImportReport:
    """Import `path` into `tenant_id`; see the module docstring. `on_read` hears how many valid
    lines of each kind there are before anything is written, `progress` each batch done."""
    if not 1 <= batch_size <= MAX_BATCH:
        raise ValueError(f"batch_size must be between 1 and {MAX_BATCH}")
    report = ImportReport(dry_run=dry_run)
    by_kind = read(path, report)
    on_read({kind: len(lines) for kind, lines in by_kind.items()})
    importer = _Importer(engine, tenant_id, report, batch_size)
    if dry_run:
        await importer.run_dry(by_kind, progress)
    else:
        await importer.run(by_kind, progress)
    return report
