"""A local webhook receiver for demos and benchmarks: what a customer's endpoint sees.

It accepts POSTs on any path, checks each request's Standard Webhooks signature with the
``standardwebhooks`` reference package (secrets per path; a bad signature is a 401 and
counted), counts requests and events per path — a CloudEvents batch counts each event —
and the client connections that carried them (each distinct client address and port: a
sender that keeps its connections open shows a few, one that reconnects shows many),
and measures end-to-end latency from each event's ``time`` to its arrival. ``GET /stats``
returns the counts per path as JSON; ``GET /totals?prefix=…&sent_from=…&sent_to=…`` the
counts of every path under a prefix together, with the latency quantiles over the events
whose ``time`` (epoch seconds) falls in that window only: a benchmark's phase, such as
before, during and after a spike. It runs on an event loop in a background thread, so a demo or
benchmark can keep working while it serves (or as its own process: ``wayline receive``,
which trusts the secrets given to it or those of the registry's endpoints at its address).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from array import array
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import orjson
from aiohttp import web
from sqlalchemy import or_, select
from standardwebhooks import Webhook, WebhookVerificationError

from wayline.core.errors import ConfigError
from wayline.registry.access import ADMIN
from wayline.registry.db import Database
from wayline.registry.endpoint import EndpointService
from wayline.registry.models import Endpoint

BATCH_CONTENT_TYPE = "application/cloudevents-batch+json"
# Latency samples kept per path: the first ones are enough for medians and p99s. Two
# doubles each (16 bytes): a benchmark's 2 million events per path cost 32 MB.
MAX_SAMPLES = 2_000_000
RECENT_S = 60.0
"""The sliding window of :meth:`Receiver.recent`: what a live view shows beside the totals."""


@dataclass
class PathStats:
    requests: int = 0
    events: int = 0
    rejected: int = 0
    """Requests whose signature did not verify."""
    sent_at: array[float] = field(default_factory=lambda: array("d"))
    """Each sampled event's ``time`` (epoch seconds), beside its latency."""
    latencies_s: array[float] = field(default_factory=lambda: array("d"))
    first_at: float | None = None
    last_at: float | None = None
    """Epoch seconds of the first and the latest request."""
    peers: set[tuple[str, int]] = field(default_factory=set)
    """The client (address, port) of every connection a request arrived on."""
    batched: bool = False
    """Some request to the path was a CloudEvents batch."""
    recent: deque[tuple[float, float]] = field(default_factory=deque)
    """(arrival, latency) of every event of the last :data:`RECENT_S` (not capped like the samples)."""

    def observe(self, sent_at: float, arrived_at: float) -> None:
        if len(self.latencies_s) < MAX_SAMPLES:
            self.sent_at.append(sent_at)
            self.latencies_s.append(arrived_at - sent_at)
        self.recent.append((arrived_at, arrived_at - sent_at))

    def forget_before(self, moment: float) -> None:
        while self.recent and self.recent[0][0] < moment:
            self.recent.popleft()

    def latencies(self, sent_from: float = -math.inf, sent_to: float = math.inf) -> list[float]:
        """The latencies of the sampled events whose ``time`` is in [sent_from, sent_to), in order."""
        return sorted(lat for sent, lat in zip(self.sent_at, self.latencies_s, strict=True)
                      if sent_from <= sent < sent_to)

    def as_dict(self, sent_from: float = -math.inf, sent_to: float = math.inf) -> dict[str, Any]:
        ordered = self.latencies(sent_from, sent_to)
        return {"requests": self.requests, "events": self.events, "rejected": self.rejected,
                "connections": len(self.peers), "latency_samples": len(ordered),
                "latency_p50_s": _quantile(ordered, 0.5), "latency_p99_s": _quantile(ordered, 0.99),
                "first_at": self.first_at, "last_at": self.last_at}


def _quantile(ordered: list[float], q: float) -> float | None:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


def _event_time(event: Any) -> float | None:
    stamp = event.get("time") if isinstance(event, dict) else None
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


