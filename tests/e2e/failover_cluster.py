"""A real pg_auto_failover formation on this machine: a monitor, a primary and a secondary.

`pg_autoctl` (Debian: `postgresql-15-auto-failover`) creates each node in a temporary folder, on
free 127.0.0.1 ports with trust authentication and no TLS, and keeps it running (`pg_autoctl
run`, one process per node). PostgreSQL refuses to run as root, so a root test runs every
`pg_autoctl` as the `postgres` OS user; anyone else runs them as themselves. Nothing is written
outside the temporary folder: pg_autoctl's configuration and state go there too (XDG_* point
into it). `stop()` stops every process it started and removes the folder.

    with FailoverCluster.create() as cluster:   # about half a minute: initdb ×3, base backup
        url = cluster.url("postgres")          # …@127.0.0.1:p1,127.0.0.1:p2/…?target_session_attrs=read-write
        cluster.failover()                     # `pg_autoctl perform failover`; returns when done

`unavailable_reason()` says why no formation can be made here (the tests skip with it, or fail
when HERALD_TEST_FAILOVER=required, as CI sets it).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from tests.e2e.harness import free_port

# Upper bounds, not expectations.
CREATE_TIMEOUT = 120.0
STATE_TIMEOUT = 120.0
FAILOVER_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0
PG_LIB = Path("/usr/lib/postgresql")
RUN_AS = "postgres"  # the OS user that runs PostgreSQL when the tests run as root


def pg_bindir() -> Path | None:
    """The bin folder of the PostgreSQL that has the pgautofailover extension, newest first."""
    for lib in sorted(PG_LIB.glob("*/lib/pgautofailover.so"), reverse=True):
        bindir = lib.parent.parent / "bin"
        if (bindir / "pg_ctl").exists():
            return bindir
    return None


def unavailable_reason() -> str | None:
    """Why a formation cannot be made on this machine, or None when it can."""
    if shutil.which("pg_autoctl") is None:
        return "pg_autoctl is not installed (Debian: apt-get install postgresql-15-auto-failover)"
    if pg_bindir() is None:
        return f"no PostgreSQL under {PG_LIB} has the pgautofailover extension"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(RUN_AS)
        except KeyError:
            return f"running as root and there is no {RUN_AS!r} OS user to run PostgreSQL as"
    return None


@dataclass(frozen=True)
class NodeState:
    name: str
    port: int
    current: str
    assigned: str


class FailoverCluster:
    """One monitor and two data nodes (node1 starts as the primary, node2 as its secondary)."""

    def __init__(self, root: Path, bindir: Path) -> None:
        self.root = root
        self.bindir = bindir
        self.monitor_port = free_port()
        self.node_ports = {"node1": free_port(), "node2": free_port()}
        self.monitor_uri = (
            f"postgresql://autoctl_node@127.0.0.1:{self.monitor_port}/pg_auto_failover"
            "?sslmode=disable"
        )
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: dict[str, Any] = {}
        self._user: pwd.struct_passwd | None = pwd.getpwnam(RUN_AS) if os.geteuid() == 0 else None

    # -- creation -------------------------------------------------------------------------

    @classmethod
    @contextmanager
    def create(cls) -> Iterator[FailoverCluster]:
        reason = unavailable_reason()
        if reason is not None:
            raise RuntimeError(reason)
        bindir = pg_bindir()
        assert bindir is not None
        root = Path(tempfile.mkdtemp(prefix="herald-failover-"))
        cluster = cls(root, bindir)
        try:
            if cluster._user is not None:
                os.chown(root, cluster._user.pw_uid, cluster._user.pw_gid)
            cluster._start()
            yield cluster
        finally:
            cluster.stop()

    def _start(self) -> None:
        monitor = self.root / "monitor"
        self._autoctl(
            "create",
            "monitor",
            "--pgdata",
            str(monitor),
            "--pgport",
            str(self.monitor_port),
            "--hostname",
            "127.0.0.1",
            "--auth",
            "trust",
            "--no-ssl",
        )
        # The monitor listens on '*' by default; this formation is for this machine only.
        self._autoctl(
            "config", "set", "--pgdata", str(monitor), "postgresql.listen_addresses", "127.0.0.1"
        )
        self._spawn("monitor", "run", "--pgdata", str(monitor))
        self._wait_for(self._monitor_answers, "the monitor to accept connections")
        for name, port in self.node_ports.items():
            self._spawn(
                name,
                "create",
                "postgres",
                "--pgdata",
                str(self.root / name),
                "--pgport",
                str(port),
                "--hostname",
                "127.0.0.1",
                "--listen",
                "127.0.0.1",
                "--name",
                name,
                "--auth",
                "trust",
                "--no-ssl",
                "--monitor",
                self.monitor_uri,
                "--run",
            )
            # node1 first, alone, so that it is the one that becomes the primary.
            want = {"single", "primary", "wait_primary"} if name == "node1" else {"secondary"}
            self._wait_for(partial(self._node_in, name, want), f"{name} to reach {sorted(want)}")
        self.wait_until_stable()

    # -- what the tests use ---------------------------------------------------------------

    def url(self, database: str, user: str = "postgres") -> str:
        """A libpq multi-host URL that follows the primary (node1 first, then node2)."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.node_ports.values())
        return f"postgresql://{user}@{hosts}/{database}?target_session_attrs=read-write"

    def node_url(self, name: str, database: str, user: str = "postgres") -> str:
        """A URL of one node, whatever its role."""
        return f"postgresql://{user}@127.0.0.1:{self.node_ports[name]}/{database}"

    def state(self) -> list[NodeState]:
        """`pg_autoctl show state` as the monitor sees it; [] while the monitor cannot say."""
        done = self._autoctl(
            "show", "state", "--pgdata", str(self.root / "monitor"), "--json", check=False
        )
        if done.returncode != 0:
            return []
        try:
            rows = json.loads(done.stdout)
        except json.JSONDecodeError:
            return []
        return [
            NodeState(
                str(row["nodename"]),
                int(row["nodeport"]),
                str(row["current_group_state"]),
                str(row["assigned_group_state"]),
            )
            for row in rows
        ]

    def primary(self) -> str:
        """The name of the node that is the primary now (stable formation)."""
        primaries = [n.name for n in self.state() if n.current == n.assigned == "primary"]
        assert len(primaries) == 1, self.state()
        return primaries[0]

    def wait_until_stable(self, timeout: float = STATE_TIMEOUT) -> None:
        """Until one node is primary and the other secondary, as assigned."""

        def stable() -> bool:
            nodes = self.state()
            return sorted((n.current, n.assigned) for n in nodes) == [
                ("primary", "primary"),
                ("secondary", "secondary"),
            ]

        self._wait_for(stable, "one primary and one secondary", timeout)

    def failover(self, timeout: float = FAILOVER_TIMEOUT) -> None:
        """`pg_autoctl perform failover`: the secondary is promoted, the primary demoted. Returns
        once the monitor reports the new primary (pg_autoctl waits for it)."""
        done = self._autoctl(
            "perform",
            "failover",
            "--pgdata",
            str(self.root / "monitor"),
            "--wait",
            str(int(timeout)),
            check=False,
            timeout=timeout + 30,
        )
        if done.returncode != 0:
            raise AssertionError(f"pg_autoctl perform failover failed:\n{done.stdout}{done.stderr}")

    def events(self) -> str:
        """The monitor's recent events (for failure messages and reports)."""
        done = self._autoctl(
            "show", "events", "--pgdata", str(self.root / "monitor"), "--count", "40", check=False
        )
        return done.stdout + done.stderr

    def describe(self) -> str:
        parts = [f"state: {self.state()}", self.events()]
        for name, proc in self._procs.items():
            log = self.root / f"{name}.log"
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            parts.append(f"--- {name} (exit {proc.poll()}):\n{tail}")
        return "\n".join(parts)

    # -- teardown -------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every pg_autoctl this cluster started (data nodes first), make sure no postgres
        is left on its folders, and remove the folder."""
        for name in [*reversed(list(self.node_ports)), "monitor"]:
            proc = self._procs.pop(name, None)
            if proc is None:
                continue
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # pg_autoctl stops its postgres ("fast")
                try:
                    proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    with suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(STOP_TIMEOUT)
            self._logs.pop(name).close()
        for name in [*self.node_ports, "monitor"]:
            pgdata = self.root / name
            if (pgdata / "postmaster.pid").exists():
                self._run(
                    [str(self.bindir / "pg_ctl"), "stop", "-D", str(pgdata), "-m", "immediate"],
                    check=False,
                )
        shutil.rmtree(self.root, ignore_errors=True)

    # -- plumbing -------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        """Only what pg_autoctl needs; its config and state stay inside the folder."""
        env = {
            "PATH": f"{self.bindir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.root),
            "XDG_CONFIG_HOME": str(self.root / "config"),
            "XDG_DATA_HOME": str(self.root / "share"),
            "XDG_RUNTIME_DIR": str(self.root / "run"),
            "PG_CONFIG": str(self.bindir / "pg_config"),
            "LANG": "C.UTF-8",
        }
        if self._user is not None:
            env["USER"] = env["LOGNAME"] = self._user.pw_name
        return env

    def _as_user(self) -> dict[str, Any]:
        if self._user is None:
            return {}
        return {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}

    def _run(
        self, args: Sequence[str], *, check: bool = True, timeout: float = CREATE_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            list(args),
            env=self._env(),
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
            **self._as_user(),
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
            )
        return done

    def _autoctl(
        self, *args: str, check: bool = True, timeout: float = CREATE_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        return self._run(["pg_autoctl", *args], check=check, timeout=timeout)

    def _spawn(self, name: str, *args: str) -> None:
        log = (self.root / f"{name}.log").open("wb")
        self._logs[name] = log
        self._procs[name] = subprocess.Popen(
            ["pg_autoctl", *args],
            env=self._env(),
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            **self._as_user(),
        )

    def _monitor_answers(self) -> bool:
        done = self._run(
            [
                str(self.bindir / "pg_isready"),
                "-q",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.monitor_port),
            ],
            check=False,
        )
        return done.returncode == 0

    def _node_in(self, name: str, states: set[str]) -> bool:
        return any(
            n.name == name and n.current == n.assigned and n.current in states for n in self.state()
        )

    def _wait_for(
        self, check: Callable[[], bool], what: str, timeout: float = CREATE_TIMEOUT
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited while waiting for {what}:\n{self.describe()}"
                    )
            if check():
                return
            time.sleep(0.5)
        raise RuntimeError(f"timed out waiting for {what}:\n{self.describe()}")
