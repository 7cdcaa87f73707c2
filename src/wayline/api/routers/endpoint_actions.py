"""What a customer does to an endpoint besides editing it: re-enable it, send it a test event."""

from fastapi import APIRouter

from wayline.api.bodies import JsonRoute
from wayline.api.deps import DB, CallerDep, EndpointsDep, SettingsDep
from wayline.delivery.storage import dead_letter
from wayline.registry.endpoint import EndpointOut, EndpointPatch

router = APIRouter(prefix="/endpoints", tags=["endpoints"], route_class=JsonRoute)


@router.post("/{endpoint_id}/enable", response_model=EndpointOut)
def enable_endpoint(endpoint_id: str, db: DB, caller: CallerDep, service: EndpointsDep):
    """Re-enable an endpoint (after Wayline disabled it, or its owner did). Its failure clock starts again."""
    with db.transaction() as session:
        return service.update(session, caller, endpoint_id, EndpointPatch(enabled=True))


@router.post("/{endpoint_id}/test", response_model=dead_letter.TestEventOut, status_code=202)
def send_test_event(endpoint_id: str, body: dead_letter.TestEventIn, db: DB, caller: CallerDep, settings: SettingsDep):
    """Queue a signed `wayline.endpoint.test` event; its attempts appear under /attempts. Its data is
    limited in size (413 above `api.test_event_max_bytes`) and each endpoint to
    `api.test_events_per_minute` of them (429 beyond)."""
    return dead_letter.send_test_event(db, caller, endpoint_id, body, settings.api)


__all__ = ["router"]
