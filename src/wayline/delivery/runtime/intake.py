"""Intake processes: the source topics fanned in onto one internal topic the matching query
reads under the real-time trigger (``delivery.intake``).

Spark's real-time trigger holds a long-running task per source partition, so over the
product's many topics (20 × 2 partitions in the demo, 500+ for the brief's users) it
cannot run on a few cores, and Spark's micro-batch Kafka reader pays per partition per
micro-batch (docs/decisions.md, "The intake fan-in"). A plain consumer reads every
partition a broker leads in one fetch. Each intake process is a member of the consumer
group ``delivery.intake_group`` on the delivery job's source topics (the matching query's
own pattern, :func:`~wayline.core.topics.delivered_topic_pattern`) and copies each record
to ``delivery.intake_topic`` (:func:`intake_partitions` partitions):

- key, value and headers unchanged (a value over ``kafka.quarantine_max_bytes`` cut to
  one byte more: Kafka would refuse its copy, and it is quarantined as oversize, by
  reference to the original, either way), then :data:`ORIGIN_HEADERS` (topic, partition,
  offset, as text) appended last, and the original timestamp as the record's: the
  matching query's projection (:mod:`wayline.pipelines.intake_source`) puts them back in
  the Kafka columns, so audit records, quarantine copies and ``source`` name the origin;
- keyed as it was, so one key's records stay in order on one intake partition; a record
  without a key goes to the partition its origin partition hashes to, which keeps its
  origin partition's order;
- at-least-once: a batch is consumed, produced and flushed, and only then are its offsets
  committed, at most every :data:`COMMIT_INTERVAL_S` (and when partitions leave the
  process or it stops); a crash copies again what it had not committed, and the copies'
  duplicates are skipped downstream like any replay (the delivery log knows each webhook
  id sent).

Nothing here loads Spark.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import zlib
from collections.abc import Sequence
from contextlib import AbstractContextManager

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from wayline.core.errors import RetryLater
from wayline.core.kafka import KafkaRecord, ensure_topics, produce_all
from wayline.core.settings import Settings
from wayline.core.topics import delivered_topic_pattern
from wayline.delivery.runtime.processes import (
    COMMIT_INTERVAL_S,
    running_processes,
    runtime_command,
    seek_to_committed,
)

_log = logging.getLogger(__name__)

ORIGIN_TOPIC = "wayline-origin-topic"
ORIGIN_PARTITION = "wayline-origin-partition"
ORIGIN_OFFSET = "wayline-origin-offset"
ORIGIN_HEADERS = (ORIGIN_TOPIC, ORIGIN_PARTITION, ORIGIN_OFFSET)
"""Appended in this order after a record's own headers: the matching query takes the last three back off."""
FIRST_WAIT_S = 0.5
"""How long a poll waits for a first record; also how late an idle process sees a stop."""
MAX_BATCH = 10_000
"""Records copied per flush and commit at most: the flush's round trip is shared by all."""
GATHER_S = 0.02
"""When the intake's fetches are answered at the first byte (:data:`HELD_FETCH_MAX_PARTITIONS`),
how long after a first record more are gathered into its copy, unless :data:`MAX_BATCH` come
sooner: without it each copy, flush and commit would carry a record or two. A held fetch
brings its batch whole, so then a copy takes what has come and waits for nothing more."""
HELD_FETCH_MAX_PARTITIONS = 100
"""Up to this many source partitions the intake's fetches are held as every stream reader's
are (``kafka.stream_fetch_min_bytes`` or ``stream_fetch_max_wait_ms``); over it they are
answered at the first byte. The broker holds a fetch until enough bytes are there, and on
each append to any partition it names, checks all of them under the fetch's lock: the cost
grows with the partitions. Held over 500 topics, the broker appended the events of Wayline's
300/s runs 2.2–6.8 s late at the p99 (four runs; the plain sender's beside: 0.04–0.4 s); at
the first byte, 0.06–0.07 s (two runs). Over the demo's 40 partitions the held fetch did
no such thing, and answered at the first byte the intake took 0.18 CPU s per 1,000 events
at 300/s, which put Wayline at 2.10× the plain sender's CPU against 1.97× held
(docs/benchmarks.md, issue 25, "The 500-topic stall, second look")."""
SESSION_TIMEOUT_MS = 10_000
"""A process that died (kill -9) keeps its partitions this long before the group moves them."""
METADATA_REFRESH_MS = 5_000
"""A topic created later is found, and copied from its start, within this long."""
FAILED_COPY_PAUSE_S = 1.0
INTAKE_COMMAND = runtime_command("intake")


