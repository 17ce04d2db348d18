"""Engines for Herald's own processes (the host passes its own connection to send())."""

from __future__ import annotations

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine


def sqlalchemy_url(url: str) -> str:
    """Normalise a libpq-style URL to SQLAlchemy's psycopg 3 dialect."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres", "postgresql+psycopg2"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def libpq_url(url: str) -> str:
    """The same URL without SQLAlchemy's driver suffix, for psycopg.connect()."""
    parsed = make_url(url).set(drivername="postgresql")
    return parsed.render_as_string(hide_password=False)


def make_async_engine(url: str, *, pool_size: int = 10) -> AsyncEngine:
    return create_async_engine(
        sqlalchemy_url(url), pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True
    )


def make_sync_engine(url: str, *, pool_size: int = 5) -> Engine:
    return create_engine(sqlalchemy_url(url), pool_size=pool_size, pool_pre_ping=True)
