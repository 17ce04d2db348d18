"""metrics:read API key scope (GET /metrics)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BEFORE = "'events:write', 'events:read', 'directory:write', 'secrets:write', 'feed:write', 'admin'"
_AFTER = f"{_BEFORE}, 'metrics:read'"


def _scopes_check(scopes: str) -> None:
    op.drop_constraint(op.f("api_key_scopes_check"), "api_key", type_="check")
    op.create_check_constraint(
        op.f("api_key_scopes_check"), "api_key", f"scopes <@ ARRAY[{scopes}, '*']::text[]"
    )


def upgrade() -> None:
    _scopes_check(_AFTER)


def downgrade() -> None:
    # A key granted metrics:read cannot survive the narrower check; it loses that scope.
    op.execute("UPDATE api_key SET scopes = array_remove(scopes, 'metrics:read')")
    _scopes_check(_BEFORE)
