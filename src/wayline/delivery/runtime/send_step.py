"""The send step without Spark: a batch of work → one delivery stage and its Kafka records → counts.

Both senders run it: a Spark sending task (:class:`~wayline.pipelines.sending.PartitionSender`,
inside ``mapInArrow``, its Arrow rows read by :func:`~wayline.delivery.runtime.work_rows.work_of`)
and a sender process (:mod:`~wayline.delivery.runtime.senders`, on the records it consumed
from the work topic). One stage (:func:`~wayline.delivery.stage.run_stage`: dispatcher,
stage deadline, straggler cut and slow marks, the delivery log and retry store) for the
requests; the Kafka records written and acknowledged before it; the self-audit's outcomes
of what the stage settled acknowledged after it. Nothing here imports Spark or Arrow, so
a sender process loads neither (nor pandas, which pyarrow imports on its first
conversion of a Python list: some 115 MB of resident memory per process together).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

from wayline.core.kafka import KafkaRecord, produce_all
from wayline.core.settings import Settings
from wayline.delivery import audit
from wayline.delivery.attempt import Kind, Pending, State
from wayline.delivery.outcomes import BatchSummary
from wayline.delivery.runtime.worker import WorkerPool
from wayline.delivery.stage import StageSettings, run_stage
from wayline.delivery.targets import Target


@dataclass(frozen=True, slots=True)
class WorkRequest:
    """A request to send: one event (``single``) or a batch-mode batch (``batch``), ``body`` to ``endpoint_id``."""

    kind: Kind
    subscription_id: str
    endpoint_id: str
    event_ids: Sequence[str]
    body: bytes
    source: str | None = None
    """A single event's Kafka topic, for its self-audit outcome."""


@dataclass(frozen=True)
class Work:
    """What a batch of work holds: the requests to send, the Kafka records to write before
    them (quarantine copies, batch-mode bundles, self-audit records), and what it counts."""

    requests: list[WorkRequest] = field(default_factory=list)
    records: list[KafkaRecord] = field(default_factory=list)
    counts: BatchSummary = field(default_factory=BatchSummary)
    """Valid events, filtered, quarantined by reason, held in bundles; the send adds its deliveries."""


def send_work(
    work: Work,
    targets: Mapping[str, Target],
    settings: Settings,
    stage: StageSettings,
    pool: Callable[[], WorkerPool],
    *,
    failing: Collection[str] = frozenset(),
    gone: Collection[str] = frozenset(),
) -> BatchSummary | None:
    """Do ``work``; what happened (``work.counts`` with the deliveries and phase times
    added), or ``None`` when there was nothing to do. ``pool`` is asked for only then.
    Requests to the ``failing`` endpoints go to the retry path unsent; those of the
    ``gone`` subscriptions are dead-lettered unsent."""
    now = datetime.now(timezone.utc)
    summary = work.counts
    if not (work.requests or work.records or summary.events):
        return None
    kept = pool()
    started = time.perf_counter()
    if work.records:
        # Acknowledged before the stage: a quarantine copy, bundle or consumed-audit
        # record is never lost to a failed send.
        produce_all(kept.producer, work.records)
        summary.phase_seconds["records"] += time.perf_counter() - started
    if work.requests:
        started = time.perf_counter()
        pendings = [Pending.first(r.kind, r.event_ids, r.body, subscription_id=r.subscription_id,
                                  endpoint_id=r.endpoint_id, now=now) for r in work.requests]
        # Each single event's Kafka topic, for its audit outcome.
        topics = {r.event_ids[0]: r.source for r in work.requests if r.source is not None}
        settled: list[State] = []
        summary.deliveries = run_stage(pendings, targets, kept.store, kept.transport, stage, failing=failing,
                                       gone=gone, run=kept.run, on_settled=settled.extend)
        write_outcomes(kept, settings, settled, topics, settings.delivery.batch_topic)
        summary.phase_seconds["send"] += time.perf_counter() - started
    return summary


def write_outcomes(pool: WorkerPool, settings: Settings, states: Sequence[State], topics: Mapping[str, str],
                   otherwise: str) -> None:
    """The self-audit's outcome records of the final ``states``, acknowledged (with ``audit.enabled``)."""
    if settings.audit.enabled:
        outcomes = audit.outcome_events(states, topics, otherwise, datetime.now(timezone.utc))
        produce_all(pool.producer, (KafkaRecord(settings.audit.outcomes_topic, key, value) for key, value in outcomes))


__all__ = ["Work", "WorkRequest", "send_work", "write_outcomes"]
