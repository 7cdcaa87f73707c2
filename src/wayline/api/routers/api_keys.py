from fastapi import APIRouter

from wayline.api.bodies import JsonRoute
from wayline.api.deps import DB, CallerDep, OnceDep, PagingDep
from wayline.registry import api_key
from wayline.registry.access import Page

router = APIRouter(prefix="/api-keys", tags=["api keys"], route_class=JsonRoute)


@router.post("", status_code=201, response_model=api_key.NewApiKey)
def create_api_key(body: api_key.ApiKeyIn, caller: CallerDep, once: OnceDep):
    """The key is in this answer only; an idempotent replay answers without it (only its hash is kept)."""
    return once(body, lambda s: api_key.create(s, caller, body), secret_fields=("key",))


@router.get("", response_model=Page[api_key.ApiKeyOut])
def list_api_keys(db: DB, caller: CallerDep, paging: PagingDep):
    with db.transaction() as session:
        return api_key.list_(session, caller, paging.cursor, paging.limit, paging.max_limit)


@router.post("/{key_id}/revoke", response_model=api_key.ApiKeyOut)
def revoke_api_key(key_id: str, db: DB, caller: CallerDep):
    with db.transaction() as session:
        return api_key.revoke(session, caller, key_id)

__all__ = ["router"]
