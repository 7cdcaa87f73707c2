"""Reading a topic back in a benchmark: every record from its start, each made into a row."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, Message

Row = TypeVar("Row")


def read_topic(bootstrap: str, topic: str | list[str], row: Callable[[Message], Row], out: list[Row], *,
               expected: int | None = None, stop: threading.Event | None = None) -> None:
    """Append ``row(record)`` for each record of ``topic`` (or of each of several) to ``out``
    (a thread can fill it while the caller watches), until ``expected`` rows are there or
    ``stop`` is set; with neither, until the end of every partition."""
    to_end = expected is None and stop is None
    topics = [topic] if isinstance(topic, str) else topic
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "enable.partition.eof": to_end})
    consumer.subscribe(topics)
    partitions = 0
    if to_end:
        known = consumer.list_topics(timeout=10).topics
        partitions = sum(len(known[name].partitions) for name in topics)
    at_end: set[tuple[str, int]] = set()
    try:
        while not (stop is not None and stop.is_set()) and (expected is None or len(out) < expected) \
                and not (to_end and len(at_end) == partitions):
            for message in consumer.consume(1000, 0.2):
                error = message.error()
                if error is None:
                    out.append(row(message))
                    at_end.discard((message.topic(), message.partition()))
                elif error.code() == KafkaError._PARTITION_EOF:
                    at_end.add((message.topic(), message.partition()))
    finally:
        consumer.close()
