"""Request bodies: under a size limit, read only once the caller is known, no deeper than
``MAX_JSON_DEPTH`` and free of lone surrogates.

``BodyLimit``, middleware on each app, refuses a body over the server's limit with a 413:
unread when its ``Content-Length`` says so, and as soon as it grows past the limit while
it is read otherwise (chunked, or a ``Content-Length`` that lied). Every route of the API
uses ``JsonRoute``, which runs the route's ``Authentication`` before FastAPI reads the
body, so a caller without a valid key gets its 401 with the body unread and unparsed.

A decoded JSON body is then walked once, iteratively. Python's JSON decoder takes bodies
nested hundreds of levels deep, and whatever walks such a value later (validation, the
answer's serializer, the idempotency record) recurses per level and fails with a 500, or
drops the connection. It also takes ``\\ud800`` escapes: lone surrogates, which no UTF-8
encoder after it (orjson, the database driver) accepts. Both are refused with a 422.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wayline.api.authentication import Authentication
from wayline.api.errors import error_body
from wayline.core.errors import RejectedInput, TooLarge

# Far above any real body (a filter at the deepest settings nests about 70), far below recursion trouble.
MAX_JSON_DEPTH = 100
LONE_SURROGATE = "text may not contain lone surrogates (\\ud800 to \\udfff): they are not Unicode characters"


class BodyLimit:
    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > self.limit:
            message = f"the body is {int(declared)} bytes, over the limit of {self.limit} bytes per request"
            return await JSONResponse(error_body("too_large", message), 413)(scope, receive, send)
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise TooLarge(f"the body is over the limit of {self.limit} bytes per request")
            return message

        await self.app(scope, counted, send)


def check_body(value: Any) -> None:
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            try:
                node.encode()
            except UnicodeEncodeError:
                raise RejectedInput(LONE_SURROGATE) from None
            continue
        children = [*node, *node.values()] if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > MAX_JSON_DEPTH:
            raise RejectedInput(f"the body nests more than {MAX_JSON_DEPTH} levels of objects and arrays deep")
        stack.extend((child, depth + 1) for child in children)


class JsonRequest(Request):
    async def json(self) -> Any:
        value = await super().json()
        check_body(value)
        return value


def _authentication(dependant: Dependant) -> Authentication[Any] | None:
    stack = [dependant]
    while stack:
        node = stack.pop()
        if isinstance(node.call, Authentication):
            return node.call
        stack.extend(node.dependencies)
    return None


class JsonRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        authentication = _authentication(self.dependant)

        async def checked(request: Request) -> Response:
            if authentication is not None:
                await authentication.before_body(request)
            return await handler(JsonRequest(request.scope, request.receive))

        return checked


__all__ = ["BodyLimit", "JsonRoute", "LONE_SURROGATE", "MAX_JSON_DEPTH", "check_body"]
