"""Real `herald` processes for end-to-end tests: start, wait until they answer, stop for sure.

Each process writes its output to a file (never a pipe, which would block a chatty process once
its buffer fills); a failure message carries the tail of that file. Stopping sends SIGTERM, waits,
and kills only when the process does not exit in time — so a test can also assert on the exit
status of a graceful stop.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import httpx

# The console script installed next to this interpreter (`pip install -e .` puts it there).
HERALD = str(Path(sys.executable).with_name("herald"))
# Upper bounds for waits, not expectations: a slow machine only makes the tests slower.
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
CLI_TIMEOUT = 120.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def herald_env(base: Mapping[str, str] | None = None, **overrides: str | None) -> dict[str, str]:
    """The test process's environment with HERALD_* replaced: only what the test passes counts."""
    env = {k: v for k, v in (base or os.environ).items() if not k.startswith("HERALD_")}
    env["PYTHONUNBUFFERED"] = "1"
    for key, value in overrides.items():
        if value is not None:
            env[key] = value
    return env


def run_cli(args: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """Run one `herald …` command to completion."""
    return subprocess.run(
        [HERALD, *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines, "the command printed nothing on standard output"
    return lines[-1].strip()


class HeraldProcess:
    """One long-running `herald` command (api, worker, dev) with its output in a log file."""

    def __init__(self, args: Sequence[str], env: Mapping[str, str], log_path: Path) -> None:
        self.args = list(args)
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            [HERALD, *self.args],
            env=dict(env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # Its own process group: a signal meant for it never reaches pytest, and vice versa.
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def describe(self) -> str:
        tail = "\n".join(self.output().splitlines()[-40:])
        return f"`herald {' '.join(self.args)}` (exit {self.proc.poll()}); output:\n{tail}"

    def wait_for_output(self, needle: str, timeout: float = START_TIMEOUT) -> str:
        """Wait until `needle` appears in the output; fail early if the process exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.output()
            if needle in text:
                return text
            if self.proc.poll() is not None:
                raise AssertionError(f"exited before printing {needle!r}: {self.describe()}")
            time.sleep(0.1)
        raise AssertionError(f"never printed {needle!r}: {self.describe()}")

    def wait_until_healthy(self, base_url: str, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"exited before answering /healthz: {self.describe()}")
            try:
                if httpx.get(f"{base_url}/healthz", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"never answered {base_url}/healthz: {self.describe()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> int:
        """Ask the process to stop; kill it if it has not exited within `timeout`."""
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(sig)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.kill()
            return self.proc.wait()
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(STOP_TIMEOUT)


def wait_for_inbox(
    base_url: str,
    token: str,
    *,
    at_least: int = 1,
    until: Callable[[list[dict[str, object]]], bool] | None = None,
    timeout: float = START_TIMEOUT,
) -> list[dict[str, object]]:
    """Poll the end user's inbox until it holds `at_least` items and, if given, `until` holds of
    them (fan-out runs in a worker; the inbox may already hold what other tests sent)."""
    deadline = time.monotonic() + timeout
    headers = {"Authorization": f"Bearer {token}"}
    last: httpx.Response | None = None
    while time.monotonic() < deadline:
        last = httpx.get(f"{base_url}/v1/me/notifications", headers=headers, timeout=10)
        assert last.status_code == 200, last.text
        items: list[dict[str, object]] = last.json()["items"]
        if len(items) >= at_least and (until is None or until(items)):
            return items
        time.sleep(0.2)
    raise AssertionError(
        f"the inbox never held {at_least} item(s); last answer: {last and last.text}"
    )
