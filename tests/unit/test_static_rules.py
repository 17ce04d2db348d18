"""House rules checked on the source itself (STYLE.md "Rooms and doors"; R-DEDUPE-8).

The SQL rule reads the code with `ast`, not grep, so a comment or a string that mentions
`select(` does not trip it, and `import sqlalchemy as sa; sa.text(...)` does.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

import herald

SRC = Path(herald.__file__).resolve().parent

# SQLAlchemy's statement constructors: building any of these is writing SQL.
STATEMENT_CONSTRUCTORS = frozenset({"select", "insert", "update", "delete", "text"})
# A raw SQL string handed straight to the driver is SQL too.
RAW_SQL_METHODS = frozenset({"exec_driver_sql"})


def is_sql_room(path: Path) -> bool:
    """Where SQL may live: any queries.py, a stage's queries/ package (one module a concept,
    e.g. directory/queries/erasure.py), the db/ package and its migrations."""
    relative = path.relative_to(SRC)
    in_stage_queries_package = len(relative.parts) >= 3 and relative.parts[-2] == "queries"
    return path.name == "queries.py" or in_stage_queries_package or relative.parts[0] == "db"


def _is_sqlalchemy(module: str) -> bool:
    return module == "sqlalchemy" or module.startswith("sqlalchemy.")


def _is_module(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except ModuleNotFoundError:
        return False


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def sql_statement_uses(source: str) -> list[str]:
    """Every place `source` builds a SQLAlchemy statement or hands raw SQL to the driver."""
    tree = ast.parse(source)
    found: list[str] = []
    # Local names bound to sqlalchemy or one of its submodules (`sa`, `postgresql`, `sql`).
    module_names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_sqlalchemy(alias.name):
                    module_names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if not _is_sqlalchemy(node.module):
                continue
            for alias in node.names:
                if alias.name in STATEMENT_CONSTRUCTORS or alias.name == "*":
                    found.append(f"line {node.lineno}: from {node.module} import {alias.name}")
                elif _is_module(f"{node.module}.{alias.name}"):
                    module_names.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        if node.attr in RAW_SQL_METHODS:
            found.append(f"line {node.lineno}: .{node.attr}(")
        elif node.attr in STATEMENT_CONSTRUCTORS and _root_name(node.value) in module_names:
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def _source_files() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_sql_statements_outside_queries_and_db() -> None:
    """STYLE.md "Rooms and doors": SQLAlchemy statement constructors (select, insert, update,
    delete, text) appear only in queries.py files, db/ and db/migrations."""
    offenders = {
        str(path.relative_to(SRC)): uses
        for path in _source_files()
        if not is_sql_room(path)
        for uses in [sql_statement_uses(path.read_text(encoding="utf-8"))]
        if uses
    }
    assert offenders == {}


def test_the_walk_sees_the_tree() -> None:
    """The rule above would pass vacuously on an empty walk; it must see the real files."""
    names = {str(p.relative_to(SRC)) for p in _source_files()}
    assert {"kinds/registry.py", "rendering/render.py", "db/schema.py"} <= names


@pytest.mark.parametrize(
    "source",
    [
        "from sqlalchemy import select",
        "from sqlalchemy import insert as ins",
        "from sqlalchemy import and_, text",
        "from sqlalchemy import *",
        "from sqlalchemy.sql import update",
        "from sqlalchemy.sql.expression import delete",
        "from sqlalchemy.dialects.postgresql import insert",
        "import sqlalchemy\nq = sqlalchemy.text('SELECT 1')",
        "import sqlalchemy as sa\nq = sa.select(sa.column('x'))",
        "import sqlalchemy.sql\nq = sqlalchemy.sql.expression.text('x')",
        "from sqlalchemy.dialects import postgresql\nq = postgresql.insert(t)",
        "from sqlalchemy import sql\nq = sql.text('x')",
        "import sqlalchemy.dialects.postgresql as pg\nq = pg.insert(t)",
        "async def f(conn):\n    await conn.exec_driver_sql('DELETE FROM x')",
    ],
)
def test_rule_catches_statement_constructors(source: str) -> None:
    """STYLE.md "Rooms and doors": each way of reaching a constructor is caught."""
    assert sql_statement_uses(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "from sqlalchemy.ext.asyncio import AsyncConnection",
        "from sqlalchemy import Connection, Executable, func",
        "import sqlalchemy as sa\nx: sa.Engine",
        "values = {}\nvalues.update(a=1)",
        "text = 'select(1)'\nprint(text)",
        "# from sqlalchemy import select\nx = 'sa.text(\"x\")'",
        "def select(x):\n    return x\nselect(1)",
        "from herald.sending import queries\nqueries.insert_event(conn)",
        "from . import select",
    ],
)
def test_rule_ignores_what_is_not_sql(source: str) -> None:
    """STYLE.md "Rooms and doors": types, other modules' `update`, comments and strings pass."""
    assert sql_statement_uses(source) == []


