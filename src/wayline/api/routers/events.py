"""Publish to a topic and poll it by cursor."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from wayline.api.bodies import JsonRoute
from wayline.api.messaging_deps import (
    ERROR_RESPONSES,
    EVENTS_BODY,
    PUBLISH_RESPONSES,
    IdempotencyKey,
    MessagingDep,
    PermissionsDep,
    json_response,
    published,
    read_body,
)
from wayline.core.errors import RejectedInput
from wayline.messaging.cursor import Cursor, Start
from wayline.messaging.wire import PollOut, PublishOut

router = APIRouter(responses=ERROR_RESPONSES, route_class=JsonRoute)


@router.post("/topics/{topic}/events", tags=["publish"], response_model=PublishOut,
             responses=PUBLISH_RESPONSES, openapi_extra=EVENTS_BODY)
async def publish(topic: str, request: Request, service: MessagingDep, perms: PermissionsDep,
                  idempotency_key: IdempotencyKey = None) -> Response:
    """Publish one CloudEvent or a JSON array of them; answers once the broker acknowledged (acks=all)."""
    perms.require("publish", topic)
    body = await read_body(request, service.settings.max_request_bytes)
    answer, replayed = await run_in_threadpool(service.publish, perms.caller.key_id, topic, body, idempotency_key)
    return published(answer, replayed)


@router.get("/topics/{topic}/events", tags=["poll"], response_model=PollOut)
def poll(
    topic: str, service: MessagingDep, perms: PermissionsDep,
    cursor: Annotated[str | None, Query(description="the next_cursor of the previous page")] = None,
    start: Annotated[str, Query(description="without a cursor: earliest, latest or an RFC 3339 time")] = "earliest",
    limit: Annotated[int, Query(ge=1, description="most records to return")] = 100,
    max_bytes: Annotated[
        int | None, Query(ge=1, description="most value bytes to return (at least one record)")
    ] = None,
    wait_s: Annotated[float, Query(ge=0, description="wait up to this long for a record when there is none")] = 0,
) -> Response:
    """Read committed records from a cursor (or a start), and the cursor to read on from."""
    perms.require("poll", topic)
    limits = service.settings
    if limit > limits.poll_max_limit:
        raise RejectedInput(f"limit: at most {limits.poll_max_limit}")
    if wait_s > limits.poll_max_wait_s:
        raise RejectedInput(f"wait_s: at most {limits.poll_max_wait_s:g}")
    position = Cursor.decode(cursor, topic) if cursor else service.poller.start(topic, Start.parse(start))
    page = service.poller.poll(position, limit, min(max_bytes or limits.poll_max_bytes, limits.poll_max_bytes), wait_s)
    return json_response({"records": [r.body() for r in page.records], "next_cursor": page.next.encode()})


__all__ = ["router"]
