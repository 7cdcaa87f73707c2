"""Topic admin (admin keys only)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from wayline.api.bodies import JsonRoute
from wayline.api.messaging_deps import ERROR_RESPONSES, MessagingDep, PermissionsDep
from wayline.messaging.topics import TopicIn
from wayline.messaging.wire import TopicList, TopicOut

router = APIRouter(responses=ERROR_RESPONSES, route_class=JsonRoute)


@router.post("/topics", tags=["topics"], status_code=201, response_model=TopicOut)
def create_topic(body: TopicIn, service: MessagingDep, perms: PermissionsDep) -> TopicOut:
    perms.caller.require_admin()
    return service.topics.create(body)


@router.get("/topics", tags=["topics"], response_model=TopicList)
def list_topics(service: MessagingDep, perms: PermissionsDep) -> TopicList:
    perms.caller.require_admin()
    return TopicList(data=service.topics.names())


@router.get("/topics/{topic}", tags=["topics"], response_model=TopicOut)
def describe_topic(topic: str, service: MessagingDep, perms: PermissionsDep) -> TopicOut:
    perms.caller.require_admin()
    return service.topics.describe(topic)


@router.delete("/topics/{topic}", tags=["topics"], status_code=204)
def delete_topic(topic: str, service: MessagingDep, perms: PermissionsDep) -> Response:
    perms.caller.require_admin()
    service.topics.delete(topic)
    service.known.forget(topic)
    return Response(status_code=204)


__all__ = ["router"]
