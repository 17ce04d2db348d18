"""The retention tick's one summary line names every table it prunes, each with its own count
(a merge that adds a table must add its field, its words and its value together)."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from herald.maintenance.retention import RetentionReport, log_report


def test_the_summary_line_formats_every_count(caplog: pytest.LogCaptureFixture) -> None:
    counts = [f.name for f in dataclasses.fields(RetentionReport) if f.type in ("int", int)]
    report = RetentionReport(**{name: 100 + i for i, name in enumerate(counts)})
    caplog.set_level(logging.INFO, logger="herald")
    log_report(report)
    [record] = [r for r in caplog.records if r.name == "herald.maintenance.retention"]
    message = record.getMessage()  # raises if the format and its values disagree
    for i, name in enumerate(counts):
        assert f"{100 + i} " in message, name
