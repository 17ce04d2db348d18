"""Alembic, driven from code: `herald migrate` and the test fixtures call these."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from herald.db.engine import sqlalchemy_url

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    # Percent signs in a URL would be read as interpolation by ConfigParser.
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Apply migrations up to `revision`; idempotent."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)
