"""The operator's files: the alert rules load in Prometheus (promtool), every alert has its runbook
section, and the rules and dashboard name only metrics Herald exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERT_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "herald.json"
RUNBOOK = ROOT / "docs" / "runbook.md"
SOURCES = [
    ROOT / "src" / "herald" / "observability" / "metrics.py",
    ROOT / "src" / "herald" / "observability" / "service.py",
]
METRIC = re.compile(r"\bherald_[a-z_]+")
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


def exported() -> set[str]:
    names = set()
    for source in SOURCES:
        names |= set(re.findall(r'"(herald_[a-z_]+)"', source.read_text()))
    return names


def known(name: str, names: set[str]) -> bool:
    base = next((name[: -len(s)] for s in HISTOGRAM_SUFFIXES if name.endswith(s)), name)
    return name in names or base in names


def test_promtool_accepts_the_alert_rules() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian's `prometheus` package; .ci/run installs it)")
    checked = subprocess.run(
        [promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_alerts_fire_on_their_unit_tests() -> None:
    """promtool's rule unit tests: each alert fires on the series that should fire it, with its
    summary, and stays quiet before."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian's `prometheus` package; .ci/run installs it)")
    checked = subprocess.run(
        [promtool, "test", "rules", str(ALERT_TESTS)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = set(re.findall(r"alertname: (\w+)", ALERT_TESTS.read_text()))
    assert {"HeraldWebhookEndpointFailing", "HeraldWebhooksDying", "HeraldDigestsOverdue"} <= tested


def test_every_alert_has_a_runbook_section_and_real_metrics() -> None:
    text = ALERTS.read_text()
    alerts = re.findall(r"^\s*- alert: (\w+)$", text, re.MULTILINE)
    assert {
        "HeraldQueueStuck",
        "HeraldProviderFailing",
        "HeraldFanoutStuck",
        "HeraldSchedulerSilent",
        "HeraldDeadLettersGrowing",
    } <= set(alerts)
    headings = re.findall(r"^## (\w+)$", RUNBOOK.read_text(), re.MULTILINE)
    assert sorted(headings) == sorted(alerts)
    names = exported()
    assert [m for m in METRIC.findall(text) if not known(m, names)] == []


def test_dashboard_queries_name_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    names = exported()
    used = {m for e in exprs for m in METRIC.findall(e)}
    assert [m for m in used if not known(m, names)] == []
    # Every exported family appears on the dashboard.
    assert {m for m in names if not any(known(u, {m}) for u in used)} == set()
