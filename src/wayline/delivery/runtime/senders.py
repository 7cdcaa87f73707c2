"""Sender processes: long-lived Python processes that send what the matching query routed.

With ``delivery.engine = "senders"`` a JVM-only matching query writes each request to
``delivery.work_topic`` (the record's format: :mod:`wayline.delivery.work`). Each sender
process is a member of the consumer group ``delivery.sender_group`` on that topic
(cooperative-sticky assignment, so processes share its partitions and a rebalance moves
only what must move). Its loop:

1. **poll**: wait up to :data:`FIRST_WAIT_S` (less when an open batch is due sooner) for
   one record, then take at once whatever else the client has fetched, up to
   :data:`MAX_BATCH`. The broker answers a fetch once ``kafka.stream_fetch_min_bytes`` are
   ready or after ``kafka.stream_fetch_max_wait_ms``, so an idle process sends a lone
   record that much later at most, not one poll per record of a thin stream; a busy one
   finds the next batch already fetched (librdkafka fetches in the background while a
   stage runs), so batches grow with the load and nothing waits to fill one;
2. **decode** the records into requests and batch-mode pairs (:func:`decode`); a record
   that breaks the contract is quarantined with its reason, counted, and never stops the
   process;
3. **gather** the pairs into their subscriptions' open batches
   (:class:`~wayline.delivery.open_batches.OpenBatches`, in memory), which hand back the
   batches that are full or whose ``max_wait`` has passed;
4. **send** the requests and ready batches with the send step the Spark sending tasks run
   (:func:`~wayline.delivery.runtime.send_step.send_work`): the same stage, dispatcher,
   deadline, straggler cut, delivery log, retry store and self-audit outcomes, with
   targets from the process's own registry snapshot;
5. **commit** offsets, synchronously, only once the outcomes are recorded, never past a
   pair an open batch still holds, and at most every
   :data:`~wayline.delivery.runtime.processes.COMMIT_INTERVAL_S` (and when partitions
   leave the process or it stops): a crash resends at most what was consumed but not
   committed, gathers the open batches' pairs again, and the stage's ``settled`` check
   skips every request whose outcome was recorded (at-least-once, the same webhook id on
   every attempt).

The transport, database pool and producer are one :class:`~wayline.delivery.runtime.worker.WorkerPool`
for the process's life. Nothing here loads Spark.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from wayline.core.envelope import (
    DETAIL_HEADER,
    REASON_HEADER,
    SOURCE_OFFSET_HEADER,
    SOURCE_PARTITION_HEADER,
    SOURCE_TOPIC_HEADER,
)
from wayline.core.errors import WaylineError
from wayline.core.kafka import KafkaRecord, ensure_topics
from wayline.core.settings import Settings
from wayline.delivery import work
from wayline.delivery.attempt import Kind
from wayline.delivery.batch import BatchItem, BatchLimits
from wayline.delivery.holder import Polled, SnapshotHolder
from wayline.delivery.metrics import DeliveryMetrics
from wayline.delivery.open_batches import HeldPair, OpenBatches, Partition, ReadyBatch
from wayline.delivery.outcomes import Outcome
from wayline.delivery.runtime.processes import (
    COMMIT_INTERVAL_S,
    running_processes,
    runtime_command,
    seek_to_committed,
)
from wayline.delivery.runtime.registry_changes import disable_gone
from wayline.delivery.runtime.send_step import Work, WorkRequest, send_work
from wayline.delivery.runtime.worker import WorkerPool
from wayline.delivery.stage import StageSettings
from wayline.delivery.targets import Target, target_of
from wayline.registry.db import Database
from wayline.registry.endpoint import EndpointService
from wayline.registry.snapshot import load_snapshot

_log = logging.getLogger(__name__)

FIRST_WAIT_S = 0.5
"""How long a poll waits for a first record; also how late an idle process sees a stop."""
MAX_BATCH = 2000
"""Records per stage at most: a fraction of a second of work at the rate the sender
processes reach (see docs/benchmarks.md#the-sender-processes-cpu-per-request-issue-13--2026-11-24),
whose two pre-send queries and one commit are shared by all; at lower rates batches stay
far smaller (what came in while the last stage ran)."""
SESSION_TIMEOUT_MS = 10_000
"""A process that died (kill -9) keeps its partitions this long before the group moves them."""
FAILED_STAGE_PAUSE_S = 1.0
BAD_RECORD = "bad_work_record"
"""The quarantine reason of a work record that breaks the contract of :mod:`wayline.delivery.work`."""
_DEFAULT_LIMITS = BatchLimits()
"""A pair's subscription unknown to the snapshot (deleted since): batched as by default, then dead-lettered."""
_REQUIRED = (work.KIND, work.SUBSCRIPTION, work.ENDPOINT, work.EVENT, work.SOURCE, work.VERSION)


@dataclass(frozen=True)
class SenderSnapshot:
    """What a sender process needs of the registry: the targets, which subscriptions are
    live, and the batch-mode ones' limits."""

    version: int
    targets: dict[str, Target]
    subscriptions: frozenset[str]
    """Enabled subscriptions of enabled endpoints."""
    limits: dict[str, BatchLimits]


def load_sender_snapshot(database: Database, endpoints: EndpointService) -> SenderSnapshot:
    with database.transaction() as session:
        snapshot = load_snapshot(session, endpoints)
    limits = {s.id: BatchLimits.of(s.max_count, s.max_wait_ms) for s in snapshot.subscriptions.values()
              if s.mode == "batch"}
    return SenderSnapshot(snapshot.version, {e.id: target_of(e) for e in snapshot.endpoints.values()},
                          frozenset(snapshot.subscriptions), limits)


@dataclass(frozen=True)
class Decoded:
    """A poll's records as work (requests and quarantine copies) and batch-mode pairs."""

    work: Work
    """``single`` requests, and a quarantine copy per bad work record (counted)."""
    pairs: list[HeldPair]
    """Batch-mode pairs, in their partitions' order, for the open batches."""
    version: int
    """The newest registry version the requests were routed with (0: no request)."""
    subscriptions: frozenset[str]
    """The requests' and pairs' subscriptions."""

    @property
    def bad(self) -> int:
        """Work records that broke the contract, each quarantined."""
        return self.work.counts.quarantined.get(BAD_RECORD, 0)


def decode(records: Sequence[Message], quarantine_topic: str) -> Decoded:
    """``records`` of the work topic as work and pairs; each one that breaks the contract
    becomes its quarantine copy (the original key, value and headers, plus why)."""
    todo = Work()
    versions: set[str] = set()
    subscriptions: set[str] = set()
    pairs: list[HeldPair] = []
    for record in records:
        raw = record.headers() or ()
        routed = _routed(raw, record.value())
        if isinstance(routed, str):
            todo.records.append(KafkaRecord(quarantine_topic, record.key(), record.value(), [*raw, *(
                (name, text.encode()) for name, text in (
                    (REASON_HEADER, BAD_RECORD), (DETAIL_HEADER, routed), (SOURCE_TOPIC_HEADER, record.topic()),
                    (SOURCE_PARTITION_HEADER, str(record.partition())), (SOURCE_OFFSET_HEADER, str(record.offset())),
                ))]))
            todo.counts.quarantined[BAD_RECORD] += 1
            continue
        headers, value = routed
        versions.add(headers[work.VERSION])
        subscriptions.add(headers[work.SUBSCRIPTION])
        if headers[work.KIND] == work.PAIR:
            pairs.append(HeldPair((record.topic(), record.partition()), record.offset(),
                                  headers[work.SUBSCRIPTION], headers[work.ENDPOINT],
                                  BatchItem(headers[work.EVENT], value)))
        else:
            todo.requests.append(WorkRequest(Kind.SINGLE, headers[work.SUBSCRIPTION],
                                             headers[work.ENDPOINT], (headers[work.EVENT],), value,
                                             headers[work.SOURCE]))
    return Decoded(todo, pairs, max(map(int, versions), default=0), frozenset(subscriptions))


def batch_requests(ready: Sequence[ReadyBatch]) -> list[WorkRequest]:
    """Ready batches as ``batch`` requests (the CloudEvents batch body, its events' ids)."""
    return [WorkRequest(Kind.BATCH, r.batch.key.subscription_id, r.endpoint_id, r.batch.event_ids, r.batch.body)
            for r in ready]


_WANTED = frozenset(_REQUIRED)


def _routed(raw: Sequence[tuple[str, bytes | None]], value: bytes | None) -> tuple[dict[str, str], bytes] | str:
    """The contract's headers as text and the request body, or why the record breaks the contract."""
    headers, problem = _headers(raw)
    if problem is not None:
        return problem
    if value is None:
        return "the record has no value (the request body)"
    return headers, value


def _headers(raw: Sequence[tuple[str, bytes | None]]) -> tuple[dict[str, str], str | None]:
    """The contract's headers as text, or why they are not usable."""
    headers: dict[str, str] = {}
    for name, value in raw:
        if name not in _WANTED:
            continue
        if value is None:
            return headers, f"header {name} has no value"
        try:
            headers[name] = value.decode()
        except UnicodeDecodeError:
            return headers, f"header {name} is not UTF-8"
    if len(headers) < len(_REQUIRED) or not all(headers.values()):
        missing = [name for name in _REQUIRED if not headers.get(name)]
        return headers, "missing header(s): " + ", ".join(missing)
    if headers[work.KIND] not in work.KINDS:
        return headers, f"{work.KIND} is {headers[work.KIND]!r}: a sender process takes {' or '.join(work.KINDS)}"
    if not headers[work.VERSION].isdigit():
        return headers, f"{work.VERSION} is {headers[work.VERSION]!r}, not a registry version (a whole number)"
    return headers, None


class Sender:
    """One sender process's consumer, registry snapshot, open batches, pools and loop (see the module's doc)."""

    def __init__(self, settings: Settings, database: Database, metrics: DeliveryMetrics) -> None:
        delivery = settings.delivery
        self._settings = settings
        self._database = database
        self._metrics = metrics
        self._stage = StageSettings.from_settings(delivery)
        endpoints = EndpointService.from_settings(settings)
        self._holder = SnapshotHolder(load=lambda: load_sender_snapshot(database, endpoints),
                                      version=database.current_version, poll_s=delivery.version_poll_s)
        self._holder.current()  # a registry that cannot be read is an error at start, not in the loop
        ensure_work_topics(settings)
        self._pool = WorkerPool(settings)
        self._failing = Polled(self._pool.queue.failing_now if delivery.defer_failing else frozenset, frozenset(),
                               delivery.version_poll_s)
        self._open = OpenBatches(self._limits)
        self._consumed: dict[Partition, int] = {}
        """Per partition, the offset after the last record taken (sent, or gathered in an open batch)."""
        self._committed: dict[Partition, int] = {}
        self._committed_at = time.monotonic()
        self._consumer = Consumer({
            "bootstrap.servers": settings.kafka_bootstrap(),
            "group.id": delivery.sender_group,
            "client.id": f"wayline-sender-{os.getpid()}",
            "enable.auto.commit": False,
            # Work written before the group's first member joined is work too.
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            **settings.kafka.stream_fetch(),
        })
        self._consumer.subscribe([delivery.work_topic], on_revoke=self._revoked, on_lost=self._lost)

    def run(self, stop: threading.Event) -> None:
        """Send until ``stop`` is set; the stage in progress then finishes and is committed."""
        while not stop.is_set():
            first = self._consumer.poll(self._wait_s())
            records = [] if first is None else [first, *self._consumer.consume(MAX_BATCH - 1, 0)]
            usable = []
            for record in records:
                if record.error() is not None:
                    _log.warning("work topic: %s", record.error())
                else:
                    usable.append(record)
            try:
                self.send(usable)
            except (WaylineError, KafkaException) as exc:
                # Nothing committed: the work is taken again, and what it recorded is skipped.
                _log.warning("a stage of %d work records failed, retrying it in %g s: %s", len(usable),
                             FAILED_STAGE_PAUSE_S, exc)
                self._rewind()
                stop.wait(FAILED_STAGE_PAUSE_S)

    def _wait_s(self) -> float:
        """How long a poll may wait: until the next open batch is due, at most :data:`FIRST_WAIT_S`."""
        deadline = self._open.next_deadline()
        if deadline is None:
            return FIRST_WAIT_S
        return min(FIRST_WAIT_S, max(0.0, (deadline - datetime.now(timezone.utc)).total_seconds()))

    def _limits(self, subscription_id: str) -> BatchLimits:
        return self._holder.current().limits.get(subscription_id, _DEFAULT_LIMITS)

    def send(self, records: Sequence[Message]) -> None:
        """Send ``records``' requests and the batches now full or due, record their outcomes,
        then commit the offsets that no open batch still needs."""
        decoded = decode(records, self._settings.kafka.quarantine_topic)
        if decoded.bad:
            _log.warning("quarantined %d work records that break the contract (reason %s)", decoded.bad, BAD_RECORD)
        now = datetime.now(timezone.utc)
        snapshot = self._holder.current()
        if decoded.version > snapshot.version:
            # Routed with a registry newer than ours: read it before sending (or batching).
            self._holder.refresh()
            snapshot = self._holder.current()
        ready = self._open.add(decoded.pairs, now) + self._open.due(now)
        if not records and not ready:
            self._commit_due()
            return
        subscriptions = decoded.subscriptions | {r.batch.key.subscription_id for r in ready}
        # The ready batches go in the same stage as the poll's requests.
        todo = replace(decoded.work, requests=decoded.work.requests + batch_requests(ready))
        summary = send_work(todo, snapshot.targets,
                            self._settings, self._stage,
                            lambda: self._pool, failing=self._failing.current(),
                            gone=self._gone(decoded.version, subscriptions, snapshot))
        if summary is not None:
            summary.batches, summary.registry_version, summary.held = 1, snapshot.version, len(decoded.pairs)
            self._metrics.add(summary)
            retried = summary.deliveries.total(Outcome.RETRIED)
            if retried:
                # Deferred (failing or slow endpoint), cut, or refused: the retry path has them now.
                _log.info("%d of %d requests handed to the retry path", retried, len(records) + len(ready))
            gone = summary.deliveries.gone_subscriptions()
            if gone:
                disable_gone(self._database, gone)
                self._holder.refresh()
        # A partition revoked while the batch was fetched is its next owner's to commit.
        assigned = {(p.topic, p.partition) for p in self._consumer.assignment()}
        for record in records:
            partition = (record.topic(), record.partition())
            if partition in assigned:
                self._consumed[partition] = max(self._consumed.get(partition, 0), record.offset() + 1)
        self._commit_due()

    @staticmethod
    def _gone(version: int, subscriptions: frozenset[str], snapshot: SenderSnapshot) -> Collection[str]:
        """The subscriptions deleted or disabled since their work was routed: dead-lettered
        unsent, as the delivery job's stage does for a subscription the store says is gone."""
        if snapshot.version < version:
            _log.warning("registry snapshot version %d is older than the work's %d (registry unreadable?): sending "
                         "without checking for deleted subscriptions", snapshot.version, version)
            return frozenset()
        return subscriptions - snapshot.subscriptions

    def _commit_due(self) -> None:
        if time.monotonic() - self._committed_at >= COMMIT_INTERVAL_S:
            self._commit(self._consumed)

    def _commit(self, partitions: Collection[Partition]) -> None:
        """Commit ``partitions`` as far as their work is recorded and no open batch holds them back."""
        self._committed_at = time.monotonic()
        positions = {p: self._open.commit_position(p, self._consumed[p]) for p in partitions if p in self._consumed}
        offsets = [TopicPartition(topic, partition, offset) for (topic, partition), offset in positions.items()
                   if self._committed.get((topic, partition)) != offset]
        if not offsets:
            return
        try:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            # Tried again at the next commit or the revocation; if that fails too, the next
            # owner resends from the last commit and skips what is recorded.
            _log.warning("could not commit the work topic's offsets: %s", exc)
        else:
            self._committed.update(((tp.topic, tp.partition), tp.offset) for tp in offsets)

    def _rewind(self) -> None:
        """Take every assigned partition again from its last commit: the failed stage's work
        and the open batches' pairs (dropped here) are read again."""
        self._open.drop({(p.topic, p.partition) for p in self._consumer.assignment()})
        self._consumed.clear()
        seek_to_committed(self._consumer, "the work topic")
        self._committed.clear()

    def _revoked(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Commit what is recorded of the partitions leaving this process (called inside poll,
        so between stages: everything consumed so far is recorded)."""
        self._commit({(p.topic, p.partition) for p in partitions})
        self._lost(_consumer, partitions)

    def _lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        leaving = {(p.topic, p.partition) for p in partitions}
        dropped = self._open.drop(leaving)
        if dropped:
            _log.info("%d batch-mode pairs of revoked partitions left to their next owner", dropped)
        for partition in leaving:
            self._consumed.pop(partition, None)
            self._committed.pop(partition, None)

    def close(self) -> None:
        """Commit what is recorded, leave the group (its partitions move at once) and close the
        pools. Open batches are not sent: their pairs are read again by the next owner."""
        try:
            self._commit(list(self._consumed))
            self._consumer.close()
        finally:
            self._pool.close()


def ensure_work_topics(settings: Settings) -> None:
    """The work topic (``delivery.work_partitions``: at most that many processes share it) and,
    with ``audit.enabled``, the self-audit's outcome topic the processes write to."""
    bootstrap = settings.kafka_bootstrap()
    ensure_topics(bootstrap, [settings.delivery.work_topic], settings.delivery.work_partitions)
    if settings.audit.enabled:
        ensure_topics(bootstrap, [settings.audit.outcomes_topic], settings.kafka.topic_partitions)


def freeze_startup_heap() -> None:
    """Keep what start-up made (modules, pools, the registry snapshot: most of the heap)
    out of the cyclic garbage collector's full collections. Each stage leaves tens of
    thousands of objects that lived through it, so full collections come every stage or
    two, and walking the start-up heap each time was a large share of the CPU per request
    (see docs/benchmarks.md#where-the-cpu-went-before). Frozen objects are still
    freed when nothing refers to them; only a reference cycle among them outlives its use."""
    gc.collect()
    gc.freeze()


def run_sender(settings: Settings, database: Database, metrics: DeliveryMetrics, stop: threading.Event) -> None:
    """Run one sender process's loop until ``stop``; then finish, commit and close."""
    sender = Sender(settings, database, metrics)
    freeze_startup_heap()
    try:
        sender.run(stop)
    finally:
        sender.close()


SENDER_COMMAND = runtime_command("senders")


def running_senders(settings: Settings) -> AbstractContextManager[list[int]]:
    """``delivery.sender_processes`` sender processes (``wayline run senders``), stopped on
    the way out (:func:`~wayline.delivery.runtime.processes.running_processes`); yields their pids."""
    return running_processes(SENDER_COMMAND, settings.delivery.sender_processes, "sender")


__all__ = [
    "BAD_RECORD", "FAILED_STAGE_PAUSE_S", "FIRST_WAIT_S", "MAX_BATCH", "SENDER_COMMAND", "SESSION_TIMEOUT_MS",
    "Decoded", "Sender", "SenderSnapshot", "batch_requests", "decode", "ensure_work_topics", "freeze_startup_heap",
    "load_sender_snapshot", "run_sender", "running_senders",
]
