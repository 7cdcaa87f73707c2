"""Delivery HTTP clients: aiohttp against Rust-based Python clients, on this machine.

Sends N small signed webhook POSTs (Standard Webhooks headers from
``wayline.delivery.signing``, a ~430-byte CloudEvent body) to a local aiohttp
receiver on 127.0.0.1, running in its own process, with C requests in flight over
keep-alive HTTP/1.1 connections. The clients take turns for R rounds; the table gives the
median requests/s and the client process's CPU time per request (all its threads),
which is what a delivery task pays whatever the receiver's speed.

``wayline-aiohttp`` and ``wayline-pyreqwest`` are Wayline's two transports
(``delivery.http_client``), with the address policy and capped reads they pay for.
pyreqwest is a project dependency; rnet and httpr are not: to compare them, install
them in a scratch venv, never in the project's:

    .venv/bin/python bench/delivery_http_clients.py --requests 20000 --runs 5
    python3.11 -m venv /tmp/venv-bench
    /tmp/venv-bench/bin/pip install -e . rnet httpr
    /tmp/venv-bench/bin/python bench/delivery_http_clients.py --requests 20000 --runs 3

A client whose package is missing is reported as skipped.
"""

from __future__ import annotations

import asyncio
import importlib.util
import multiprocessing
import multiprocessing.connection
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import orjson  # noqa: E402
from aiohttp import web  # noqa: E402

from toolkit import cli  # noqa: E402
from toolkit.receiver import serve, serving  # noqa: E402
from toolkit.results import record_results  # noqa: E402
from wayline.core.secret import Secret  # noqa: E402
from wayline.core.settings import HttpClientName  # noqa: E402
from wayline.delivery.signing import message_id, signed_headers  # noqa: E402

SECRET = Secret.generate()
Send = Callable[[str, bytes, dict[str, str]], Awaitable[int]]


def event(n: int) -> bytes:
    return orjson.dumps(
        {
            "specversion": "1.0",
            "id": f"evt-{n:08d}",
            "source": "/bench/orders",
            "type": "order.created",
            "tenantid": "tenant-42",
            "time": "2026-03-01T12:00:00Z",
            "datacontenttype": "application/json",
            "data": {"order": n, "lines": [{"sku": f"sku-{i}", "qty": i, "price": 9.99} for i in range(6)]},
        }
    )


def request_for(n: int) -> tuple[bytes, dict[str, str]]:
    body = event(n)
    headers = signed_headers(message_id(f"evt-{n:08d}", "sub_bench"), int(time.time()), body, [SECRET])
    headers["content-type"] = "application/cloudevents+json"
    return body, headers


# The receiver: a separate process, so the client's CPU time is its own.


def receive(port_out: multiprocessing.connection.Connection) -> None:
    received = 0

    async def hook(request: web.Request) -> web.Response:
        nonlocal received
        await request.read()
        received += 1
        return web.Response(status=204)

    async def count(request: web.Request) -> web.Response:
        return web.json_response({"received": received})

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/hook", hook)
        app.router.add_get("/count", count)
        port_out.send(await serve(app, backlog=1024))
        await asyncio.Event().wait()

    asyncio.run(main())


# The clients: each a factory giving (send, close) inside the running loop.


async def aiohttp_client(concurrency: int) -> tuple[Send, Callable[[], Awaitable[None]]]:
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency))

    async def send(url: str, body: bytes, headers: dict[str, str]) -> int:
        async with session.post(url, data=body, headers=headers) as response:
            await response.read()
            return response.status

    return send, session.close


async def wayline_transport(client: HttpClientName, concurrency: int) -> tuple[Send, Callable[[], Awaitable[None]]]:
    """A Wayline transport (``delivery.http_client``), as the delivery tasks use it."""
    from wayline.delivery.transports.base import Endpoint, EndpointLimits, Request, Response
    from wayline.delivery.transports.factory import transport_for

    # The benchmark's receiver is on 127.0.0.1, which the transport refuses unless allowed.
    transport = await transport_for(["127.0.0.1/32"], client)().__aenter__()
    endpoints: dict[str, Endpoint] = {}

    async def send(url: str, body: bytes, headers: dict[str, str]) -> int:
        endpoint = endpoints.get(url) or endpoints.setdefault(
            url, Endpoint("ep_bench", url, limits=EndpointLimits(max_in_flight=concurrency))
        )
        result = await transport.send(Request(endpoint, body, headers))
        return result.status if isinstance(result, Response) else 0

    async def close() -> None:
        await transport.__aexit__(None, None, None)

    return send, close


