"""The in-memory transport behaves as the real ones do where tests rely on it."""

from __future__ import annotations

import asyncio

from wayline.delivery.transports.base import Endpoint, Request, Response
from wayline.delivery.transports.memory import MemoryTransport


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
