"""The process plumbing the benches that run a real `herald api` share: the bench's own database on
the bench server, the API subprocess (started, waited for, stopped) and the people it serves.

A bench is run as a script (`python bench/api.py`), so it puts the checkout on sys.path before it
imports this module; the imports below then resolve as they do for the tests.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
from sqlalchemy.engine import make_url
from tests.conftest import create_database, drop_database
from tests.e2e.harness import HERALD

from herald.config import Settings
from herald.db import embedded
from herald.db.engine import libpq_url

ROOT = Path(__file__).resolve().parent.parent


def bench_server(database_url: str | None = None) -> str:
    """The PostgreSQL server the bench makes its database on: the one given, else
    HERALD_BENCH_DATABASE_URL, else the embedded one under .herald/bench."""
    return (
        database_url
        or os.environ.get("HERALD_BENCH_DATABASE_URL")
        or embedded.start(ROOT / ".herald" / "bench")
    )


@dataclass(frozen=True)
class BenchDatabase:
    """A database of the bench's own on the bench server, and the JWT settings its API runs with."""

    server: str
    name: str
    url: str
    secret: str
    settings: Settings

    @classmethod
    def create(
        cls, database_url: str | None, prefix: str, *, reuse: str | None = None
    ) -> BenchDatabase:
        """A new database, or with `reuse` the one of that name a run with --keep left."""
        server = bench_server(database_url)
        if reuse is not None:
            name = reuse
            url = make_url(server).set(database=name).render_as_string(hide_password=False)
        else:
            name = f"{prefix}_{uuid.uuid4().hex[:8]}"
            url = create_database(server, name)
        secret = secrets.token_urlsafe(32)
        return cls(server, name, url, secret, Settings(database_url=url, jwt_secret=secret))

    def drop(self) -> None:
        drop_database(self.server, self.name)

    def server_version(self) -> str:
        with psycopg.connect(libpq_url(self.url)) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        return str(row[0]) if row else "?"


def seed_people(conn: psycopg.Connection[Any], tenant: str, people: int) -> list[str]:
    """`people` people of `tenant`, external ids p1 … pN, generated server-side (no row leaves
    Python); returns their external ids."""
    conn.execute(
        "INSERT INTO person (tenant_id, external_id, full_name, email, locale) "
        "SELECT %s, 'p' || g, 'Person ' || g, 'p' || g || '@example.com', 'en' "
        "FROM generate_series(1, %s) g",
        (tenant, people),
    )
    return [f"p{n}" for n in range(1, people + 1)]


def start_api(
    url: str,
    jwt_secret: str,
    port: int,
    log_path: Path,
    environment: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """`herald api` on `port`, answering /healthz, with only the HERALD_* settings given here (the
    caller's own are dropped, so the bench measures what it says) plus `environment`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    env.update(environment or {})
    env.update(HERALD_DATABASE_URL=url, HERALD_JWT_SECRET=jwt_secret, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [HERALD, "api", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"herald api exited: {log_path.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    stop_process(proc)
    raise RuntimeError("herald api never answered /healthz")


def stop_process(proc: subprocess.Popen[Any], timeout: float = 20) -> None:
    """SIGTERM (the process drains as it would in production), then SIGKILL after `timeout`."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