async def rnet_client(concurrency: int) -> tuple[Send, Callable[[], Awaitable[None]]]:
    import rnet

    client = rnet.Client()

    async def send(url: str, body: bytes, headers: dict[str, str]) -> int:
        response = await client.post(url, body=body, headers=headers)
        await response.bytes()
        return int(response.status)

    async def close() -> None:
        return None

    return send, close


async def pyreqwest_client(concurrency: int) -> tuple[Send, Callable[[], Awaitable[None]]]:
    from pyreqwest.client import ClientBuilder

    client = ClientBuilder().build()

    async def send(url: str, body: bytes, headers: dict[str, str]) -> int:
        response = await client.post(url).headers(headers).body_bytes(body).build().send()
        await response.bytes()
        return int(response.status)

    return send, client.close


async def httpr_client(concurrency: int) -> tuple[Send, Callable[[], Awaitable[None]]]:
    import httpr

    client = httpr.AsyncClient()

    async def send(url: str, body: bytes, headers: dict[str, str]) -> int:
        response = await client.post(url, content=body, headers=headers)
        return int(response.status_code)

    async def close() -> None:
        await client.aclose()

    return send, close


CLIENTS: dict[str, tuple[str, Callable[[int], Awaitable[tuple[Send, Callable[[], Awaitable[None]]]]]]] = {
    "aiohttp": ("aiohttp", aiohttp_client),
    "wayline-aiohttp": ("aiohttp", partial(wayline_transport, "aiohttp")),
    "wayline-pyreqwest": ("pyreqwest", partial(wayline_transport, "pyreqwest")),
    "rnet": ("rnet", rnet_client),
    "pyreqwest": ("pyreqwest", pyreqwest_client),
    "httpr": ("httpr", httpr_client),
}


@dataclass(frozen=True)
class Run:
    per_s: float
    cpu_us: float
    failed: int


async def run_once(name: str, url: str, payloads: list[tuple[bytes, dict[str, str]]], concurrency: int) -> Run:
    send, close = await CLIENTS[name][1](concurrency)
    # Warm the pool so every client starts with open connections.
    await asyncio.gather(*(send(url, *payloads[i]) for i in range(concurrency)))
    cursor = iter(range(len(payloads)))
    failed = 0

    async def worker() -> None:
        nonlocal failed
        for i in cursor:
            body, headers = payloads[i]
            if await send(url, body, headers) != 204:
                failed += 1

    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    await close()
    return Run(len(payloads) / wall, cpu / len(payloads) * 1e6, failed)


def main() -> None:
    parser = cli.parser(__doc__, runs=3)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--clients", nargs="*", default=list(CLIENTS))
    args = parser.parse_args()
    if not 1 <= args.requests <= 1_000_000:
        parser.error("--requests must be between 1 and 1,000,000 (this is a bounded local benchmark)")

    with serving(receive, context=multiprocessing.get_context("spawn")) as base:
        url = f"{base}/hook"
        payloads = [request_for(n) for n in range(args.requests)]
        print(f"{args.requests} signed POSTs of {len(payloads[0][0])} bytes, {args.concurrency} in flight, "
              f"median of {args.runs} runs; receiver: aiohttp in its own process")
        print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
        present = [name for name in args.clients if importlib.util.find_spec(CLIENTS[name][0]) is not None]
        runs: dict[str, list[Run]] = {name: [] for name in present}
        # Round-robin, so that load from anything else on the machine falls on every client alike.
        for _ in range(args.runs):
            for name in present:
                runs[name].append(asyncio.run(run_once(name, url, payloads, args.concurrency)))
        print("load average after:  {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
        print(f"{'client':<16} {'req/s (median)':>15} {'runs':>26} {'client CPU µs/req':>18}")
        for name in args.clients:
            if name not in runs:
                print(f"{name:<16} skipped: {CLIENTS[name][0]} is not installed")
                continue
            rates = ", ".join(f"{r.per_s:,.0f}" for r in runs[name])
            failed = sum(r.failed for r in runs[name])
            note = f"  ({failed} failed)" if failed else ""
            print(
                f"{name:<16} {statistics.median(r.per_s for r in runs[name]):>15,.0f} {rates:>26} "
                f"{statistics.median(r.cpu_us for r in runs[name]):>18,.0f}{note}"
            )
    record_results("delivery_http_clients", {
        "args": vars(args), "runs": {name: [asdict(r) for r in found] for name, found in runs.items()},
        "median_per_s": {name: statistics.median(r.per_s for r in found) for name, found in runs.items()},
        "median_cpu_us": {name: statistics.median(r.cpu_us for r in found) for name, found in runs.items()}}, args.out)


if __name__ == "__main__":
    main()