def uses_intake(settings: Settings, partitions: int, cores: int) -> bool:
    """Whether the matching query reads the intake topic: ``delivery.intake``, or for
    ``auto`` exactly where the real-time trigger could not hold the ``partitions`` of the
    source topics on ``cores`` (a task each and one to spare; cf. ``chosen_trigger``)."""
    asked = settings.delivery.intake
    if asked != "auto":
        return asked == "on"
    return partitions + 1 > cores


def intake_partitions(settings: Settings, cores: int) -> int:
    """Partitions of the intake topic: ``delivery.intake_partitions``, or what the
    real-time trigger holds on ``cores`` with one to spare."""
    return settings.delivery.intake_partitions or max(1, cores - 1)


def source_partitions(client: Producer, settings: Settings) -> int:
    """How many partitions the delivered topics have now (a topic created later is read, but
    not counted, until the process starts again)."""
    pattern = re.compile(delivered_topic_pattern(settings))
    try:
        topics = client.list_topics(timeout=10).topics
    except KafkaException as exc:
        raise RetryLater(f"Kafka at {settings.kafka_bootstrap()} did not list its topics: {exc}") from exc
    return sum(len(topic.partitions) for name, topic in topics.items() if pattern.match(name))


def intake_fetch(settings: Settings, partitions: int) -> dict[str, int]:
    """The intake consumer's fetch settings over ``partitions`` source partitions
    (:data:`HELD_FETCH_MAX_PARTITIONS`)."""
    if partitions <= HELD_FETCH_MAX_PARTITIONS:
        return settings.kafka.stream_fetch()
    return {**settings.kafka.stream_fetch(), "fetch.min.bytes": 1}


def ensure_intake_topic(settings: Settings, cores: int) -> None:
    ensure_topics(settings.kafka_bootstrap(), [settings.delivery.intake_topic], intake_partitions(settings, cores))


