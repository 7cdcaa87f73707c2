"""A transport and a delivery store in memory, as httpx ships a mock transport: what sits
above them (the dispatcher, the stage, retry and circuit logic) can then be unit-tested on
plain values. Integration tests keep the aiohttp transport and PostgreSQL.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import datetime
from typing import Any

from wayline.delivery.attempt import Gone, State, Succeeded, WillRetry
from wayline.delivery.stage import Blocked
from wayline.delivery.transport import Request, Result

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


class MemoryStore:
    """The stage's store in memory: the first state recorded per ``webhook-id`` wins, as the
    PostgreSQL store's ``ON CONFLICT DO NOTHING`` writes do."""

    def __init__(self) -> None:
        self.states: dict[str, State] = {}
        self.gone: set[str] = set()
        """Subscriptions whose endpoint answered 410, as the PostgreSQL store marks them."""
        self.throttled: dict[str, datetime] = {}
        """Endpoints paused until then; a test sets them."""

    def settled(self, webhook_ids: Collection[str]) -> set[str]:
        return {webhook_id for webhook_id in webhook_ids if webhook_id in self.states}

    def blocked(self, subscription_ids: Collection[str], endpoint_ids: Collection[str]) -> Blocked:
        return Blocked(frozenset(self.gone.intersection(subscription_ids)),
                       {endpoint: until for endpoint, until in self.throttled.items() if endpoint in endpoint_ids})

    def record(self, states: Sequence[State]) -> None:
        for state in states:
            self.states.setdefault(webhook_id(state), state)
            if isinstance(state, Gone):
                self.gone.add(state.failed.subscription_id)


def webhook_id(state: State) -> str:
    if isinstance(state, Succeeded):
        return state.delivered.webhook_id
    if isinstance(state, WillRetry):
        return state.next.webhook_id
    return state.failed.webhook_id


__all__ = ["Answer", "MemoryStore", "MemoryTransport", "webhook_id"]
