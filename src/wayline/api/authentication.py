"""Who is calling, decided from the `Authorization` header before any body is read.

FastAPI reads and parses a route's body before it solves the route's dependencies, so an
API-key check written as a plain dependency would run only after a stranger's body had
been buffered and parsed. ``JsonRoute`` (``wayline.api.bodies``) therefore runs the
route's ``Authentication`` first; the answer is kept on the request, and the dependency
the route declares hands that same answer over without asking again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Generic, TypeVar

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from wayline.core.errors import Unauthorized

T = TypeVar("T")

bearer = HTTPBearer(auto_error=False, description="an API key: `Authorization: Bearer wl_key_…`")
_ANSWERS = "wayline.authenticated"


class Authentication(Generic[T]):
    """A dependency that turns the presented API key into ``T`` (a caller, its permissions)."""

    def __init__(self, identify: Callable[[Request, str], Awaitable[T]]) -> None:
        self._identify = identify

    async def __call__(
        self, request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
    ) -> T:
        answers: dict[Authentication[T], T] = request.scope.setdefault(_ANSWERS, {})
        if self not in answers:
            if credentials is None:
                raise Unauthorized("no API key: send `Authorization: Bearer <key>`")
            answers[self] = await self._identify(request, credentials.credentials)
        return answers[self]

    async def before_body(self, request: Request) -> None:
        await self(request, await bearer(request))


__all__ = ["Authentication", "bearer"]
