"""Reading a topic back in a benchmark: every record from its start, each made into a row."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, Message

Row = TypeVar("Row")


def read_topic(bootstrap: str, topic: str, row: Callable[[Message], Row], out: list[Row], *,
               expected: int | None = None, stop: threading.Event | None = None) -> None:
    """Append ``row(record)`` for each record of ``topic`` to ``out`` (a thread can fill it
    while the caller watches), until ``expected`` rows are there or ``stop`` is set; with
    neither, until the end of every partition."""
    to_end = expected is None and stop is None
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "enable.partition.eof": to_end})
    consumer.subscribe([topic])
    partitions = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions) if to_end else 0
    at_end: set[int] = set()
    try:
        while not (stop is not None and stop.is_set()) and (expected is None or len(out) < expected) \
                and not (to_end and len(at_end) == partitions):
            for message in consumer.consume(1000, 0.2):
                error = message.error()
                if error is None:
                    out.append(row(message))
                    at_end.discard(message.partition())
                elif error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
    finally:
        consumer.close()
