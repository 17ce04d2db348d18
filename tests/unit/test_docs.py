"""The documents stay readable and their links lead somewhere: a README a newcomer reads in
five minutes, and no relative link in the README, CONTRIBUTING.md or a guide to a missing file
or heading."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")


def headings(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings (outside code blocks)."""
    found: set[str] = set()
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"^#{1,6} ", line):
            text = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return found


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in LINK.findall(path.read_text()):
        if target.startswith(("http://", "https://", "mailto:")) or target.startswith("<"):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        missing_heading = anchor and linked.suffix == ".md" and anchor not in headings(linked)
        if not linked.exists() or missing_heading:
            broken.append(target)
    return broken


def test_the_readme_is_short() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme) <= 15_000
    first_commands = readme[: readme.index("## A first send")]
    assert "make dev" in first_commands and "make test" in first_commands


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_lead_somewhere(path: Path) -> None:
    assert broken_links(path) == []


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\n## Here\n\n[ok](#here) [x](b.md) [y](#nowhere)\n")
    assert broken_links(tmp_path / "a.md") == ["b.md", "#nowhere"]
