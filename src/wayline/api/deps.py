"""What every route needs: the registry database, the settings, and who is calling."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Annotated, Any

from fastapi import Depends, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.orm import Session

from wayline.api.authentication import Authentication
from wayline.api.idempotency import create_once
from wayline.core.settings import Settings
from wayline.registry import api_key
from wayline.registry.access import Caller
from wayline.registry.db import Database
from wayline.registry.endpoint import EndpointService


def database(request: Request) -> Database:
    return request.app.state.database


def settings(request: Request) -> Settings:
    return request.app.state.settings


def endpoint_service(request: Request) -> EndpointService:
    return request.app.state.endpoints


async def _identify(request: Request, presented: str) -> Caller:
    def read() -> Caller:
        with database(request).transaction() as session:
            return api_key.authenticate(session, presented)

    return await run_in_threadpool(read)


caller = Authentication(_identify)


class Paging:
    def __init__(
        self,
        request: Request,
        cursor: Annotated[str | None, Query(description="from a previous page's next_cursor")] = None,
        limit: Annotated[int, Query(ge=1, description="items per page")] = 100,
    ) -> None:
        self.cursor = cursor
        self.limit = limit
        self.max_limit = request.app.state.settings.registry.max_page_size


DB = Annotated[Database, Depends(database)]
IdempotencyKey = Annotated[
    str | None, Header(alias="Idempotency-Key", max_length=200, description="repeat a create safely (for 24 h)")
]
CallerDep = Annotated[Caller, Depends(caller)]


class Once:
    """A create that runs once per `Idempotency-Key` (see `wayline.api.idempotency`)."""

    def __init__(self, request: Request, db: DB, who: CallerDep, key: IdempotencyKey = None) -> None:
        self._request, self._db, self._caller, self._key = request, db, who, key

    def __call__(self, body: BaseModel, create: Callable[[Session], Any], secret_fields: Iterable[str] = ()) -> JSONResponse:
        state = self._request.app.state
        return create_once(self._db, self._caller, self._key, body, create, box=state.secret_box,
                           ttl=timedelta(seconds=state.settings.api.idempotency_ttl_s), secret_fields=secret_fields)


OnceDep = Annotated[Once, Depends(Once)]
SettingsDep = Annotated[Settings, Depends(settings)]
PagingDep = Annotated[Paging, Depends(Paging)]
EndpointsDep = Annotated[EndpointService, Depends(endpoint_service)]

__all__ = ["CallerDep", "DB", "EndpointsDep", "IdempotencyKey", "Once", "OnceDep", "Paging", "PagingDep", "SettingsDep", "caller", "database", "endpoint_service", "settings"]
