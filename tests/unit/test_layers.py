"""The layer order of docs/architecture.md, held by the code's own imports.

Every module of `herald` sits in one layer; a module may import its own layer and the layers
below it, never one above ("climbing"), and no set of modules may import each other in a circle.
The table below is the one place the order is written in code; docs/architecture.md quotes it
and a test here checks that the two agree.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import herald

SRC = Path(herald.__file__).resolve().parent
GUIDE = SRC.parent.parent / "docs" / "architecture.md"

# Lowest first. A name is a top-level module or package of `herald`.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("foundation", frozenset({"vocabulary", "errors", "values", "config", "outages", "ratelimit"})),
    ("db", frozenset({"db"})),
    (
        "parts",
        frozenset({"kinds", "rendering", "channels", "secrets", "observability", "audit", "auth"}),
    ),
    (
        "stages",
        frozenset(
            {
                "admin",
                "audience",
                "centre",
                "delivery",
                "devices",
                "digests",
                "directory",
                "fanout",
                "feed",
                "followups",
                "maintenance",
                "preferences",
                "realtime",
                "receipts",
                "scheduling",
                "sending",
                "throttle",
                "webhooks",
            }
        ),
    ),
    ("runtime", frozenset({"runtime"})),
    ("surfaces", frozenset({"api", "console", "cli", "demo", "widget"})),
)
SURFACES = len(LAYERS) - 1

# Modules that sit above their package's layer: the HTTP doors of a stage (each `routes.py`),
# the request dependencies routes share, and the centre's fast path, which is a route.
SURFACE_MODULES = frozenset({"herald.auth.deps", "herald.centre.fast"})

# (importer, imported, reason): climbs that are allowed. Empty: none is needed today.
ALLOWED_CLIMBS: tuple[tuple[str, str, str], ...] = ()


def layer_of(module: str) -> int:
    """The index in LAYERS of a dotted `herald…` module name."""
    parts = module.split(".")
    if module == "herald" or parts[-1] == "routes" or module in SURFACE_MODULES:
        return SURFACES
    for index, (_, names) in enumerate(LAYERS):
        if parts[1] in names:
            return index
    raise LookupError(f"{module} is in no layer: add {parts[1]!r} to LAYERS")


def module_name(path: Path, root: Path) -> str:
    relative = path.relative_to(root.parent).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def modules_under(root: Path) -> dict[str, Path]:
    return {
        module_name(path, root): path
        for path in sorted(root.rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """module → the modules of `modules` it imports (at any depth of the file: a deferred
    import inside a function is an import all the same)."""

    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(known(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                for alias in node.names:
                    found.add(known(f"{target}.{alias.name}") or known(target))
        graph[name] = {m for m in found if m is not None and m != name}
    return graph


def climbs(graph: Mapping[str, Iterable[str]]) -> list[tuple[str, str]]:
    return sorted(
        (importer, imported)
        for importer, targets in graph.items()
        for imported in targets
        if layer_of(imported) > layer_of(importer)
    )


def circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


GRAPH = import_graph(modules_under(SRC))


def test_every_module_has_a_layer() -> None:
    unplaced = []
    for module in GRAPH:
        try:
            layer_of(module)
        except LookupError as exc:
            unplaced.append(str(exc))
    assert unplaced == []


def test_no_import_climbs_the_layers() -> None:
    allowed = {(importer, imported) for importer, imported, _ in ALLOWED_CLIMBS}
    assert [pair for pair in climbs(GRAPH) if pair not in allowed] == []


def test_every_allowed_climb_still_exists_and_says_why() -> None:
    present = set(climbs(GRAPH))
    for importer, imported, reason in ALLOWED_CLIMBS:
        assert (importer, imported) in present, f"{importer} no longer imports {imported}"
        assert reason.strip(), f"{importer} → {imported} needs a reason"


def test_no_circles() -> None:
    assert circles(GRAPH) == []


def test_the_walk_sees_the_tree() -> None:
    """The rules above pass vacuously if the walk finds no modules or no imports."""
    assert len(GRAPH) > 200
    assert "herald.outages" in GRAPH["herald.delivery.worker"]
    assert "herald.db.engine" in GRAPH["herald.db.presence"]


def test_the_rules_catch_a_climb_and_a_circle(tmp_path: Path) -> None:
    root = tmp_path / "herald"
    for relative, source in {
        "__init__.py": "",
        "db/__init__.py": "",
        "db/low.py": "from herald.api import app\n",  # db climbs to a surface
        "api/__init__.py": "",
        "api/app.py": "from . import other\n",
        "api/other.py": "def f():\n    from herald.api import app\n",  # deferred: still a circle
    }.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(source)
    graph = import_graph(modules_under(root))
    assert climbs(graph) == [("herald.db.low", "herald.api.app")]
    assert circles(graph) == [["herald.api.app", "herald.api.other"]]


def test_routes_count_as_surfaces() -> None:
    assert layer_of("herald.feed.routes") == SURFACES
    assert layer_of("herald.feed.service") == [n for n, _ in LAYERS].index("stages")
    with pytest.raises(LookupError):
        layer_of("herald.nowhere.service")


def test_the_guide_quotes_the_table() -> None:
    """docs/architecture.md lists each layer with its modules, in this order."""
    text = GUIDE.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`" in line]
    quoted = []
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        names = frozenset(part.strip(" `") for part in cells[1].split(",") if part.strip())
        quoted.append((cells[0].strip("* "), names))
    assert quoted == [(name, names) for name, names in LAYERS]
