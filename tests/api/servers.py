"""Serve an ASGI app with uvicorn on 127.0.0.1 in a thread, for as long as a test needs it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn

from tests.waiting import wait_for
from wayline.stack.process import free_port


@contextmanager
def served(app: object, health: str = "/health") -> Iterator[str]:
    """Yields the base URL once `health` answers 200; stops the server (running its shutdown) on exit."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name=f"api-{port}", daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            if httpx.get(f"{base}{health}").status_code == 200:
                return True
        except httpx.TransportError:
            pass
        if not thread.is_alive():
            raise RuntimeError(f"the app on {base} did not come up")
        return False

    wait_for(up, f"the app on {base} to come up", 60, every_s=0.1)
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=30)
