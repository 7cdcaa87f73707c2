"""Transactions: begin, publish into one across topics, commit or abort."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from wayline.api.bodies import JsonRoute
from wayline.api.messaging_deps import (
    ERROR_RESPONSES,
    EVENTS_BODY,
    PUBLISH_RESPONSES,
    MessagingDep,
    PermissionsDep,
    json_response,
    published,
    read_body,
)
from wayline.messaging.wire import PublishOut, TransactionOut, transaction_body

router = APIRouter(responses=ERROR_RESPONSES, route_class=JsonRoute)


@router.post("/transactions", tags=["transactions"], status_code=201, response_model=TransactionOut)
def begin(service: MessagingDep, perms: PermissionsDep) -> Response:
    """Begin a transaction on this instance; only this API key may use it. The key needs a publish grant (each
    publish into the transaction is checked against its topic), and may hold only so many open transactions."""
    perms.require_any("publish", "begin a transaction")
    outcome = service.transactions.begin(perms.caller.key_id)
    return json_response(transaction_body(outcome, service.transactions.timeout_s), 201)


@router.get("/transactions/{transaction_id}", tags=["transactions"], response_model=TransactionOut)
def describe_transaction(transaction_id: str, service: MessagingDep, perms: PermissionsDep) -> Response:
    outcome = service.transactions.describe(transaction_id, perms.caller.key_id)
    return json_response(transaction_body(outcome, service.transactions.timeout_s))


@router.post("/transactions/{transaction_id}/topics/{topic}/events", tags=["transactions"],
             response_model=PublishOut, responses=PUBLISH_RESPONSES, openapi_extra=EVENTS_BODY)
async def publish_in_transaction(transaction_id: str, topic: str, request: Request, service: MessagingDep,
                                 perms: PermissionsDep) -> Response:
    """Publish into an open transaction: read-committed readers see nothing of it before commit."""
    perms.require("publish", topic)
    body = await read_body(request, service.settings.max_request_bytes)
    answer, _ = await run_in_threadpool(service.publish, perms.caller.key_id, topic, body, None, transaction_id)
    return published(answer, False)


@router.post("/transactions/{transaction_id}/commit", tags=["transactions"], response_model=TransactionOut)
def commit(transaction_id: str, service: MessagingDep, perms: PermissionsDep) -> Response:
    outcome = service.transactions.commit(transaction_id, perms.caller.key_id)
    return json_response(transaction_body(outcome, service.transactions.timeout_s))


@router.post("/transactions/{transaction_id}/abort", tags=["transactions"], response_model=TransactionOut)
def abort(transaction_id: str, service: MessagingDep, perms: PermissionsDep) -> Response:
    outcome = service.transactions.abort(transaction_id, perms.caller.key_id)
    return json_response(transaction_body(outcome, service.transactions.timeout_s))


__all__ = ["router"]
