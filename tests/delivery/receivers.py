"""HTTP receivers on 127.0.0.1 that keep serving while a test blocks on Spark: the
servers of `tests.delivery.servers`, run by an event loop in a background thread."""

from __future__ import annotations

import asyncio
import threading
from contextlib import AsyncExitStack
from types import TracebackType

from tests.delivery.servers import Handler, serve


class Receivers:
    """Use as ``with Receivers() as receivers: base = receivers.serve({...})``."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="receivers", daemon=True)
        self._servers = AsyncExitStack()

    def __enter__(self) -> Receivers:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        asyncio.run_coroutine_threadsafe(self._shut_down(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()

    async def _shut_down(self) -> None:
        await self._servers.aclose()
        # Handlers still waiting (a hanging endpoint's) end here, not when the loop is collected.
        leftover = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in leftover:
            task.cancel()
        await asyncio.gather(*leftover, return_exceptions=True)

    def serve(self, routes: dict[str, Handler]) -> str:
        """Serve POST ``routes`` on a free port until the block ends; returns the base URL."""
        started = asyncio.run_coroutine_threadsafe(self._servers.enter_async_context(serve(routes)), self.loop)
        return started.result(timeout=30)
