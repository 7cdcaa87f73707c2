"""Publishing: one idempotent producer for the whole process, and transactional ones in a pool.

The shared producer batches what concurrent requests write (`linger.ms`), retries without
duplicates (`enable.idempotence`) and reports a record written only once every in-sync
replica has it (`acks=all`); a thread serves its delivery reports, so a request just
waits for its own records' futures.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
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
    """Hand the records to the producer and wait until the broker acknowledged or refused each.

    `flush`: this caller serves the producer's delivery reports itself (no thread polls it)."""
    pending = _Pending(records)
    for slot, record in enumerate(records):
        while True:
            try:
                producer.produce(topic, record.value, record.key, on_delivery=pending.reporter(slot))
                break
            except BufferError:
                # The local queue is full: wait for acknowledgements to make room.
                producer.poll(0.05)
            except KafkaException as exc:
                pending.settle(slot, Refused(record.index, "kafka", f"event {record.index}: {exc.args[0].str()}"))
                break
    if flush:
        producer.flush(timeout_s)
    pending.done.wait(timeout_s)
    return pending.results()


class _Pending:
    """One request's records until their delivery reports are in: one event to wait on, not a
    future per record (at 100 records a request, futures were a visible share of the time)."""

    def __init__(self, records: Sequence[Outgoing]) -> None:
        self._records = records
        self._results: list[Result | None] = [None] * len(records)
        self._left = len(records)
        self._lock = threading.Lock()
        self.done = threading.Event()
        if not records:
            self.done.set()

    def reporter(self, slot: int) -> Callable[[KafkaError | None, Message], None]:
        index = self._records[slot].index

        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                self.settle(slot, Refused(index, "kafka", f"event {index}: {error.str()}"))
            else:
                self.settle(slot, Written(index, message.partition(), message.offset()))

        return delivered

    def settle(self, slot: int, result: Result) -> None:
        self._results[slot] = result
        with self._lock:
            self._left -= 1
            if self._left == 0:
                self.done.set()

    def results(self) -> list[Result]:
        return [
            result if result is not None else Refused(
                record.index, "timeout", f"event {record.index}: the broker did not acknowledge it in time")
            for record, result in zip(self._records, self._results, strict=True)
        ]


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
