"""Reading a topic back in a benchmark: every record from its start, each made into a row."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import OFFSET_END, Consumer, KafkaError, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from wayline.stack.loadgen import Producers

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


SETTLED_LAG_S = 0.2
SETTLED_ROUNDS = 5
"""Topics are settled once the broker appends a record to each of their partitions within
:data:`SETTLED_LAG_S`, this many rounds in a row (one round alone left a p99 of 0.5–0.8 s
in the first 10 s of a 1,000/s load on 500 topics)."""


def described(bootstrap: str, topics: list[str], within_s: float) -> dict[str, list[int]]:
    """Each of ``topics``' partition numbers, once the broker's metadata has them all (just
    after many topics were created or deleted, it lags)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + within_s
    while True:
        known = admin.list_topics(timeout=10).topics
        if all(topic in known and known[topic].partitions for topic in topics):
            return {topic: list(known[topic].partitions) for topic in topics}
        if time.monotonic() > deadline:
            missing = sorted(set(topics) - set(known))
            raise TimeoutError(f"{len(missing)} topics (first {missing[:1]}) not in the broker's metadata "
                               f"after {within_s:g} s")
        time.sleep(0.5)


def settle(bootstrap: str, topics: list[str], *, within_s: float = 120.0) -> float:
    """Write a record to every partition of ``topics`` (made with ``LogAppendTime``), a round
    a second, until the broker appends every one within :data:`SETTLED_LAG_S`
    (:data:`SETTLED_ROUNDS` rounds in a row); then delete
    them (DeleteRecords), so that readers from the earliest offset find the topics empty.
    The broker's first writes to new topics lag: 6–27 s at p99 for the first 15–20 s on 500
    new topics, with no consumer at all, and none on the same topics a minute later
    (docs/benchmarks.md, "The 500-topic stall is the broker's first writes to new topics").
    A user's topics are long-lived, so a measurement starts on settled ones. Returns the
    seconds it took."""
    producer = Producers({"bootstrap.servers": bootstrap, "linger.ms": 5})
    partitions = [TopicPartition(topic, p) for topic, numbers in described(bootstrap, topics, within_s).items()
                  for p in numbers]
    lags: list[float] = []

    def stamped(error: KafkaError | None, record: Message) -> None:
        if error is None:  # the broker's append time against the time written in the value
            lags.append(record.timestamp()[1] / 1000 - float(record.value()))

    began, prompt = time.monotonic(), 0
    while True:
        lags.clear()
        for partition in partitions:
            producer.produce(partition.topic, str(time.time()).encode(), partition=partition.partition,
                             on_delivery=stamped)
        producer.flush(60)
        prompt = prompt + 1 if len(lags) == len(partitions) and max(lags) < SETTLED_LAG_S else 0
        if prompt == SETTLED_ROUNDS or time.monotonic() - began > within_s:
            break
        time.sleep(1.0)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(p.topic, p.partition, OFFSET_END) for p in partitions])
    for future in futures.values():
        future.result(timeout=30)
    return time.monotonic() - began


def drop_topics(bootstrap: str, containing: str, *, within_s: float = 120.0) -> int:
    """Delete every topic whose name contains ``containing`` (a measurement's tag) and wait
    until the broker's metadata has none of them; how many there were. A user's broker holds
    its few hundred topics; the bench's, keeping every measurement's 500, held 2,031
    partitions after four measurements, with 600 MB of its 1 GB heap live."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    doomed = [topic for topic in admin.list_topics(timeout=10).topics if containing in topic]
    if doomed:
        for future in admin.delete_topics(doomed).values():
            future.result(timeout=within_s)
    deadline = time.monotonic() + within_s
    while any(containing in topic for topic in admin.list_topics(timeout=10).topics):
        if time.monotonic() > deadline:
            raise TimeoutError(f"topics with {containing!r} still listed {within_s:g} s after their deletion")
        time.sleep(0.5)
    return len(doomed)