class Intake:
    """One intake process's consumer, producer and loop (see the module's doc)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        delivery = settings.delivery
        bootstrap = settings.kafka_bootstrap()
        ensure_intake_topic(settings, os.cpu_count() or 1)
        self._topic = delivery.intake_topic
        self._producer = Producer({
            "bootstrap.servers": bootstrap,
            # Retries keep each partition's order and add no copies of their own.
            "enable.idempotence": True,
            "linger.ms": settings.kafka.stream_linger_ms,
        })
        fetch = intake_fetch(settings, source_partitions(self._producer, settings))
        self._gather_s = GATHER_S if fetch["fetch.min.bytes"] == 1 else 0.0
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": delivery.intake_group,
            "client.id": f"wayline-intake-{os.getpid()}",
            "enable.auto.commit": False,
            # Where the matching query starts on a new checkpoint; a topic created later is
            # read from its start, as Spark reads a partition it discovers.
            "auto.offset.reset": "latest" if settings.kafka.starting_offsets == "latest" else "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "topic.metadata.refresh.interval.ms": METADATA_REFRESH_MS,
            **fetch,
        })
        try:
            self._partitions = len(self._consumer.list_topics(self._topic, timeout=10).topics[self._topic].partitions)
        except KafkaException as exc:
            raise RetryLater(f"Kafka at {bootstrap} did not describe {self._topic}: {exc}") from exc
        # A larger copy would be refused by Kafka and block the partition for good. Such a
        # value is quarantined as oversize either way, by reference to the original.
        self._max_value = settings.kafka.quarantine_max_bytes
        self._keyless: dict[tuple[str, int], int] = {}
        self._copied: dict[tuple[str, int], int] = {}
        """Per partition, the offset after the last record copied and acknowledged, not yet committed."""
        self._committed_at = time.monotonic()
        self._consumer.subscribe([delivered_topic_pattern(settings)], on_revoke=self._revoked, on_lost=self._lost)

    def run(self, stop: threading.Event) -> None:
        """Copy until ``stop`` is set; the batch in progress is then finished and committed."""
        while not stop.is_set():
            first = self._consumer.poll(FIRST_WAIT_S)
            if first is None:
                self._commit_due()
                continue
            records = [first, *self._consumer.consume(MAX_BATCH - 1, self._gather_s)]
            try:
                self.copy(records)
            except RetryLater as exc:
                _log.warning("a copy of %d records failed, taking them again in %g s: %s", len(records),
                             FAILED_COPY_PAUSE_S, exc)
                seek_to_committed(self._consumer, "the source topics")
                stop.wait(FAILED_COPY_PAUSE_S)

    def copy(self, records: Sequence[Message]) -> None:
        """Produce ``records``' copies and wait until Kafka acknowledged every one; commit when due."""
        copies: list[KafkaRecord] = []
        ends: dict[tuple[str, int], int] = {}
        for record in records:
            if record.error() is not None:
                _log.warning("source topics: %s", record.error())
                continue
            topic, partition, offset = record.topic(), record.partition(), record.offset()
            key, value = record.key(), record.value()
            if value is not None and len(value) > self._max_value:
                value = value[:self._max_value + 1]
            copies.append(KafkaRecord(
                self._topic, key, value,
                [*(record.headers() or ()), (ORIGIN_TOPIC, topic.encode()), (ORIGIN_PARTITION, str(partition).encode()),
                 (ORIGIN_OFFSET, str(offset).encode())],
                -1 if key is not None else self._keyless_partition(topic, partition),
                max(record.timestamp()[1], 0),
            ))
            ends[(topic, partition)] = offset + 1
        produce_all(self._producer, copies)
        self._copied.update(ends)
        self._commit_due()

    def _keyless_partition(self, topic: str, partition: int) -> int:
        origin = (topic, partition)
        found = self._keyless.get(origin)
        if found is None:
            found = self._keyless[origin] = zlib.crc32(f"{topic}/{partition}".encode()) % self._partitions
        return found

    def _commit_due(self) -> None:
        if self._copied and time.monotonic() - self._committed_at >= COMMIT_INTERVAL_S:
            self._commit(set(self._copied))

    def _commit(self, partitions: set[tuple[str, int]]) -> None:
        """Commit what is copied of ``partitions``."""
        # A partition revoked while its records were fetched is its next owner's: it copies
        # them again from the last commit.
        assigned = {(p.topic, p.partition) for p in self._consumer.assignment()}
        offsets = [TopicPartition(topic, partition, self._copied.pop((topic, partition)))
                   for topic, partition in partitions & self._copied.keys() if (topic, partition) in assigned]
        self._committed_at = time.monotonic()
        if not offsets:
            return
        try:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            # The copies are made: a restart or the partition's next owner copies them again.
            _log.warning("could not commit the source topics' offsets: %s", exc)

    def _revoked(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Commit what is copied of the partitions leaving this process (called inside poll,
        between copies: everything copied is acknowledged)."""
        self._commit({(p.topic, p.partition) for p in partitions})
        self._lost(_consumer, partitions)

    def _lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for p in partitions:
            self._copied.pop((p.topic, p.partition), None)

    def close(self) -> None:
        """Commit what is copied and leave the group (its partitions move at once)."""
        try:
            self._commit(set(self._copied))
            self._consumer.close()
        finally:
            self._producer.flush(10)


def run_intake(settings: Settings, stop: threading.Event) -> None:
    """Run one intake process's loop until ``stop``; then finish, commit and close."""
    intake = Intake(settings)
    try:
        intake.run(stop)
    finally:
        intake.close()


def running_intake(settings: Settings) -> AbstractContextManager[list[int]]:
    """``delivery.intake_processes`` intake processes (``wayline run intake``), stopped on
    the way out (:func:`~wayline.delivery.runtime.processes.running_processes`); yields their pids."""
    return running_processes(INTAKE_COMMAND, settings.delivery.intake_processes, "intake")


__all__ = [
    "FAILED_COPY_PAUSE_S", "FIRST_WAIT_S", "GATHER_S", "HELD_FETCH_MAX_PARTITIONS", "INTAKE_COMMAND", "MAX_BATCH", "METADATA_REFRESH_MS", "ORIGIN_HEADERS",
    "ORIGIN_OFFSET", "ORIGIN_PARTITION", "ORIGIN_TOPIC", "SESSION_TIMEOUT_MS", "Intake", "ensure_intake_topic",
    "intake_fetch", "intake_partitions", "run_intake", "running_intake", "source_partitions", "uses_intake",
]