@pytest.mark.parametrize(
    ("relative", "allowed"),
    [
        ("sending/queries.py", True),
        ("db/schema.py", True),
        ("db/migrations/versions/0001_initial_schema.py", True),
        ("db/migrations/env.py", True),
        ("sending/service.py", False),
        ("api/routes.py", False),
        ("queries/helpers.py", False),
        ("directory/queries/erasure.py", True),
        ("directory/queries/__init__.py", True),
        ("dbtools.py", False),
    ],
)
def test_sql_rooms(relative: str, allowed: bool) -> None:
    """STYLE.md "Rooms and doors": only queries.py, a stage's queries/ package, db/ and
    migrations are SQL rooms."""
    assert is_sql_room(SRC / relative) is allowed


def files_with_raw_nul(root: Path) -> list[str]:
    return sorted(
        str(path.relative_to(root))
        for path in root.rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and path.suffix not in (".pyc", ".pyo")
        and b"\x00" in path.read_bytes()
    )


def test_no_raw_nul_byte_in_source() -> None:
    """R-DEDUPE-8: the dedupe key's NUL separator is written as an escape (`"\\x00"`), never as
    a raw byte that editors, diffs and grep silently mangle or drop."""
    assert files_with_raw_nul(SRC) == []


def test_nul_check_can_fail(tmp_path: Path) -> None:
    """R-DEDUPE-8: the check finds a raw NUL and accepts the escaped form."""
    (tmp_path / "raw.py").write_bytes(b'SEP = "\x00"\n')
    (tmp_path / "escaped.py").write_bytes(b'SEP = "\\x00"\n')
    assert files_with_raw_nul(tmp_path) == ["raw.py"]


def imported_modules(source: str) -> set[str]:
    """Every module `source` imports (absolute imports; `from a import b` counts a and a.b)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


HTTP_MODULES = ("fastapi", "starlette", "herald.auth.deps")


def test_only_the_app_assemblers_import_the_api_package() -> None:
    """STYLE.md "Rooms and doors": `api/` only assembles the application; no stage imports it
    (the request dependencies live in auth/deps.py). Only the process entry points — the CLI and
    `herald dev` — build the app."""
    allowed = {"cli/serve.py", "demo/dev.py"}
    offenders = sorted(
        rel
        for path in _source_files()
        if (rel := str(path.relative_to(SRC))) not in allowed and not rel.startswith("api/")
        if any(
            m == "herald.api" or m.startswith("herald.api.")
            for m in imported_modules(path.read_text())
        )
    )
    assert offenders == []


def test_no_service_knows_about_http() -> None:
    """STYLE.md "Rooms and doors": a service takes a connection and returns values; FastAPI,
    Starlette and the request dependencies stay in routes.py."""
    offenders = sorted(
        str(path.relative_to(SRC))
        for path in _source_files()
        if path.name == "service.py"
        if any(m.startswith(HTTP_MODULES) for m in imported_modules(path.read_text()))
    )
    assert offenders == []


def test_import_rules_see_imports() -> None:
    """The two rules above would pass vacuously if the import walk found nothing."""
    assert "herald.auth.deps" in imported_modules("from herald.auth.deps import state")
    assert "fastapi" in imported_modules("import fastapi")
    assert "herald.api.app" in imported_modules("from herald.api import app")
