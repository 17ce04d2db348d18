"""Fixtures shared by the integration tests that need them by name."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.auth.service import create_api_key
from herald.secrets.vault import TableVault, Vault
from tests.integration.reminder_helpers import reminder_settings, reminders_client

__all__ = ["auth", "reminder_settings", "reminders_client", "vault"]


@pytest.fixture
def vault(engine: AsyncEngine) -> Vault:
    """The secrets vault in the test database, under a key of the test's own."""
    return TableVault(engine, Fernet.generate_key())


@pytest.fixture
async def auth(engine: AsyncEngine, tenant: str) -> dict[str, str]:
    """Headers with a key of the test's tenant that may write the directory."""
    async with engine.begin() as conn:
        key = await create_api_key(conn, tenant_id=tenant, scopes=["directory:write"])
    return {"Authorization": f"Bearer {key}"}
