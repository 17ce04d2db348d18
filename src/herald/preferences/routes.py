"""The consumer preference API: an end user's own switches, by JWT, with no permission grant.

Authentication is the only gate; the service keys every read and write on the token's person
(R-PREFAPI-11). The registry comes from the application state, so locked categories are computed
from the kinds this deployment actually runs (R-PREFAPI-4) without importing the fan-out
(R-PLAT-15).
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from herald.auth.deps import ActorDep, state, transaction, written
from herald.preferences import service
from herald.preferences.schemas import PreferencesSaved, PreferencesUpdate, PreferencesView

router = APIRouter(prefix="/v1/me/preferences", tags=["preferences"])


@router.get("", response_model=PreferencesView)
async def read_preferences(request: Request, actor: ActorDep) -> PreferencesView:
    async with transaction(request) as conn:
        return await service.read_preferences(conn, actor, state(request).registry)


@router.put("", response_model=PreferencesSaved)
async def save_preferences(
    request: Request, actor: ActorDep, body: PreferencesUpdate
) -> PreferencesSaved:
    async with transaction(request) as conn:
        saved = await service.save_preferences(conn, actor, state(request).registry, body)
    # Committed: the person's inbox reads wait for a read standby to replay it (db.replica).
    await written(request, actor.tenant_id, actor.external_id)
    return saved
