"""A real PgBouncer (Debian's `pgbouncer` package, /usr/sbin/pgbouncer) in front of the test
PostgreSQL, for the tests and the bench that run Herald behind a transaction pooler.

`run_pgbouncer` writes an ini file of its own in a temporary folder, starts the binary in the
foreground on a free localhost port (never the package's service) and stops it afterwards. Every
database name is passed through (`* = host=… port=…`), so a URL's database is the same behind
the pooler as direct. The PostgreSQL may listen on TCP or, like the embedded one, only on a Unix
socket: PgBouncer reaches a socket directory as `host=/path`.

Without the binary the caller skips, saying why — or fails when HERALD_TEST_PGBOUNCER=required
(CI's second run).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import unquote

import psycopg

from herald.db.engine import libpq_url, parse_database_url
from tests.gates import require

PGBOUNCER = os.environ.get("HERALD_TEST_PGBOUNCER_BINARY", "/usr/sbin/pgbouncer")
START_TIMEOUT = 30.0


def pgbouncer_missing() -> str | None:
    """Why PgBouncer cannot run here, or None."""
    if not (Path(PGBOUNCER).is_file() and os.access(PGBOUNCER, os.X_OK)):
        return f"{PGBOUNCER} is missing (Debian's pgbouncer package)"
    return None


def require_pgbouncer() -> None:
    """Skip with the reason, or fail under HERALD_TEST_PGBOUNCER=required."""
    require("HERALD_TEST_PGBOUNCER", pgbouncer_missing())


@dataclass(frozen=True)
class Bouncer:
    port: int
    admin_user: str

    def url_for(self, database_url: str) -> str:
        """`database_url` (a database on the server behind this PgBouncer) through it."""
        parsed = parse_database_url(database_url)
        return replace(parsed, hosts=(("127.0.0.1", self.port),)).render("postgresql")

    def show(self, what: str, database_url: str) -> list[tuple[object, ...]]:
        """`SHOW <what>` on PgBouncer's admin console (simple protocol, as it requires)."""
        admin = replace(parse_database_url(self.url_for(database_url)), database="pgbouncer")
        with psycopg.connect(admin.render("postgresql"), autocommit=True) as conn:
            cursor = conn.cursor()
            cursor.execute(f"SHOW {what}".encode(), prepare=False)
            return list(cursor.fetchall())


def with_password(url: str, password: str) -> str:
    """`url` with this password (PgBouncer's trust authentication lets any through)."""
    parsed = parse_database_url(url)
    user = parsed.userinfo.partition(":")[0] or "postgres"
    return replace(parsed, userinfo=f"{user}:{password}").render("postgresql")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def run_pgbouncer(
    server_url: str, *, pool_mode: str = "transaction", pool_size: int = 1
) -> Iterator[Bouncer]:
    """PgBouncer in `pool_mode` with `pool_size` server connections per (database, user), in
    front of the server of `server_url`; yields it once it accepts connections."""
    parsed = parse_database_url(libpq_url(server_url))
    host, port = parsed.hosts[0] if parsed.hosts else ("/var/run/postgresql", None)
    user = unquote(parsed.userinfo.partition(":")[0]) or pwd.getpwuid(os.getuid()).pw_name
    listen = _free_port()
    folder = Path(tempfile.mkdtemp(prefix="herald-pgbouncer-"))
    target = f"host={host}" + (f" port={port}" if port else "")
    ini = folder / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"* = {target}\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {listen}\n"
        "unix_socket_dir =\n"
        "auth_type = trust\n"
        f"auth_file = {folder / 'users.txt'}\n"
        f"admin_users = {user}\n"
        f"pool_mode = {pool_mode}\n"
        f"default_pool_size = {pool_size}\n"
        "min_pool_size = 0\n"
        "reserve_pool_size = 0\n"
        "max_client_conn = 200\n"
        "server_reset_query =\n"
        "ignore_startup_parameters = extra_float_digits\n"
        f"logfile = {folder / 'pgbouncer.log'}\n"
        f"pidfile = {folder / 'pgbouncer.pid'}\n"
    )
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    command = [PGBOUNCER, str(ini)]
    if os.getuid() == 0:
        # PgBouncer refuses to run as root: as the owner of the server's socket directory (the
        # embedded server's is private to it), else `postgres` (or nobody); it reads the folder.
        runas = "postgres" if _user_exists("postgres") else "nobody"
        if host.startswith("/"):
            runas = pwd.getpwuid(Path(host).stat().st_uid).pw_name
        command = [PGBOUNCER, "-u", runas, str(ini)]
        shutil.chown(folder, runas)
        for path in folder.iterdir():
            shutil.chown(path, runas)
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    bouncer = Bouncer(listen, user)
    try:
        _wait_until_it_answers(process, listen, folder / "pgbouncer.log")
        yield bouncer
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _wait_until_it_answers(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"pgbouncer exited with {process.returncode}: {tail}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"pgbouncer did not listen on port {port} in {START_TIMEOUT} s")
