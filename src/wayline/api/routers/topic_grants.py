"""Topic grants: which topics a customer key may publish to or poll (admin keys manage them)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from wayline.api.bodies import JsonRoute
from wayline.api.deps import DB
from wayline.api.messaging_deps import ERROR_RESPONSES, MessagingDep, PermissionsDep
from wayline.messaging import access
from wayline.messaging.wire import GrantOut

router = APIRouter(responses=ERROR_RESPONSES, route_class=JsonRoute)


@router.post("/topic-grants", tags=["topic grants"], status_code=201, response_model=GrantOut)
def create_grant(body: access.GrantIn, db: DB, service: MessagingDep, perms: PermissionsDep) -> GrantOut:
    """Let an API key publish to and/or poll the topics matching a pattern (reserved topics excepted)."""
    with db.transaction() as session:
        return access.create_grant(session, perms.caller, body, service.reserved)


@router.get("/topic-grants", tags=["topic grants"], response_model=list[GrantOut])
def list_grants(db: DB, perms: PermissionsDep, api_key_id: str | None = None) -> list[GrantOut]:
    with db.transaction() as session:
        return access.list_grants(session, perms.caller, api_key_id)


@router.delete("/topic-grants/{grant_id}", tags=["topic grants"], status_code=204)
def delete_grant(grant_id: str, db: DB, perms: PermissionsDep) -> Response:
    with db.transaction() as session:
        access.delete_grant(session, perms.caller, grant_id)
    return Response(status_code=204)


__all__ = ["router"]
