"""Multiprocess metrics: a scrape never fails on a file another process has only just created
(observability.metrics.settled_collector)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client import multiprocess as mp
from prometheus_client.mmap_dict import MmapedDict, mmap_key

from herald.observability.metrics import settled_collector


def write_counter(directory: Path, pid: int, value: float) -> None:
    values = MmapedDict(str(directory / f"counter_{pid}.db"))
    key = mmap_key("herald_test", "herald_test_total", ["role"], ["worker"], "a test counter")
    values.write_value(key, value, 0.0)
    values.close()


def scrape(collector: type, directory: Path) -> bytes:
    registry = CollectorRegistry()
    registry.register(collector(None, path=str(directory)))
    return generate_latest(registry)


def test_a_file_not_yet_sized_is_left_for_the_next_scrape(tmp_path: Path) -> None:
    write_counter(tmp_path, 101, 3)
    (tmp_path / "counter_102.db").touch()  # created by a process, not yet grown to its size

    # prometheus_client's own collector fails the whole scrape on it ...
    with pytest.raises(Exception, match="unpack"):
        scrape(mp.MultiProcessCollector, tmp_path)
    # ... Herald's leaves it out and serves every other process's figures.
    assert b'herald_test_total{role="worker"} 3.0' in scrape(
        settled_collector(mp.MultiProcessCollector), tmp_path
    )

    write_counter(tmp_path, 102, 4)  # sized and written: summed in at the next scrape
    assert b'herald_test_total{role="worker"} 7.0' in scrape(
        settled_collector(mp.MultiProcessCollector), tmp_path
    )
