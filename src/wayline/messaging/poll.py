"""Stateless polls: assign the cursor's partitions at its offsets, read, hand back the next cursor.

No consumer group: a bounded pool of consumers is reused, each request assigns and seeks,
and nothing is committed. Consumers read committed records only, so records of an open
transaction wait and those of an aborted one never appear. Within a partition, records
come in offset order; the next cursor moves each partition just past the last record
returned from it, so a client paging with cursors sees every record once.
"""

from __future__ import annotations

import base64
import queue
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition

from wayline.core.errors import NotFound, RetryLater
from wayline.messaging.cursor import Cursor, Start
from wayline.messaging.errors import Busy

# A poll that asked for no wait still gives the broker this long to answer the first fetch.
FIRST_FETCH_S = 5.0
# A poll waits this long for a free consumer, then answers 429: waiting polls hold request threads.
BORROW_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class PolledRecord:
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "partition": self.partition, "offset": self.offset, "timestamp_ms": self.timestamp_ms,
            "key": self.key.decode("utf-8", "replace") if self.key is not None else None,
        }
        try:
            out["event"] = orjson.loads(self.value) if self.value else None
        except orjson.JSONDecodeError:
            out["value_base64"] = base64_of(self.value)
        return out


def base64_of(value: bytes | None) -> str | None:
    return base64.b64encode(value).decode() if value is not None else None


@dataclass(frozen=True)
class PollPage:
    records: list[PolledRecord]
    next: Cursor


class Poller:
    def __init__(self, bootstrap: str, consumers: int) -> None:
        self._bootstrap = bootstrap
        self._size = consumers
        self._idle: queue.LifoQueue[Consumer | None] = queue.LifoQueue()
        for _ in range(consumers):
            self._idle.put(None)  # created on first use

    def start(self, topic: str, start: Start) -> Cursor:
        """A cursor at the start of every partition the topic has now."""
        with self._consumer() as consumer:
            partitions = self._partitions(consumer, topic)
            if start.kind == "earliest":
                offsets = {p: self._low(consumer, topic, p) for p in partitions}
            elif start.kind == "latest":
                offsets = self._resolve(consumer, [TopicPartition(topic, p, OFFSET_END) for p in partitions])
            else:
                wanted = [TopicPartition(topic, p, start.timestamp_ms) for p in partitions]
                try:
                    found = consumer.offsets_for_times(wanted, timeout=10)
                except KafkaException as exc:
                    raise RetryLater(f"Kafka did not answer: {exc}") from exc
                # No record at or after the time: start at the end.
                ends = self._resolve(consumer, [TopicPartition(topic, tp.partition, OFFSET_END) for tp in found])
                offsets = {tp.partition: tp.offset if tp.offset >= 0 else ends[tp.partition] for tp in found}
        return Cursor(topic, offsets)

    def poll(self, cursor: Cursor, limit: int, max_bytes: int, wait_s: float) -> PollPage:
        with self._consumer() as consumer:
            partitions = self._partitions(consumer, cursor.topic)
            # A partition added since the cursor was made starts at its beginning: all of it is new.
            offsets = {p: cursor.offsets.get(p, self._low(consumer, cursor.topic, p)) for p in partitions}
            consumer.assign([TopicPartition(cursor.topic, p, o) for p, o in offsets.items()])
            try:
                records = self._read(consumer, offsets, limit, max_bytes, wait_s)
            finally:
                consumer.unassign()
        records.sort(key=lambda r: (r.partition, r.offset))
        return PollPage(records, Cursor(cursor.topic, offsets))

    def close(self) -> None:
        while True:
            try:
                consumer = self._idle.get_nowait()
            except queue.Empty:
                return
            if consumer is not None:
                consumer.close()

    @staticmethod
    def _read(
        consumer: Consumer, offsets: dict[int, int], limit: int, max_bytes: int, wait_s: float,
    ) -> list[PolledRecord]:
        """Read into `records`, moving `offsets` past what is returned (and past aborted records and
        transaction markers once a partition is read to its end)."""
        records: list[PolledRecord] = []
        size = 0
        at_end: set[int] = set()
        started = time.monotonic()
        wait_until = started + wait_s
        give_up = started + max(wait_s, FIRST_FETCH_S)
        while len(records) < limit:
            now = time.monotonic()
            if at_end >= offsets.keys() and (records or now >= wait_until) or now >= give_up:
                break
            for message in consumer.consume(limit - len(records), timeout=min(0.2, give_up - now)):
                partition = message.partition()
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise RetryLater(f"reading {message.topic()} [{partition}] failed: {error.str()}")
                    at_end.add(partition)
                    offsets[partition] = max(offsets[partition], message.offset())
                    continue
                value = message.value()
                if records and size + len(value or b"") > max_bytes:
                    return records
                at_end.discard(partition)
                records.append(PolledRecord(partition, message.offset(), message.timestamp()[1], message.key(), value))
                offsets[partition] = message.offset() + 1
                size += len(value or b"")
        return records

    @staticmethod
    def _partitions(consumer: Consumer, topic: str) -> list[int]:
        try:
            metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        except KafkaException as exc:
            raise RetryLater(f"Kafka did not answer: {exc}") from exc
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise NotFound(f"topic {topic} not found")
        return sorted(metadata.partitions)

    @staticmethod
    def _low(consumer: Consumer, topic: str, partition: int) -> int:
        try:
            low, _high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        except KafkaException as exc:
            raise RetryLater(f"Kafka did not answer: {exc}") from exc
        return low

    @staticmethod
    def _resolve(consumer: Consumer, ends: list[TopicPartition]) -> dict[int, int]:
        """The end of each partition as a read-committed reader sees it: the last stable offset."""
        try:
            resolved = consumer.offsets_for_times(ends, timeout=10)
        except KafkaException as exc:
            raise RetryLater(f"Kafka did not answer: {exc}") from exc
        return {tp.partition: tp.offset for tp in resolved}

    @contextmanager
    def _consumer(self) -> Iterator[Consumer]:
        try:
            consumer = self._idle.get(timeout=BORROW_TIMEOUT_S)
        except queue.Empty:
            raise Busy(f"all {self._size} poll consumers of this instance are busy: retry shortly") from None
        try:
            if consumer is None:
                consumer = self._new_consumer()
            yield consumer
        finally:
            self._idle.put(consumer)

    def _new_consumer(self) -> Consumer:
        return Consumer({
            "bootstrap.servers": self._bootstrap,
            # Required by the client, never joined: polls assign partitions themselves and commit nothing.
            "group.id": "wayline-messaging-poll",
            "enable.auto.commit": False,
            # A cursor older than the retention limit resumes at the oldest record still kept.
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 100,
        })


__all__ = ["PollPage", "PolledRecord", "Poller"]
