"""The baseline of issue 13: the plain app a platform team would write instead of Wayline.

One process, one asyncio loop: a ``confluent-kafka`` consumer reads the event topics,
each event is parsed and routed by its ``type`` to the endpoints subscribed to it (a dict
built once: no registry, no filters, no tenants), signed with Wayline's own Standard
Webhooks signing, and POSTed with aiohttp over keep-alive connections, ``in_flight``
requests at a time. Streaming mode sends one request per event; batch mode keeps one
buffer per route and sends a CloudEvents batch at ``max_count`` events or ``max_wait_s``.
No retries, no delivery log, no at-least-once: a failed request is dropped (the receiver's
counts show what arrived).
That is what Wayline must beat on one machine while keeping all it has that this lacks.

``systems.start_plain`` runs it in its own process (``run``) against the same receiver,
registry shape and topics as the delivery job.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event

import aiohttp
import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from wayline.core.secret import Secret
from wayline.delivery.signing import batch_message_id, message_id, signed_headers
from wayline.registry.subscription import Mode

BATCH_CONTENT_TYPE = "application/cloudevents-batch+json"


PLAIN_FETCH = {"fetch.wait.max.ms": 10}
"""The plain sender's fetches: answered at the first byte, or after 10 ms."""


@dataclass(frozen=True)
class Route:
    """One subscription of one endpoint: where its events go and what signs them."""

    url: str
    subscription_id: str
    secrets: tuple[str, ...]
    """``whsec_`` texts (picklable, for the process that sends)."""


@dataclass(frozen=True)
class SenderConfig:
    bootstrap: str
    topics: Sequence[str]
    partitions: int
    routes: dict[str, list[Route]]
    """Event type → the routes subscribed to it."""
    mode: Mode = "streaming"
    max_count: int = 1000
    max_wait_s: float = 1.0
    in_flight: int = 256
    timeout_s: float = 5.0


@dataclass
class _Buffer:
    """A batch-mode route's events waiting to go out together."""

    opened_at: float
    ids: list[str] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)


class PlainSender:
    """Consume → route → sign → POST, until ``stop`` is set."""

    def __init__(self, config: SenderConfig, session: aiohttp.ClientSession) -> None:
        self._config = config
        self._session = session
        self._secrets = {r: [Secret.parse(t) for t in r.secrets] for rs in config.routes.values() for r in rs}
        self._slots = asyncio.Semaphore(config.in_flight)
        self._pending: set[asyncio.Task[None]] = set()
        self._buffers: dict[Route, _Buffer] = {}

    async def run(self, stop: Event) -> None:
        consumer = Consumer({"bootstrap.servers": self._config.bootstrap, "group.id": "bench-plain",
                             "enable.auto.commit": False, **PLAIN_FETCH})
        # Assigned, not subscribed: no group rebalance delay at the start, as Spark's reader.
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING)
                         for t in self._config.topics for p in range(self._config.partitions)])
        loop = asyncio.get_running_loop()
        try:
            while not stop.is_set():
                # The blocking poll runs off the loop, so requests progress meanwhile.
                for message in await loop.run_in_executor(None, consumer.consume, 1000, 0.05):
                    if message.error() is None:
                        await self._route(message.value())
                await self._flush_due()
        finally:
            consumer.close()
            await asyncio.gather(*self._pending, return_exceptions=True)

    async def _route(self, value: bytes) -> None:
        event = orjson.loads(value)
        for route in self._config.routes.get(event.get("type"), ()):
            if self._config.mode == "streaming":
                await self._send(route, message_id(event["id"], route.subscription_id), value, "application/json")
                continue
            buffer = self._buffers.setdefault(route, _Buffer(time.monotonic()))
            buffer.ids.append(event["id"])
            buffer.bodies.append(value)
            if len(buffer.ids) >= self._config.max_count:
                await self._send_batch(route)

    async def _flush_due(self) -> None:
        now = time.monotonic()
        for route in [r for r, b in self._buffers.items() if now - b.opened_at >= self._config.max_wait_s]:
            await self._send_batch(route)

    async def _send_batch(self, route: Route) -> None:
        buffer = self._buffers.pop(route)
        body = b"[" + b",".join(buffer.bodies) + b"]"
        await self._send(route, batch_message_id(route.subscription_id, buffer.ids), body, BATCH_CONTENT_TYPE)

    async def _send(self, route: Route, msg_id: str, body: bytes, content_type: str) -> None:
        await self._slots.acquire()
        task = asyncio.create_task(self._post(route, msg_id, body, content_type))
        self._pending.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._pending.discard(task)
        self._slots.release()

    async def _post(self, route: Route, msg_id: str, body: bytes, content_type: str) -> None:
        headers = signed_headers(msg_id, int(time.time()), body, self._secrets[route])
        headers["content-type"] = content_type
        try:
            async with self._session.post(route.url, data=body, headers=headers) as answer:
                await answer.read()
        except (aiohttp.ClientError, TimeoutError):
            pass  # dropped: the plain app has no retries


def run(config: SenderConfig, stop: Event) -> None:
    """The process body: send until ``stop`` is set."""

    async def main() -> None:
        connector = aiohttp.TCPConnector(limit=config.in_flight)
        timeout = aiohttp.ClientTimeout(total=config.timeout_s)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            await PlainSender(config, session).run(stop)

    asyncio.run(main())
