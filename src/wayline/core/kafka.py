"""Thin wrappers over confluent-kafka that every part uses; its errors stop here."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from wayline.core.errors import RetryLater


def ensure_topics(bootstrap: str, names: Iterable[str], partitions: int, config: dict[str, str] | None = None) -> list[str]:
    """Create the topics that do not exist yet; returns the ones created."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        existing = set(admin.list_topics(timeout=10).topics)
    except KafkaException as exc:
        raise RetryLater(f"Kafka at {bootstrap} did not answer: {exc}") from exc
    missing = sorted(set(names) - existing)
    if not missing:
        return []
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {}) for name in missing]
    )
    for name, future in futures.items():
        try:
            future.result(timeout=30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise RetryLater(f"could not create topic {name}: {exc}") from exc
    return missing


def topic_partitions(bootstrap: str, topic: str, wait_s: float = 10.0) -> int:
    """How many partitions ``topic`` has, waiting up to ``wait_s`` for a topic just made to
    show in the broker's metadata: the creation is acknowledged before every broker lists
    the topic, and a count taken in between found nothing."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + wait_s
    while True:
        try:
            found = admin.list_topics(topic=topic, timeout=wait_s).topics.get(topic)
        except KafkaException as exc:
            raise RetryLater(f"Kafka at {bootstrap} did not answer: {exc}") from exc
        if found is not None and found.error is None and found.partitions:
            return len(found.partitions)
        if time.monotonic() >= deadline:
            raise RetryLater(f"topic {topic} does not exist in Kafka at {bootstrap} (it is made at start: "
                             "was it deleted since?)")
        time.sleep(0.1)


class KafkaRecord(NamedTuple):
    topic: str
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = ()
    partition: int = -1
    """-1: the producer's partitioner picks (by key)."""
    timestamp: int = 0
    """Milliseconds since the epoch; 0: now."""


def produce_all(producer: Producer, records: Iterable[KafkaRecord], flush_timeout_s: float = 30.0) -> int:
    """Produce ``records`` and wait until the broker acknowledged every one; returns how many.
    Raises :class:`RetryLater` if any was refused or is still pending after ``flush_timeout_s``."""
    failures: list[str] = []

    def delivered(error: object, message: Any) -> None:
        if error is not None:
            failures.append(f"{message.topic()}: {error}")

    count = 0
    try:
        for record in records:
            while True:
                try:
                    producer.produce(record.topic, record.value, key=record.key, headers=list(record.headers),
                                     partition=record.partition, timestamp=record.timestamp, on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full: let acknowledgements drain it
                    producer.poll(0.1)
            count += 1
        left = producer.flush(flush_timeout_s)
    except KafkaException as exc:
        raise RetryLater(f"could not produce to Kafka: {exc}") from exc
    if left or failures:
        raise RetryLater(f"records not acknowledged by Kafka: {left} pending, errors {failures[:3]}")
    return count


__all__ = ["KafkaRecord", "ensure_topics", "produce_all", "topic_partitions"]
