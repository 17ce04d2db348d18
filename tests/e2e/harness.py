"""Real processes for end-to-end tests: `herald` commands, and the browser that drives its pages.

Each herald process writes its output to a file (never a pipe, which would block a chatty process
once its buffer fills); a failure message carries the tail of that file. Stopping sends SIGTERM,
waits, and kills only when the process does not exit in time — so a test can also assert on the
exit status of a graceful stop.

The browser is Debian's `chromium` (/usr/bin/chromium) driven by Playwright for Python; no
browser is downloaded. Every browser test gets it through the `browser` fixture
(tests/e2e/conftest.py), so without Playwright or Chromium they skip and say why — or, with
HERALD_TEST_BROWSER=required (CI), fail.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from tests.gates import require

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

# The console script installed next to this interpreter (`pip install -e .` puts it there).
HERALD = str(Path(sys.executable).with_name("herald"))
# Upper bounds for waits, not expectations: a slow machine only makes the tests slower.
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
CLI_TIMEOUT = 120.0


def sql(url: str, statement: str, *params: object) -> list[tuple[Any, ...]]:
    """One statement on its own autocommit connection; its rows, or [] when it returns none."""
    import psycopg

    from herald.db.engine import libpq_url

    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def reminder_leader_pid(url: str, timeout: float = START_TIMEOUT) -> int:
    """The pid of the `herald scheduler` holding the reminders lease (waiting for one to)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = sql(
            url,
            "SELECT holder FROM scheduler_lease WHERE name = 'reminders' AND expires_at > now()",
        )
        if rows:
            return int(str(rows[0][0]).split(":")[1])
        time.sleep(0.1)
    raise AssertionError("no scheduler took the reminder lease")


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


def banner_value(label: str, text: str) -> str:
    """The value on a line of `herald dev`'s banner (`  API key  hk_…`)."""
    found = re.search(rf"^\s+{label}\s+(\S+)", text, re.MULTILINE)
    assert found, f"no {label!r} line in:\n{text}"
    return found.group(1)


class HeraldProcess:
    """One long-running `herald` command (api, worker, dev) with its output in a log file."""

    def __init__(
        self,
        args: Sequence[str],
        env: Mapping[str, str],
        log_path: Path,
        *,
        executable: str = HERALD,
    ) -> None:
        self.args = list(args)
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            [executable, *self.args],
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


def all_scopes_key(tenant: str, env: Mapping[str, str]) -> dict[str, str]:
    """Headers with a new key of `tenant` holding every scope, made as an operator would, with
    `herald keys create`."""
    created = run_cli(["keys", "create", "--tenant", tenant, "--scopes", "*"], env)
    assert created.returncode == 0, created.stderr
    return {"Authorization": f"Bearer {last_line(created.stdout)}"}


@contextmanager
def api_worker_and_two_schedulers(
    env: Mapping[str, str], logs: Path, started: str
) -> Iterator[tuple[str, dict[str, HeraldProcess]]]:
    """`herald api`, `herald worker` and two `herald scheduler`s ("a" and "b") as processes,
    their logs under `logs`: yields the API's base URL once it is healthy and both schedulers
    have printed `started`, and the processes by name; each is stopped at the end (a test may
    kill one first)."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    processes = {
        "api": HeraldProcess(["api", "--port", str(port)], env, logs / "api.log"),
        "worker": HeraldProcess(["worker"], env, logs / "worker.log"),
        "a": HeraldProcess(["scheduler"], env, logs / "scheduler-a.log"),
        "b": HeraldProcess(["scheduler"], env, logs / "scheduler-b.log"),
    }
    try:
        processes["api"].wait_until_healthy(base_url)
        for name in ("a", "b"):
            processes[name].wait_for_output(started)
        yield base_url, processes
    finally:
        for process in processes.values():
            process.stop()


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


# ---------------------------------------------------------------------------------------------
# The browser: Debian's Chromium under Playwright.

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
# Upper bounds for waits, never expectations of speed.
WAIT_MS = 30_000


def _browser_missing() -> str | None:
    if importlib.util.find_spec("playwright") is None:
        return (
            "Playwright for Python is not installed (it is in the dev extra: "
            "pip install -e '.[dev]'); it drives the demo-page browser tests"
        )
    if not CHROMIUM.exists():
        return (
            f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium) "
            "to run the demo-page browser tests"
        )
    return None


BROWSER_MISSING = _browser_missing()


@contextmanager
def launch_browser() -> Iterator[Browser]:
    """Chromium, headless; without it the calling test skips (or, in CI, fails) with the reason."""
    require("HERALD_TEST_BROWSER", BROWSER_MISSING)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class Tab:
    """One page, and what its console said (errors fail the test that opened it)."""

    page: Page
    problems: list[str]


@contextmanager
def open_tab(browser: Browser, width: int, height: int, *, listen: bool = True) -> Iterator[Tab]:
    """A page in a fresh context (no cookies from another test) at this viewport. With `listen`,
    the page's console errors and uncaught exceptions are collected in the tab's problems."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    problems: list[str] = []
    if listen:
        page.on(
            "console",
            lambda message: (
                problems.append(f"console {message.type}: {message.text}")
                if message.type == "error"
                else None
            ),
        )
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    try:
        yield Tab(page, problems)
    finally:
        context.close()


def screenshot(page: Page, name: str, *, whole: bool = False) -> Path:
    """Save a PNG under test-artifacts/. `whole` first grows the viewport to the page's height:
    Chromium paints the sandboxed (cross-origin) preview frames only inside the viewport."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    if whole:
        height = int(page.evaluate("() => document.documentElement.scrollHeight"))
        page.set_viewport_size({"width": 1280, "height": min(max(height, 900), 8000)})
        page.evaluate(
            "() => new Promise((done) => requestAnimationFrame(() => setTimeout(done, 300)))"
        )
    page.screenshot(path=str(path), full_page=True)
    return path


@contextmanager
def evidence(tab: Tab, name: str, *, expected: tuple[str, ...] = ()) -> Iterator[None]:
    """On a failure, save the page's screenshot and name it (and the console's errors) in the
    report; on success, insist the console stayed free of errors other than `expected` ones."""
    try:
        yield
        unexpected = [p for p in tab.problems if not any(e in p for e in expected)]
        assert not unexpected, "the page logged errors:\n" + "\n".join(unexpected)
    except BaseException as failure:
        try:
            path = screenshot(tab.page, f"{name}-failure")
            note = f"screenshot of the page at the failure: {path}"
        except Exception as exc:  # the page may be gone; the failure itself matters more
            note = f"no screenshot ({type(exc).__name__}: {exc})"
        print(note)
        failure.add_note(note)
        if tab.problems:
            failure.add_note("the page logged:\n" + "\n".join(tab.problems))
        raise
