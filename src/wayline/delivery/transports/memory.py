"""A transport in memory, as httpx ships a mock transport: what sits above it (the
dispatcher, the stage, retry and circuit logic) can then be unit-tested on plain values.
Integration tests keep the HTTP transports and real servers.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from wayline.delivery.transports.base import Request, Result

Answer = Callable[[Request], Result | Awaitable[Result]]


class MemoryTransport:
    """Answers each request with ``answer(request)`` (a coroutine may wait, to play a slow
    endpoint) and keeps every request it was given, in order."""

    def __init__(self, answer: Answer) -> None:
        self._answer = answer
        self.requests: list[Request] = []

    async def send(self, request: Request) -> Result:
        self.requests.append(request)
        result = self._answer(request)
        return await result if inspect.isawaitable(result) else result

    async def __aenter__(self) -> MemoryTransport:
        return self

    async def __aexit__(self, *_exc: Any) -> None:
        return None

    def factory(self) -> Callable[[], MemoryTransport]:
        """A stage's transport factory that always hands out this transport."""
        return lambda: self


__all__ = ["Answer", "MemoryTransport"]
