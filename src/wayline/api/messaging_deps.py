"""What the messaging routes share: the service, the caller's topic permissions, and the
raw request body under its size limit."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import Depends, Header, Request, Response
from fastapi.concurrency import run_in_threadpool

from wayline.api.authentication import Authentication
from wayline.messaging import access
from wayline.messaging.errors import TooLarge
from wayline.messaging.idempotency import Answer
from wayline.messaging.service import Messaging
from wayline.messaging.wire import ErrorOut, PublishOut

EVENTS_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {
                "oneOf": [{"$ref": "#/components/schemas/CloudEvent"},
                          {"type": "array", "items": {"$ref": "#/components/schemas/CloudEvent"}}],
            }},
        },
    },
}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": description} for status, description in {
        400: "the body is not JSON", 401: "no API key, or not a valid one", 403: "the key may not do this",
        404: "no such topic or transaction", 409: "conflicts with the current state", 413: "too large",
        421: "the transaction lives on another instance (named in Wayline-Instance)", 422: "invalid input",
        429: "all producers or consumers of this instance are busy, or this key holds its most open transactions",
        503: "Kafka did not answer: retry",
    }.items()
}
PUBLISH_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES,
    207: {"model": PublishOut, "description": "some events refused, the others written"},
    413: {"model": ErrorOut, "description": "the body, the batch or (a lone event) the event is too large"},
    422: {"model": ErrorOut, "description": "invalid: nothing written (a batch's results say why, per event)"},
}


def messaging(request: Request) -> Messaging:
    return request.app.state.messaging


async def _identify(request: Request, presented: str) -> access.Permissions:
    authorizer = messaging(request).authorizer
    # A remembered key is answered on the event loop; only a database read needs a thread.
    known = authorizer.remembered(presented)
    if known is not None:
        return known
    return await run_in_threadpool(authorizer.permissions, presented)


permissions = Authentication(_identify)


MessagingDep = Annotated[Messaging, Depends(messaging)]
PermissionsDep = Annotated[access.Permissions, Depends(permissions)]
IdempotencyKey = Annotated[str | None, Header(
    alias="Idempotency-Key", max_length=200,
    description="a retry with the same key gets the first answer, writes nothing",
)]


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status, headers=headers, media_type="application/json")


async def read_body(request: Request, limit: int) -> bytes:
    # The app's BodyLimit holds every body to its server's limit; `wayline serve` runs both APIs
    # under the admin API's, so publishing keeps to the messaging one here.
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge(f"the body is {int(declared)} bytes, over the limit of {limit} per request")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"the body is over the limit of {limit} bytes per request")
        chunks.append(chunk)
    return b"".join(chunks)


def published(answer: Answer, replayed: bool) -> Response:
    return json_response(answer.body, answer.status, {"Idempotent-Replayed": "true"} if replayed else None)




__all__ = [
    "ERROR_RESPONSES", "EVENTS_BODY", "IdempotencyKey", "MessagingDep", "PUBLISH_RESPONSES", "PermissionsDep",
    "json_response",
    "messaging", "permissions", "published", "read_body",
]
