"""POST /v1/secrets: stash a secret, get back the reference to put in an event's variables."""

from __future__ import annotations

from fastapi import APIRouter, Request

from herald.auth.deps import SecretsWriter, state
from herald.secrets import service
from herald.secrets.schemas import SecretCreate, SecretCreated

router = APIRouter(prefix="/v1/secrets", tags=["secrets"])


@router.post("", response_model=SecretCreated, status_code=201, response_model_by_alias=True)
async def create_secret(
    body: SecretCreate, request: Request, caller: SecretsWriter
) -> SecretCreated:
    app = state(request)
    ref = await service.stash(
        app.vault,
        tenant_id=caller.tenant_id,
        type=body.type,
        values=body.values,
        ttl_seconds=body.ttl_seconds or app.settings.vault_ttl_seconds,
    )
    return SecretCreated(secret_ref=ref)
