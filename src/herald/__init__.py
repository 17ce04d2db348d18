"""Herald: a self-hostable notification engine over PostgreSQL.

The public library surface is small on purpose: an application records that something
happened, inside its own transaction, and Herald does the rest in its workers::

    import herald
    with engine.begin() as tx:
        ...  # the host's own business write
        herald.send(tx, herald.SendInput(kind="announcement.posted", audience=..., variables=...))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from herald import feed, followups
    from herald.secrets.service import stash as stash_secret
    from herald.sending.service import SendInput, SendResult, asend, send

# Herald's version: the one place it is written (pyproject.toml reads it from here; the
# OpenAPI document, `herald --version` and CHANGELOG.md's latest entry name it).
__version__ = "0.2.0"

__all__ = [
    "SendInput",
    "SendResult",
    "__version__",
    "asend",
    "feed",
    "followups",
    "send",
    "stash_secret",
]


def __getattr__(name: str) -> Any:
    # Imported lazily so that `import herald.db.schema` (Alembic, tools) stays light.
    if name in ("feed", "followups"):
        import importlib

        return importlib.import_module(f"herald.{name}")
    if name == "stash_secret":
        from herald.secrets import service as secrets

        return secrets.stash
    if name in __all__:
        from herald.sending import service

        return getattr(service, name)
    raise AttributeError(name)
