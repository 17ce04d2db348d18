"""A TypeScript client generated from Herald's OpenAPI document compiles against an example host.

clients/typescript pins openapi-typescript (types from the spec), openapi-fetch (a fetch client
typed by them) and typescript. This test builds the document in-process, generates schema.d.ts
from it and type-checks clients/typescript/example.ts, which saves preferences and handles a 409
NOTIFICATION_PREFERENCE_VERSION_CONFLICT, and posts an `announcement.posted` event. Mutants of the
example (an unknown field in the event body, a property the 409 body does not have) must fail, so
a document that stopped describing those shapes fails this test.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from herald.api.app import create_app
from herald.config import Settings
from herald.db.engine import make_async_engine
from herald.kinds.sample import SAMPLE_REGISTRY

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "typescript"
PROJECT_FILES = ("package.json", "package-lock.json", "tsconfig.json", "example.ts")
# Nothing connects: building the app and its document needs no database.
URL = "postgresql://nobody@127.0.0.1:1/none"

# Each mutant replaces one line of example.ts; the TypeScript error it must cause.
MUTANTS = {
    "unknown_event_field": (
        '    kind: "announcement.posted",\n',
        '    kind: "announcement.posted",\n    priority: "high",\n',
        "'priority' does not exist",
    ),
    "unknown_conflict_property": (
        "retrying: ${conflict.error.message}",
        "retrying: ${conflict.error.detail}",
        "'detail' does not exist",
    ),
}

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or shutil.which("npm") is None,
    reason="node and npm are needed to generate and type-check the TypeScript client",
)


def _run(args: list[str], cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def _output(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of clients/typescript with its locked packages installed and schema.d.ts generated."""
    root = tmp_path_factory.mktemp("typescript-client")
    for name in PROJECT_FILES:
        shutil.copy(CLIENT / name, root / name)
    settings = Settings(database_url=URL, jwt_secret="x" * 40)
    document = create_app(settings, make_async_engine(URL), SAMPLE_REGISTRY).openapi()
    (root / "openapi.json").write_text(json.dumps(document), encoding="utf-8")

    installed = _run(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"], root)
    assert installed.returncode == 0, _output(installed)
    generated = _run(
        ["npx", "--no", "--", "openapi-typescript", "openapi.json", "-o", "schema.d.ts"], root
    )
    assert generated.returncode == 0, _output(generated)
    return root


def _typecheck(root: Path) -> subprocess.CompletedProcess[str]:
    return _run(["npx", "--no", "--", "tsc", "--noEmit", "-p", "."], root)


def test_the_example_client_compiles_against_the_generated_types(project: Path) -> None:
    result = _typecheck(project)
    assert result.returncode == 0, _output(result)


def test_mutants_of_the_example_do_not_compile(project: Path) -> None:
    """All mutants in one tsc run (each is its own module); each must be rejected for its reason."""
    example = (project / "example.ts").read_text(encoding="utf-8")
    files = ["schema.d.ts"]
    for name, (line, replacement, _) in MUTANTS.items():
        assert example.count(line) == 1, f"{name}: {line!r} is not once in example.ts"
        (project / f"{name}.ts").write_text(example.replace(line, replacement), encoding="utf-8")
        files.append(f"{name}.ts")
    config = json.loads((project / "tsconfig.json").read_text(encoding="utf-8"))
    config["files"] = files
    (project / "tsconfig.mutants.json").write_text(json.dumps(config), encoding="utf-8")

    result = _run(["npx", "--no", "--", "tsc", "--noEmit", "-p", "tsconfig.mutants.json"], project)
    assert result.returncode != 0, _output(result)
    for name, (_, _, message) in MUTANTS.items():
        errors = [line for line in result.stdout.splitlines() if line.startswith(f"{name}.ts(")]
        assert any(message in line for line in errors), f"{name} not rejected\n{_output(result)}"
