"""The long-lived roles run on uvloop's event loop where it is installed (docs/scaling.md, the worker):
`herald api`, `herald worker` and `herald scheduler` each ask `common.run` for the fast loop, and the
fast loop is uvloop's."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any

import pytest
from typer.testing import CliRunner

from herald import cli
from herald.cli import common


@pytest.mark.parametrize("command", [["api"], ["worker"], ["scheduler"]])
def test_each_long_lived_role_runs_on_the_fast_event_loop(
    command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[bool] = []

    def run(main: Coroutine[Any, Any, Any], *, fast_loop: bool = False) -> None:
        main.close()  # never started: only which loop it would run on is under test
        asked.append(fast_loop)

    monkeypatch.setattr(common, "run", run)
    # The process-wide logging set-up is not under test and must not outlive this test.
    monkeypatch.setattr(common, "configure_logging", lambda *args, **kwargs: None)
    monkeypatch.delenv("HERALD_METRICS_PORT", raising=False)
    result = CliRunner().invoke(cli.app, command)
    assert result.exit_code == 0, result.output
    assert asked == [True]


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop is not installed on Windows")
def test_the_fast_event_loop_is_uvloops() -> None:
    import uvloop

    factory = cli.fast_loop_factory()
    assert factory is not None
    with asyncio.Runner(loop_factory=factory) as runner:
        assert isinstance(runner.get_loop(), uvloop.Loop)
