"""Where Herald's own processes find their database.

Every command resolves its URL here, so `herald migrate`, `herald api`, `herald worker` and
`herald dev` agree: HERALD_DATABASE_URL when it is set, otherwise database `herald` on the
embedded PostgreSQL under HERALD_DATA_DIR (started, or attached to, on the way).
"""

from __future__ import annotations

from herald.config import Settings
from herald.db import embedded

EMBEDDED_DATABASE = "herald"


def resolve_database_url(settings: Settings) -> str:
    """The database URL this process uses; starts the embedded server when none is configured."""
    if settings.database_url:
        return settings.database_url
    # The server stops when the last process attached to it exits.
    admin_url = embedded.start(settings.data_dir)
    return embedded.ensure_database(admin_url, EMBEDDED_DATABASE)


def is_embedded(settings: Settings) -> bool:
    return not settings.database_url
