"""Request bodies no deeper than ``MAX_JSON_DEPTH``.

Python's JSON decoder takes bodies nested hundreds of levels deep, and whatever walks such
a value later (validation, the answer's serializer, the idempotency record) recurses per
level and fails with a 500, or drops the connection. Every route of the API uses
``JsonRoute``, whose request checks the depth right after decoding (iteratively), so such
a body is refused with a 422 before any of that runs.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from wayline.core.errors import RejectedInput

# Far above any real body (a filter at the deepest settings nests about 70), far below recursion trouble.
MAX_JSON_DEPTH = 100


def check_depth(value: Any) -> None:
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > MAX_JSON_DEPTH:
            raise RejectedInput(f"the body nests more than {MAX_JSON_DEPTH} levels of objects and arrays deep")
        stack.extend((child, depth + 1) for child in children)


class JsonRequest(Request):
    async def json(self) -> Any:
        value = await super().json()
        check_depth(value)
        return value


class JsonRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def with_depth_check(request: Request) -> Response:
            return await handler(JsonRequest(request.scope, request.receive))

        return with_depth_check


__all__ = ["JsonRoute", "MAX_JSON_DEPTH", "check_depth"]
