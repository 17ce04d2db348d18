"""Alembic environment: runs migrations against the URL herald.db.migrate put in the config."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from herald.db.schema import metadata

config = context.config


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url is not None
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=metadata, compare_type=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations_online()
