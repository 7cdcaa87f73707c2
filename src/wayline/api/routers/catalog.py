from typing import Annotated

from fastapi import APIRouter, Body, Response

from wayline.api.bodies import JsonRoute
from wayline.api.deps import DB, CallerDep, OnceDep, PagingDep
from wayline.registry import catalog
from wayline.registry.access import Page

router = APIRouter(tags=["catalog"], route_class=JsonRoute)


@router.put("/tenants", tags=["catalog"])
def upsert_tenants(bodies: Annotated[list[catalog.TenantIn], Body(max_length=10_000)], db: DB, caller: CallerDep):
    """Create or replace up to 10,000 tenants at once."""
    with db.transaction() as session:
        return {"upserted": catalog.upsert_tenants(session, caller, bodies)}


@router.get("/tenants", response_model=Page[catalog.TenantOut])
def list_tenants(db: DB, caller: CallerDep, paging: PagingDep):
    with db.transaction() as session:
        return catalog.list_tenants(session, caller, paging.cursor, paging.limit, paging.max_limit)


@router.get("/tenants/{tenant_id}", response_model=catalog.TenantOut)
def get_tenant(tenant_id: str, db: DB, caller: CallerDep):
    with db.transaction() as session:
        return catalog.get_tenant(session, caller, tenant_id)


@router.delete("/tenants/{tenant_id}", status_code=204)
def delete_tenant(tenant_id: str, db: DB, caller: CallerDep) -> Response:
    with db.transaction() as session:
        catalog.delete_tenant(session, caller, tenant_id)
    return Response(status_code=204)


@router.post("/event-types", status_code=201, response_model=catalog.EventTypeOut)
def create_event_type(body: catalog.EventTypeIn, caller: CallerDep, once: OnceDep):
    return once(body, lambda s: catalog.create_event_type(s, caller, body))


@router.get("/event-types", response_model=Page[catalog.EventTypeOut])
def list_event_types(db: DB, caller: CallerDep, paging: PagingDep):
    with db.transaction() as session:
        return catalog.list_event_types(session, caller, paging.cursor, paging.limit, paging.max_limit)


@router.get("/event-types/{name}", response_model=catalog.EventTypeOut)
def get_event_type(name: str, db: DB, caller: CallerDep):
    with db.transaction() as session:
        return catalog.get_event_type(session, caller, name)


@router.patch("/event-types/{name}", response_model=catalog.EventTypeOut)
def update_event_type(name: str, body: catalog.EventTypePatch, db: DB, caller: CallerDep):
    """Change an event type's description or JSON Schema (`"json_schema": null` removes it); the
    messaging API checks publishes against the new schema within `messaging.schema_cache_s`."""
    with db.transaction() as session:
        return catalog.update_event_type(session, caller, name, body)


@router.delete("/event-types/{name}", status_code=204)
def delete_event_type(name: str, db: DB, caller: CallerDep) -> Response:
    with db.transaction() as session:
        catalog.delete_event_type(session, caller, name)
    return Response(status_code=204)

__all__ = ["router"]