class Receiver:
    """The request handler and its counts; ``secrets`` maps a path to its ``whsec_`` secrets."""

    def __init__(self, secrets: Mapping[str, list[str]] | None = None, *, verify: bool = True) -> None:
        self._webhooks: dict[str, list[Webhook]] = {}
        self._verify = verify
        self.trust(secrets or {})
        self._lock = threading.Lock()
        self._stats: dict[str, PathStats] = {}
        self.started_at = time.time()

    def trust(self, secrets: Mapping[str, list[str]]) -> None:
        """Check the requests on these paths against these secrets (from now on)."""
        self._webhooks = self._webhooks | {path: [Webhook(s) for s in texts] for path, texts in secrets.items()}

    def _verified(self, path: str, body: bytes, headers: dict[str, str]) -> bool:
        if not self._verify:
            return True
        for webhook in self._webhooks.get(path, []):
            try:
                webhook.verify(body, headers)
                return True
            except WebhookVerificationError:
                continue
        return False

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        arrived = time.time()
        headers = {k.lower(): v for k, v in request.headers.items()}
        verified = self._verified(request.path, body, headers)
        peer = request.transport.get_extra_info("peername") if request.transport else None
        events: list[Any] = []
        if verified:
            parsed = orjson.loads(body)
            events = parsed if headers.get("content-type") == BATCH_CONTENT_TYPE else [parsed]
        with self._lock:
            stats = self._stats.setdefault(request.path, PathStats())
            stats.requests += 1
            stats.first_at = stats.first_at or arrived
            stats.last_at = arrived
            if peer is not None:
                stats.peers.add((peer[0], peer[1]))
            if not verified:
                stats.rejected += 1
            stats.batched |= headers.get("content-type") == BATCH_CONTENT_TYPE
            stats.events += len(events)
            for event in events:
                sent = _event_time(event)
                if sent is not None:
                    stats.observe(sent, arrived)
            stats.forget_before(arrived - RECENT_S)
        return web.Response(status=204) if verified else web.Response(status=401, text="bad signature")

    async def stats_response(self, _request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def totals_response(self, request: web.Request) -> web.Response:
        try:
            window = {name: float(request.query[name]) for name in ("sent_from", "sent_to") if name in request.query}
        except ValueError:
            return web.json_response({"error": {"code": "bad_window",
                                                "message": "sent_from and sent_to are epoch seconds"}}, status=400)
        totals = self.totals(request.query.get("prefix", "/"))
        return web.json_response(totals.as_dict(**window))

    def stats(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {path: stats.as_dict() for path, stats in sorted(self._stats.items())}

    def recent(self, now: float | None = None) -> dict[str, dict[str, Any]]:
        """Over the last :data:`RECENT_S`, the paths that got batches and those that got
        single events, each together: events, and latency p50 and p99."""
        since = (time.time() if now is None else now) - RECENT_S
        latencies: dict[str, list[float]] = {"streaming": [], "batch": []}
        with self._lock:
            for stats in self._stats.values():
                stats.forget_before(since)
                latencies["batch" if stats.batched else "streaming"] += (lat for _, lat in stats.recent)
        return {mode: {"events": len(found), "latency_p50_s": _quantile(sorted(found), 0.5),
                       "latency_p99_s": _quantile(sorted(found), 0.99)} for mode, found in latencies.items()}

    def totals(self, prefix: str = "/") -> PathStats:
        """The counts and latency samples of every path under ``prefix`` together (a
        connection that carried requests to several of them counts once)."""
        with self._lock:
            total = PathStats()
            for path, stats in self._stats.items():
                if not path.startswith(prefix):
                    continue
                total.requests += stats.requests
                total.events += stats.events
                total.rejected += stats.rejected
                total.peers |= stats.peers
                total.sent_at.extend(stats.sent_at)
                total.latencies_s.extend(stats.latencies_s)
                total.first_at = min(filter(None, (total.first_at, stats.first_at)), default=None)
                total.last_at = max(filter(None, (total.last_at, stats.last_at)), default=None)
        return total

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/stats", self.stats_response)
        app.router.add_get("/totals", self.totals_response)
        app.router.add_post("/{path:.*}", self.handle)
        return app


def registry_secrets(database: Database, endpoints: EndpointService, base_urls: list[str]) -> dict[str, list[str]]:
    """The signing secrets of the registry's endpoints under ``base_urls`` (a receiver's own
    addresses), by path: what a receiver needs to check what Wayline sends it."""
    secrets: dict[str, list[str]] = {}
    with database.transaction() as session:
        rows = session.scalars(select(Endpoint).where(or_(*(Endpoint.url.startswith(f"{base}/") for base in base_urls))))
        for row in rows:
            path = urlsplit(row.url).path
            secrets.setdefault(path, []).extend(s.secret for s in endpoints.secrets(session, ADMIN, row.id))
    return secrets


class ReceiverServer:
    """A :class:`Receiver` served on 127.0.0.1 from a background thread; :meth:`close` stops it."""

    def __init__(self, receiver: Receiver, port: int = 0) -> None:
        self.receiver = receiver
        self._loop = asyncio.new_event_loop()
        self._runner = web.AppRunner(receiver.app(), access_log=None, shutdown_timeout=0.5)
        self._thread = threading.Thread(target=self._loop.run_forever, name="wayline-receiver", daemon=True)
        self._thread.start()
        try:
            self.port = asyncio.run_coroutine_threadsafe(self._start(port), self._loop).result(timeout=30)
        except OSError as exc:
            self.close()
            raise ConfigError(f"the receiver cannot listen on 127.0.0.1:{port}: {exc}") from exc

    async def _start(self, port: int) -> int:
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port, backlog=1024)
        await site.start()
        return int(self._runner.addresses[0][1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=30)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


__all__ = ["BATCH_CONTENT_TYPE", "MAX_SAMPLES", "RECENT_S", "PathStats", "Receiver", "ReceiverServer", "registry_secrets"]
