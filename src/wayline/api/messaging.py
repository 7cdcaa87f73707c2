"""The messaging API: publish CloudEvents to Kafka (batches, idempotency keys, transactions),
poll topics by cursor, and manage topics and per-key topic grants.

Run it alone with `wayline serve messaging`, or beside the admin API with `wayline serve`.
Stateless: cursors carry the read position and transactions name the instance that holds
them, so any number of instances serve side by side. OpenAPI at `/docs`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from wayline.api import errors
from wayline.api.deps import DB
from wayline.core.errors import RejectedInput, RetryLater, Unauthorized
from wayline.core.settings import Settings
from wayline.messaging import access
from wayline.messaging.cursor import Cursor, Start
from wayline.messaging.errors import Busy, Misdirected, NotJson, TooLarge
from wayline.messaging.idempotency import Answer
from wayline.messaging.service import Messaging
from wayline.messaging.topics import TopicIn, TopicOut
from wayline.messaging.wire import PollOut, PublishOut, TopicList, TransactionOut, transaction_body
from wayline.registry.db import Database

_bearer = HTTPBearer(auto_error=False, description="an API key: `Authorization: Bearer wl_key_…`")
router = APIRouter()

_EVENTS_BODY = {
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
_CLOUD_EVENT_SCHEMA = {
    "type": "object",
    "description": "A CloudEvents 1.0 event in structured mode with Wayline's tenantid extension",
    "required": ["specversion", "id", "source", "type", "tenantid"],
    "properties": {
        "specversion": {"type": "string", "enum": ["1.0"]}, "id": {"type": "string"}, "source": {"type": "string"},
        "type": {"type": "string"}, "tenantid": {"type": "string"}, "subtenantid": {"type": "string"},
        "subject": {"type": "string"}, "time": {"type": "string", "format": "date-time"},
        "datacontenttype": {"type": "string"}, "dataschema": {"type": "string"}, "data": {},
    },
    "additionalProperties": True,
}
_PUBLISH_RESPONSES: dict[int | str, dict[str, Any]] = {
    207: {"model": PublishOut, "description": "some events refused, the others written"},
    413: {"description": "the body, the batch or (a lone event) the event is too large"},
    422: {"description": "invalid: nothing written"},
}


def messaging(request: Request) -> Messaging:
    return request.app.state.messaging


async def permissions(
    service: Annotated[Messaging, Depends(messaging)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> access.Permissions:
    if credentials is None:
        raise Unauthorized("no API key: send `Authorization: Bearer <key>`")
    # A remembered key is answered on the event loop; only a database read needs a thread.
    known = service.authorizer.remembered(credentials.credentials)
    if known is not None:
        return known
    return await run_in_threadpool(service.authorizer.permissions, credentials.credentials)


MessagingDep = Annotated[Messaging, Depends(messaging)]
PermissionsDep = Annotated[access.Permissions, Depends(permissions)]
IdempotencyKey = Annotated[str | None, Header(
    alias="Idempotency-Key", max_length=200, description="a retry with the same key gets the first answer, writes nothing",
)]


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status, headers=headers, media_type="application/json")


async def _body(request: Request, limit: int) -> bytes:
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


def _published(answer: Answer, replayed: bool) -> Response:
    return _json(answer.body, answer.status, {"Idempotent-Replayed": "true"} if replayed else None)


@router.post("/topics/{topic}/events", tags=["publish"], response_model=PublishOut,
             responses=_PUBLISH_RESPONSES, openapi_extra=_EVENTS_BODY)
async def publish(topic: str, request: Request, service: MessagingDep, perms: PermissionsDep,
                  idempotency_key: IdempotencyKey = None) -> Response:
    """Publish one CloudEvent or a JSON array of them; answers once the broker acknowledged (acks=all)."""
    perms.require("publish", topic)
    body = await _body(request, service.settings.max_request_bytes)
    answer, replayed = await run_in_threadpool(service.publish, perms.caller.key_id, topic, body, idempotency_key)
    return _published(answer, replayed)


@router.get("/topics/{topic}/events", tags=["poll"], response_model=PollOut)
def poll(
    topic: str, service: MessagingDep, perms: PermissionsDep,
    cursor: Annotated[str | None, Query(description="the next_cursor of the previous page")] = None,
    start: Annotated[str, Query(description="without a cursor: earliest, latest or an RFC 3339 time")] = "earliest",
    limit: Annotated[int, Query(ge=1, description="most records to return")] = 100,
    max_bytes: Annotated[int | None, Query(ge=1, description="most value bytes to return (at least one record)")] = None,
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
    return _json({"records": [r.body() for r in page.records], "next_cursor": page.next.encode()})


@router.post("/transactions", tags=["transactions"], status_code=201, response_model=TransactionOut)
def begin(service: MessagingDep, perms: PermissionsDep) -> Response:
    """Begin a transaction on this instance; only this API key may use it."""
    outcome = service.transactions.begin(perms.caller.key_id)
    return _json(transaction_body(outcome, service.transactions.timeout_s), 201)


@router.get("/transactions/{transaction_id}", tags=["transactions"], response_model=TransactionOut)
def describe_transaction(transaction_id: str, service: MessagingDep, perms: PermissionsDep) -> Response:
    outcome = service.transactions.describe(transaction_id, perms.caller.key_id)
    return _json(transaction_body(outcome, service.transactions.timeout_s))


@router.post("/transactions/{transaction_id}/topics/{topic}/events", tags=["transactions"],
             response_model=PublishOut, responses=_PUBLISH_RESPONSES, openapi_extra=_EVENTS_BODY)
async def publish_in_transaction(transaction_id: str, topic: str, request: Request, service: MessagingDep,
                                 perms: PermissionsDep) -> Response:
    """Publish into an open transaction: read-committed readers see nothing of it before commit."""
    perms.require("publish", topic)
    body = await _body(request, service.settings.max_request_bytes)
    answer, _ = await run_in_threadpool(service.publish, perms.caller.key_id, topic, body, None, transaction_id)
    return _published(answer, False)


@router.post("/transactions/{transaction_id}/commit", tags=["transactions"], response_model=TransactionOut)
def commit(transaction_id: str, service: MessagingDep, perms: PermissionsDep) -> Response:
    outcome = service.transactions.commit(transaction_id, perms.caller.key_id)
    return _json(transaction_body(outcome, service.transactions.timeout_s))


@router.post("/transactions/{transaction_id}/abort", tags=["transactions"], response_model=TransactionOut)
def abort(transaction_id: str, service: MessagingDep, perms: PermissionsDep) -> Response:
    outcome = service.transactions.abort(transaction_id, perms.caller.key_id)
    return _json(transaction_body(outcome, service.transactions.timeout_s))


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


@router.post("/topic-grants", tags=["topic grants"], status_code=201, response_model=access.GrantOut)
def create_grant(body: access.GrantIn, db: DB, perms: PermissionsDep) -> access.GrantOut:
    """Let an API key publish to and/or poll the topics matching a pattern."""
    with db.transaction() as session:
        return access.create_grant(session, perms.caller, body)


@router.get("/topic-grants", tags=["topic grants"], response_model=list[access.GrantOut])
def list_grants(db: DB, perms: PermissionsDep, api_key_id: str | None = None) -> list[access.GrantOut]:
    with db.transaction() as session:
        return access.list_grants(session, perms.caller, api_key_id)


@router.delete("/topic-grants/{grant_id}", tags=["topic grants"], status_code=204)
def delete_grant(grant_id: str, db: DB, perms: PermissionsDep) -> Response:
    with db.transaction() as session:
        access.delete_grant(session, perms.caller, grant_id)
    return Response(status_code=204)


def _install_errors(app: FastAPI) -> None:
    def answer(status: int, code: str, headers: dict[str, str] | None = None):
        async def handle(_request: Request, exc: Exception) -> JSONResponse:
            return JSONResponse(errors.error_body(code, str(exc)), status, headers=headers)
        return handle

    async def misdirected(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Misdirected)
        return JSONResponse(errors.error_body("misdirected", str(exc)), 421, headers={"Wayline-Instance": exc.instance})

    app.add_exception_handler(TooLarge, answer(413, "too_large"))
    app.add_exception_handler(NotJson, answer(400, "not_json"))
    app.add_exception_handler(Misdirected, misdirected)
    app.add_exception_handler(Busy, answer(429, "busy", {"Retry-After": "1"}))
    app.add_exception_handler(RetryLater, answer(503, "unavailable", {"Retry-After": "1"}))


def _add_openapi_components(app: FastAPI) -> None:
    build = app.openapi

    def openapi() -> dict[str, Any]:
        document = build()
        document.setdefault("components", {}).setdefault("schemas", {})["CloudEvent"] = _CLOUD_EVENT_SCHEMA
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def mount(app: FastAPI, settings: Settings, database: Database) -> None:
    """Add the messaging API to `app`: its routes, its error answers, and its producers and
    consumers for the app's lifetime. `wayline serve` mounts it on the admin API this way."""
    app.include_router(router)
    _install_errors(app)
    _add_openapi_components(app)
    outer = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(inner_app: Any) -> AsyncIterator[Any]:
        app.state.messaging = await run_in_threadpool(Messaging.start, settings, database)
        try:
            async with outer(inner_app) as state:
                yield state
        finally:
            await run_in_threadpool(app.state.messaging.close)
            app.state.messaging = None

    app.router.lifespan_context = lifespan


def create_messaging_app(settings: Settings, database: Database) -> FastAPI:
    app = FastAPI(title="Wayline messaging API", version="1", description=__doc__)
    app.state.settings = settings
    app.state.database = database
    errors.install(app)
    mount(app, settings, database)

    @app.get("/health", tags=["health"])
    def health() -> dict[str, str]:
        return {"status": "ok", "instance": settings.messaging.instance_id}

    return app


__all__ = ["create_messaging_app", "mount", "router"]
