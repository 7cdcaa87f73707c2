from fastapi import APIRouter, Response

from wayline.api.bodies import JsonRoute
from wayline.api.deps import DB, CallerDep, EndpointsDep, OnceDep, PagingDep
from wayline.registry.access import Page
from wayline.registry.endpoint import EndpointCreated, EndpointIn, EndpointOut, EndpointPatch, RotateIn, SecretOut

router = APIRouter(prefix="/endpoints", tags=["endpoints"], route_class=JsonRoute)


@router.post("", status_code=201, response_model=EndpointCreated)
def create_endpoint(body: EndpointIn, caller: CallerDep, service: EndpointsDep, once: OnceDep):
    """The answer carries the signing secret once; later, and in an idempotent replay, read it from
    `GET /endpoints/{id}/secrets`."""
    return once(body, lambda s: service.create(s, caller, body), secret_fields=("secret",))


@router.get("", response_model=Page[EndpointOut])
def list_endpoints(db: DB, caller: CallerDep, service: EndpointsDep, paging: PagingDep):
    with db.transaction() as session:
        return service.list_(session, caller, paging.cursor, paging.limit, paging.max_limit)


@router.get("/{endpoint_id}", response_model=EndpointOut)
def get_endpoint(endpoint_id: str, db: DB, caller: CallerDep, service: EndpointsDep):
    with db.transaction() as session:
        return service.get(session, caller, endpoint_id)


@router.patch("/{endpoint_id}", response_model=EndpointOut)
def update_endpoint(endpoint_id: str, body: EndpointPatch, db: DB, caller: CallerDep, service: EndpointsDep):
    with db.transaction() as session:
        return service.update(session, caller, endpoint_id, body)


@router.delete("/{endpoint_id}", status_code=204)
def delete_endpoint(endpoint_id: str, db: DB, caller: CallerDep, service: EndpointsDep) -> Response:
    with db.transaction() as session:
        service.delete(session, caller, endpoint_id)
    return Response(status_code=204)


@router.get("/{endpoint_id}/secrets", response_model=list[SecretOut])
def get_signing_secrets(endpoint_id: str, db: DB, caller: CallerDep, service: EndpointsDep):
    """The secrets that sign this endpoint's requests now, newest first."""
    with db.transaction() as session:
        return service.secrets(session, caller, endpoint_id)


@router.post("/{endpoint_id}/secrets/rotate", response_model=list[SecretOut])
def rotate_signing_secret(endpoint_id: str, body: RotateIn, db: DB, caller: CallerDep, service: EndpointsDep):
    """Sign with a new secret from now on; the previous ones keep signing for the overlap period."""
    with db.transaction() as session:
        return service.rotate(session, caller, endpoint_id, body)

__all__ = ["router"]
