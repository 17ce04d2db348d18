"""row-level security on every tenant table, and the herald_app role

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 13:30:00.000000

Creates the NOLOGIN role herald_app (no BYPASSRLS) when it is missing, makes the migrating user a
member (so it can SET ROLE to it), grants herald_app what the API and workers use, and puts every
table carrying tenant_id under forced row-level security (herald.db.tenancy). A user that may not
create roles gets the exact SQL its database administrator must run, and nothing is changed.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from herald.db import tenancy

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# The parent-scoped tables that existed at this revision. Later ones (pending_receipt, 0024) are
# protected by their own migration: reading tenancy.PARENT_SCOPED here would name tables that are
# not there yet.
_PARENT_SCOPED = ("feed_notification_read",)


def _tables(names: list[str]) -> list[str]:
    return sorted({*names, *_PARENT_SCOPED})


def upgrade() -> None:
    bind = op.get_bind()
    _ensure_role(bind)
    op.execute(f"GRANT USAGE ON SCHEMA {_schema(bind)} TO {tenancy.APP_ROLE}")
    op.execute(
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {_schema(bind)} TO {tenancy.APP_ROLE}"
    )
    # Tables and sequences created by later migrations get the same privileges; each migration
    # still adds its table's policies with tenancy.protect() (a test checks that it did).
    op.execute(
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {_schema(bind)} "
        f"GRANT USAGE, SELECT ON SEQUENCES TO {tenancy.APP_ROLE}"
    )
    names = [row[0] for row in bind.execute(sa.text(tenancy.tenant_tables_sql()))]
    for table in _tables(names):
        for statement in tenancy.protect(table, rule=tenancy.PARENT_SCOPED.get(table)):
            op.execute(statement)


def downgrade() -> None:
    bind = op.get_bind()
    names = [row[0] for row in bind.execute(sa.text(tenancy.tenant_tables_sql()))]
    for table in _tables(names):
        for statement in tenancy.unprotect(table):
            op.execute(statement)
    op.execute(
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {_schema(bind)} "
        f"REVOKE USAGE, SELECT ON SEQUENCES FROM {tenancy.APP_ROLE}"
    )
    op.execute(
        f"REVOKE USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {_schema(bind)} FROM {tenancy.APP_ROLE}"
    )
    op.execute(f"REVOKE USAGE ON SCHEMA {_schema(bind)} FROM {tenancy.APP_ROLE}")
    # The role itself stays: it is cluster-wide, and other databases may use it.


def _schema(bind: sa.Connection) -> str:
    return str(bind.execute(sa.text("SELECT quote_ident(current_schema())")).scalar_one())


def _ensure_role(bind: sa.Connection) -> None:
    user = str(bind.execute(sa.text("SELECT current_user")).scalar_one())
    exists = bind.execute(
        sa.text("SELECT 1 FROM pg_roles WHERE rolname = :role"), {"role": tenancy.APP_ROLE}
    ).first()
    member = (
        bind.execute(
            sa.text("SELECT pg_has_role(current_user, :role, 'MEMBER')"), {"role": tenancy.APP_ROLE}
        ).scalar()
        if exists
        else False
    )
    if exists and member:
        return
    try:
        with bind.begin_nested():
            if not exists:
                bind.execute(sa.text(f"CREATE ROLE {tenancy.APP_ROLE} NOLOGIN"))
            bind.execute(sa.text(f'GRANT {tenancy.APP_ROLE} TO "{user}"'))
    except sa.exc.DBAPIError as exc:
        sql = ";\n  ".join(tenancy.role_sql(user))
        raise tenancy.RoleSetupRefused(
            f"the database user {user!r} may not create the role {tenancy.APP_ROLE} or join "
            f"it ({type(exc.orig).__name__}). Ask a database administrator to run:\n  {sql};\n"
            "then run `herald migrate` again."
        ) from None
