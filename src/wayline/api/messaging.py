"""The messaging API: publish CloudEvents to Kafka (batches, idempotency keys, transactions),
poll topics by cursor, and manage topics and per-key topic grants.

Run it alone with `wayline serve messaging`, or beside the admin API with `wayline serve`.
Stateless: cursors carry the read position and transactions name the instance that holds
them, so any number of instances serve side by side. OpenAPI at `/docs`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from wayline.api import errors
from wayline.api.bodies import BodyLimit
from wayline.api.routers import events, topic_grants, topics, transactions
from wayline.core.errors import RetryLater
from wayline.core.settings import Settings
from wayline.messaging.errors import Busy, Misdirected, NotJson, TooLarge
from wayline.messaging.service import Messaging
from wayline.registry.db import Database

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
    for router in (events.router, transactions.router, topics.router, topic_grants.router):
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
    app.add_middleware(BodyLimit, limit=settings.messaging.max_request_bytes)
    app.state.settings = settings
    app.state.database = database
    errors.install(app)
    mount(app, settings, database)

    @app.get("/health", tags=["health"])
    def health() -> dict[str, str]:
        return {"status": "ok", "instance": settings.messaging.instance_id}

    return app


__all__ = ["create_messaging_app", "mount"]
