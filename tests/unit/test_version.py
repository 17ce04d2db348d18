"""The version is written once (herald.__version__) and everything else reads it."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import herald

ROOT = Path(__file__).resolve().parents[2]


def test_changelog_leads_with_this_version() -> None:
    headings = re.findall(r"^## (\d+\.\d+\.\d+)\b", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings and headings[0] == herald.__version__


def test_the_installed_metadata_and_the_cli_agree() -> None:
    assert version("herald") == herald.__version__
    herald_bin = Path(sys.executable).with_name("herald")
    out = subprocess.run([herald_bin, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"herald {herald.__version__}"


def test_pyproject_reads_the_version_from_the_package() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in text and "\nversion = " not in text
