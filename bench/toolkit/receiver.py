"""Receivers in processes of their own, each serving on a free port of 127.0.0.1: the
signature-checking one of ``wayline.stack.receiver`` that the delivery benchmarks count
arrivals with, or a benchmark's own aiohttp app (:func:`serve`)."""

from __future__ import annotations

import json
import math
import multiprocessing
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import Any

from aiohttp import web

from wayline.stack.receiver import Receiver, ReceiverServer

Trust = Callable[[dict[str, list[str]]], None]
"""Hands the receiver the signing secrets of endpoint paths (after the registry is seeded)."""


@contextmanager
def serving(target: Callable[..., None], *args: Any, context: Any = multiprocessing) -> Iterator[str]:
    """``target(port_out, *args)`` in a daemon process of ``context``, which sends the port
    it serves on through ``port_out``; its base URL, the process killed on the way out."""
    port_in, port_out = context.Pipe(duplex=False)
    process = context.Process(target=target, args=(port_out, *args), daemon=True)
    process.start()
    try:
        yield f"http://127.0.0.1:{port_in.recv()}"
    finally:
        process.kill()
        process.join()


async def serve(app: web.Application, **site: Any) -> int:
    """``app`` served on a free port of 127.0.0.1 (``site``: TCPSite's options); the port."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, **site).start()
    return runner.addresses[0][1]


def _receive(port_out: Connection, secrets_in: Connection) -> None:
    """The receiver process: serve until killed; secrets arrive after the registry is seeded."""
    receiver = Receiver()
    server = ReceiverServer(receiver)
    port_out.send(server.port)
    while True:
        receiver.trust(secrets_in.recv())


@contextmanager
def signature_receiver() -> Iterator[tuple[str, Trust]]:
    """The receiver of ``wayline.stack.receiver``, checking every signature; its base URL
    and how to trust secrets. Forked: start it before the Spark JVM."""
    secrets_in, secrets_out = multiprocessing.Pipe(duplex=False)
    with serving(_receive, secrets_in) as url:
        yield url, secrets_out.send


def stats(url: str) -> dict[str, dict[str, Any]]:
    """The receiver's counts per path."""
    with urllib.request.urlopen(f"{url}/stats", timeout=30) as answer:
        return json.loads(answer.read())


def totals(url: str, prefix: str, sent_from: float = -math.inf, sent_to: float = math.inf) -> dict[str, Any]:
    """The receiver's counts of every path under ``prefix`` together, and the latency
    quantiles of the events whose ``time`` is in [sent_from, sent_to)."""
    query = {"prefix": prefix} | {k: v for k, v in (("sent_from", sent_from), ("sent_to", sent_to)) if math.isfinite(v)}
    with urllib.request.urlopen(f"{url}/totals?{urllib.parse.urlencode(query)}", timeout=120) as answer:
        return json.loads(answer.read())
