"""Real HTTP servers on 127.0.0.1 for the delivery tests: aiohttp.web on a free port."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiohttp import web

from wayline.delivery.transports.factory import transport_for

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# The delivery transport refuses loopback addresses unless the operator allows them;
# these servers listen on 127.0.0.1, so the tests' transports allow exactly that.
loopback_transport = transport_for(["127.0.0.1/32"])


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    """Loop time when the request arrived."""


@dataclass
class Recorder:
    """Every request a server received, in arrival order."""

    requests: list[Received] = field(default_factory=list)

    async def record(self, request: web.Request) -> Received:
        received = Received(
            path=request.path,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=await request.read(),
            at=asyncio.get_running_loop().time(),
        )
        self.requests.append(received)
        return received

    def on(self, path: str) -> list[Received]:
        return [r for r in self.requests if r.path == path]


@asynccontextmanager
async def serve(routes: dict[str, Handler]) -> AsyncIterator[str]:
    """Serve POST ``routes`` on a free port of 127.0.0.1; yield the base URL."""
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_post(path, handler)
    # A short shutdown: hanging handlers must not hold the test up when it ends.
    runner = web.AppRunner(app, shutdown_timeout=0.1, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
