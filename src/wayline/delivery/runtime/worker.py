"""What a Spark Python worker keeps from one micro-batch to the next: its connections.

Spark runs the tasks of later micro-batches in the same Python worker process
(``spark.python.worker.reuse``, on by default), so the sending and draining tasks take
their HTTP transport, database pool and Kafka producer from here rather than making them
per task: an endpoint keeps its keep-alive connections (and TLS sessions) across
micro-batches, and a task starts sending without connecting to PostgreSQL first. The
transport lives on one event loop that every stage of the process runs on.

Everything is bounded — the SQLAlchemy pool (``make_engine``), the transport's idle
timeout (``HttpSettings.keepalive_s``) — and closed when the worker exits. A worker
serves one task at a time; the lock covers the rare case of two threads asking.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import threading
from collections.abc import Coroutine
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from confluent_kafka import Producer

from wayline.core.settings import Settings
from wayline.delivery.storage.drain import RetryQueue
from wayline.delivery.storage.store import PostgresDeliveryStore
from wayline.delivery.transports.base import Transport
from wayline.delivery.transports.factory import transport_for
from wayline.registry.db import make_engine

if TYPE_CHECKING:
    from wayline.delivery.transports.aiohttp import AiohttpTransport
    from wayline.delivery.transports.pyreqwest import ReqwestTransport

_T = TypeVar("_T")
# Bundles of batch-mode leftovers may be this large (the batch topic allows it).
MAX_RECORD_BYTES = 32 * 1024 * 1024 + 64 * 1024


class WorkerPool:
    """One worker's long-lived transport (on its own event loop), database pool and producer."""

    def __init__(self, settings: Settings, *, ping: bool = False) -> None:
        """``ping``: test each database connection at checkout (see ``make_engine``). The
        sender and retry processes do without: a stage checks out a connection two or three
        times, and one that fails on a dropped connection is taken again whole."""
        self._runner = asyncio.Runner()
        self._engine = make_engine(settings.postgres_dsn(), ping=ping)
        self.store = PostgresDeliveryStore(self._engine)
        self.queue = RetryQueue(self._engine)
        self._transport: AiohttpTransport | ReqwestTransport = transport_for(settings.registry.url_allow_list, settings.delivery.http_client)()
        self._runner.run(self._transport.__aenter__())
        self._bootstrap = settings.kafka_bootstrap()
        self._linger_ms = settings.kafka.stream_linger_ms
        self._producer: Producer | None = None
        self._lock = threading.Lock()

    def run(self, stage: Coroutine[Any, Any, _T]) -> _T:
        """Run a stage's sends on this worker's loop, where its transport lives."""
        with self._lock:
            return self._runner.run(stage)

    def transport(self) -> AbstractAsyncContextManager[Transport]:
        """The shared transport, for a stage's ``async with``: leaving it keeps the connections open."""
        return contextlib.nullcontext(self._transport)

    @property
    def producer(self) -> Producer:
        """Made on first use: most tasks have no record to write."""
        if self._producer is None:
            self._producer = Producer({
                "bootstrap.servers": self._bootstrap, "enable.idempotence": True, "linger.ms": self._linger_ms,
                "message.max.bytes": MAX_RECORD_BYTES,
            })
        return self._producer

    def close(self) -> None:
        with self._lock:
            with contextlib.suppress(Exception):  # closing on exit: nothing left to tell
                self._runner.run(self._transport.__aexit__(None, None, None))
            self._runner.close()
            self._engine.dispose()
            if self._producer is not None:
                self._producer.flush(5)


_pools: dict[tuple[object, ...], WorkerPool] = {}
_pools_lock = threading.Lock()


def worker_pool(settings: Settings) -> WorkerPool:
    """This worker's pool for ``settings`` (as ``task_settings`` makes them); a pool made
    for other settings (a job restarted with a new database or allow-list) is closed."""
    key = (settings.postgres_dsn(), tuple(settings.registry.url_allow_list), settings.delivery.http_client,
           settings.kafka_bootstrap())
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            for stale in _pools.values():
                stale.close()
            _pools.clear()
            # A Spark task that fails fails its micro-batch: its connections are tested first.
            pool = _pools[key] = WorkerPool(settings, ping=True)
        return pool


@atexit.register
def close_pools() -> None:
    """Close this process's pools (at exit, or before the broker they write to goes away)."""
    with _pools_lock:
        for pool in _pools.values():
            pool.close()
        _pools.clear()


__all__ = ["MAX_RECORD_BYTES", "WorkerPool", "close_pools", "worker_pool"]
