"""A real primary and its streaming standby on this machine, for the read-standby tests.

`initdb` makes a primary (wal_level=replica, trust, replication allowed from 127.0.0.1) on a free
port, `pg_basebackup -R` copies it into a standby that streams from it, on another free port,
both in one temporary folder. PostgreSQL refuses to run as root, so a root test runs them as
the `postgres` OS user. `stop()` stops both and removes the folder.

    with ReplicaCluster.create() as cluster:
        cluster.primary_url("herald"), cluster.standby_url("herald")
        cluster.pause_replay(); …; cluster.resume_replay(); cluster.wait_caught_up()

`require_replica()` skips with the reason when the binaries are missing, or fails when
HERALD_TEST_REPLICA=required (CI's second run).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psycopg

from tests.e2e.harness import free_port
from tests.gates import require

BINDIR = Path(os.environ.get("HERALD_TEST_PG_BINDIR", "/usr/lib/postgresql/15/bin"))
RUN_AS = "postgres"
WAIT_TIMEOUT = 60.0  # an upper bound, not an expectation


def missing_reason() -> str | None:
    for tool in ("initdb", "pg_ctl", "pg_basebackup"):
        if not (BINDIR / tool).exists():
            return f"{BINDIR / tool} is missing (Debian: apt-get install postgresql-15)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(RUN_AS)
        except KeyError:
            return f"running as root and there is no {RUN_AS!r} OS user to run PostgreSQL as"
    return None


def require_replica() -> None:
    """Skip with the reason, or fail under HERALD_TEST_REPLICA=required."""
    require("HERALD_TEST_REPLICA", missing_reason())


def query(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        cursor = conn.execute(sql.encode())
        return cursor.fetchall() if cursor.description else []


class ReplicaCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.primary_port = free_port()
        self.standby_port = free_port()
        self._user = pwd.getpwnam(RUN_AS) if os.geteuid() == 0 else None

    @classmethod
    @contextmanager
    def create(cls) -> Iterator[ReplicaCluster]:
        root = Path(tempfile.mkdtemp(prefix="herald-replica-"))
        cluster = cls(root)
        try:
            if cluster._user is not None:
                os.chown(root, cluster._user.pw_uid, cluster._user.pw_gid)
            cluster._build()
            yield cluster
        finally:
            cluster.stop()

    def _run(self, *args: str) -> None:
        kwargs: dict[str, Any] = {}
        if self._user is not None:
            kwargs = {"user": self._user.pw_uid, "group": self._user.pw_gid}
        done = subprocess.run(
            list(args), capture_output=True, text=True, cwd=self.root, check=False, **kwargs
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {done.stdout}{done.stderr}")

    def _settings(self, pgdata: Path, port: int) -> None:
        with open(pgdata / "postgresql.conf", "a") as conf:
            conf.write(
                f"\nport = {port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.root}'\nwal_level = replica\n"
                "max_wal_senders = 5\nfsync = off\nsynchronous_commit = off\n"
                "full_page_writes = off\n"
            )

    def _build(self) -> None:
        primary, standby = self.root / "primary", self.root / "standby"
        self._run(
            str(BINDIR / "initdb"), "-D", str(primary), "-U", "postgres", "--auth=trust",
            "-E", "UTF8", "--no-sync",
        )  # fmt: skip
        self._settings(primary, self.primary_port)
        with open(primary / "pg_hba.conf", "a") as hba:
            hba.write("\nhost replication all 127.0.0.1/32 trust\n")
        self.start("primary")
        self._run(
            str(BINDIR / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(self.primary_port),
            "-U", "postgres", "-D", str(standby), "-R", "-X", "stream", "--no-sync",
        )  # fmt: skip
        self._settings(standby, self.standby_port)
        self.start("standby")
        self.wait_caught_up()

    def start(self, node: str) -> None:
        pgdata = self.root / node
        self._run(
            str(BINDIR / "pg_ctl"), "-D", str(pgdata), "-l", str(self.root / f"{node}.log"),
            "-w", "-t", "60", "start",
        )  # fmt: skip

    def stop_node(self, node: str) -> None:
        self._run(str(BINDIR / "pg_ctl"), "-D", str(self.root / node), "-m", "fast", "-w", "stop")

    def stop(self) -> None:
        for node in ("standby", "primary"):
            if (self.root / node / "postmaster.pid").exists():
                with suppress(RuntimeError):
                    self.stop_node(node)
        shutil.rmtree(self.root, ignore_errors=True)

    def primary_url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.primary_port}/{database}"

    def standby_url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.standby_port}/{database}"

    def pause_replay(self) -> None:
        query(self.standby_url(), "SELECT pg_wal_replay_pause()")

    def resume_replay(self) -> None:
        query(self.standby_url(), "SELECT pg_wal_replay_resume()")

    def wait_caught_up(self) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        target = query(self.primary_url(), "SELECT pg_current_wal_insert_lsn()")[0][0]
        deadline = time.monotonic() + WAIT_TIMEOUT
        while time.monotonic() < deadline:
            with suppress(psycopg.OperationalError):
                replayed = query(
                    self.standby_url(), f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn"
                )[0][0]
                if replayed:
                    return
            time.sleep(0.05)
        raise RuntimeError("the standby did not catch up")


@contextmanager
def herald_cluster() -> Iterator[ReplicaCluster]:
    """A primary and its standby with Herald's database `herald` migrated and replayed."""
    from herald.db import migrate

    require_replica()
    with ReplicaCluster.create() as running:
        query(running.primary_url(), "CREATE DATABASE herald")
        migrate.upgrade(running.primary_url("herald"))
        running.wait_caught_up()
        yield running
