"""The built wheel, installed into a fresh virtual environment outside the checkout, is a
working Herald: `herald --version`, `herald migrate`, the demo school, a send, and a worker
that writes the inbox rows — with every migration, SQL file and static asset read from the
installed package, not from src/.

Slow (a wheel build and a dependency install, about a minute); HERALD_TEST_WHEEL=off skips it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import venv
from pathlib import Path

import httpx
import psycopg
import pytest

import herald
from herald.db.engine import libpq_url
from tests.conftest import JWT_SECRET, create_database, drop_database
from tests.e2e.harness import HeraldProcess, free_port, herald_env

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    os.environ.get("HERALD_TEST_WHEEL") == "off", reason="wheel test skipped: HERALD_TEST_WHEEL=off"
)


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"{args} exit {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ folder of a fresh venv holding only the wheel and its dependencies."""
    outside = tmp_path_factory.mktemp("wheel")
    dist = outside / "dist"
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        outside,
    )
    [wheel] = dist.glob("herald-*.whl")
    assert wheel.name.startswith(f"herald-{herald.__version__}-")
    venv.create(outside / "venv", with_pip=True)
    bin_dir = outside / "venv" / "bin"
    run([str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheel)], outside)
    return bin_dir


def test_the_wheel_runs_outside_the_checkout(
    installed: Path, server_url: str, tmp_path: Path
) -> None:
    herald_bin = str(installed / "herald")
    where = run(
        [str(installed / "python"), "-c", "import herald; print(herald.__file__)"], tmp_path
    )
    assert str(installed.parent) in where and str(ROOT) not in where
    assert run([herald_bin, "--version"], tmp_path).strip() == f"herald {herald.__version__}"

    name = f"herald_wheel_{os.getpid()}_{int(time.time())}"
    url = create_database(server_url, name)
    try:
        env = herald_env(
            HERALD_DATABASE_URL=url,
            HERALD_JWT_SECRET=JWT_SECRET,
            HERALD_DATA_DIR=str(tmp_path / "data"),
            HERALD_POLL_INTERVAL_SECONDS="0.2",
        )
        env["PATH"] = f"{installed}{os.pathsep}{env.get('PATH', '')}"
        env.pop("PYTHONPATH", None)
        run([herald_bin, "migrate"], tmp_path, env)
        run([herald_bin, "demo", "load"], tmp_path, env)
        sent = run(
            [
                herald_bin,
                "send",
                "announcement.posted",
                "--tenant",
                "demo",
                "--audience",
                '{"kind":"all_users"}',
                "--var",
                "title=From the wheel",
                "--var",
                "message=Installed, not checked out",
                "--channel",
                "in_app",
            ],
            tmp_path,
            env,
        )
        event_id = sent.strip().splitlines()[-1]
        worker = HeraldProcess(["worker"], env, tmp_path / "w.log", executable=herald_bin)
        try:
            deadline = time.monotonic() + 60
            while True:
                with psycopg.connect(libpq_url(url)) as conn:
                    rows = conn.execute(
                        "SELECT count(*) FROM notification_recipient r"
                        " JOIN notification_event e ON e.id = r.event_id"
                        " WHERE e.public_id::text = %s",
                        (event_id,),
                    ).fetchone()
                if rows and rows[0] > 0:
                    break
                assert time.monotonic() < deadline, worker.describe()
                time.sleep(0.5)
        finally:
            worker.stop()
        port = free_port()
        api = HeraldProcess(
            ["api", "--host", "127.0.0.1", "--port", str(port)],
            env,
            tmp_path / "api.log",
            executable=herald_bin,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            api.wait_until_healthy(base)
            with httpx.Client(base_url=base, timeout=10) as http:
                assert http.get("/docs/assets/swagger-ui-bundle.js").status_code == 200
                assert http.get("/console/static/htmx.min.js").status_code == 200
                assert (
                    http.get("/v1/widget/herald-inbox.js", follow_redirects=True).status_code == 200
                )
                assert http.get("/openapi.json").json()["info"]["version"] == herald.__version__
        finally:
            api.stop()
    finally:
        drop_database(server_url, name)
