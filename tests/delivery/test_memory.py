"""The in-memory transport and store behave as the real ones do where tests rely on it."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime

from wayline.delivery.attempt import Pending, settle
from wayline.delivery.memory import MemoryStore, MemoryTransport, webhook_id
from wayline.delivery.transport import Endpoint, Failure, FailureKind, Request, Response


def pending(event: str) -> Pending:
    return Pending.single(event, b"{}", subscription_id="sub_m", endpoint_id="ep_m", now=datetime.now(UTC))


def test_the_transport_answers_from_its_function_and_keeps_each_request() -> None:
    async def slow(request: Request) -> Response:
        await asyncio.sleep(0)
        return Response(202, {}, request.body, 0.0)

    endpoint = Endpoint("ep_m", "http://127.0.0.1:9/")

    async def main() -> list[object]:
        async with MemoryTransport(slow) as transport:
            answers = [await transport.send(Request(endpoint, body, {})) for body in (b"a", b"b")]
        return [answers, [r.body for r in transport.requests]]

    answers, bodies = asyncio.run(main())
    assert [a.status for a in answers] == [202, 202] and bodies == [b"a", b"b"]  # type: ignore[attr-defined]


def test_the_store_keeps_the_first_state_per_webhook_id_like_on_conflict_do_nothing() -> None:
    store, now, chance = MemoryStore(), datetime.now(UTC), random.Random(1)
    first = settle(pending("e-1"), Failure(FailureKind.TIMEOUT, "slow"), now, chance)
    later = settle(pending("e-1"), Response(200, {}, b"", 0.0), now, chance)
    store.record([first])
    store.record([later, settle(pending("e-2"), Response(200, {}, b"", 0.0), now, chance)])
    assert store.settled([webhook_id(first), webhook_id(later), "msg_other"]) == {webhook_id(first)}
    assert store.states[webhook_id(first)] is first
    assert len(store.states) == 2
