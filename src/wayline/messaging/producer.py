"""Publishing: one idempotent producer for the whole process, and transactional ones in a pool.

The shared producer batches what concurrent requests write (`linger.ms`), retries without
duplicates (`enable.idempotence`) and reports a record written only once every in-sync
replica has it (`acks=all`); a thread serves its delivery reports, so a request just
waits for its own records' futures.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from wayline.core.errors import NotFound, RetryLater
from wayline.messaging.records import Outgoing, Refused, Result, Written


def producer_config(bootstrap: str, linger_ms: float, delivery_timeout_ms: int, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": linger_ms,
        "delivery.timeout.ms": delivery_timeout_ms,
        **extra,
    }


def write(
    producer: Producer, topic: str, records: Sequence[Outgoing], timeout_s: float, *, flush: bool = False,
) -> list[Result]:
    """Hand the records to the producer; each future settles when the broker acknowledged it or refused.

    `flush`: this caller serves the producer's delivery reports itself (no thread polls it)."""
    futures: list[tuple[int, Future[Result]]] = []
    for record in records:
        future: Future[Result] = Future()
        futures.append((record.index, future))
        while True:
            try:
                producer.produce(topic, record.value, record.key, on_delivery=_settle(record.index, future))
                break
            except BufferError:
                # The local queue is full: wait for acknowledgements to make room.
                producer.poll(0.05)
            except KafkaException as exc:
                future.set_result(Refused(record.index, "kafka", f"event {record.index}: {exc.args[0].str()}"))
                break
    if flush:
        producer.flush(timeout_s)
    deadline = time.monotonic() + timeout_s
    results = []
    for index, future in futures:
        try:
            results.append(future.result(timeout=max(0.0, deadline - time.monotonic())))
        except TimeoutError:
            results.append(Refused(index, "timeout", f"event {index}: the broker did not acknowledge it in time"))
    return results


def _settle(index: int, future: Future[Result]):
    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            future.set_result(Refused(index, "kafka", f"event {index}: {error.str()}"))
        else:
            future.set_result(Written(index, message.partition(), message.offset()))

    return delivered


class KnownTopics:
    """Which topics exist, so a publish to a missing one is a 404 and not a 30 s metadata wait.
    A name not seen yet costs one metadata request (only authorized keys get this far)."""

    def __init__(self, bootstrap: str) -> None:
        self._admin = AdminClient({"bootstrap.servers": bootstrap})
        self._names: frozenset[str] = frozenset()

    def require(self, topic: str) -> None:
        if topic in self._names:
            return
        try:
            self._names = frozenset(self._admin.list_topics(timeout=10).topics)
        except KafkaException as exc:
            raise RetryLater(f"Kafka did not answer: {exc}") from exc
        if topic not in self._names:
            raise NotFound(f"topic {topic} not found: an admin creates it with POST /topics")

    def forget(self, topic: str) -> None:
        self._names = self._names - {topic}


class Publisher:
    """The process's idempotent producer; `close()` flushes what is still in flight."""

    def __init__(self, bootstrap: str, linger_ms: float, delivery_timeout_ms: int) -> None:
        self._producer = Producer(producer_config(bootstrap, linger_ms, delivery_timeout_ms))
        self._timeout_s = delivery_timeout_ms / 1000 + 5
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve_reports, name="messaging-producer", daemon=True)
        self._thread.start()

    def publish(self, topic: str, records: Sequence[Outgoing]) -> list[Result]:
        return write(self._producer, topic, records, self._timeout_s)

    def _serve_reports(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._producer.flush(self._timeout_s)


__all__ = ["KnownTopics", "Publisher", "producer_config", "write"]
