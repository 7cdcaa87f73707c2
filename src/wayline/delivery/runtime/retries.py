"""`wayline run retries`: the loop that drains the retry store, buries the dead and
disables endpoints that have failed for too long. A plain process, like the sender
processes: no Spark, no JVM.

Every ``delivery.retry_poll_s`` (at once again while a claim came back full), one pass:

1. if any entry is due, claims up to ``delivery.retry_claim_limit`` due entries from
   PostgreSQL (leased, ``SKIP LOCKED``), attempts them through the same stage pieces as
   the main path, with targets from the process's own registry snapshot, and settles them
   (:mod:`wayline.delivery.storage.drain`), then writes their self-audit outcomes;
2. disables the subscriptions whose endpoint answered 410;
3. moves the entries no attempt is left for into the dead-letter store, and announces
   each on the operations topic before that move commits;
4. disables endpoints whose retries have failed for ``delivery.disable_after_s``, with the
   reason, announced the same way;
5. every ten minutes, deletes delivery history older than ``delivery.history_retention_s``
   and dead letters older than ``delivery.dead_letter_retention_s``, in small batches.

Why a plain process and not a Spark query: the drain's work is HTTP requests and
PostgreSQL transactions, which a Spark query only wrapped in a JVM of its own, a task per
shard and a micro-batch every poll (docs/decisions.md, "The retry drain without Spark").
Why PostgreSQL and not a Kafka retry topic: docs/decisions.md, "Retries and dead letters".
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from confluent_kafka import KafkaException

from wayline.core.errors import RejectedInput, WaylineError
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.delivery.attempt import State
from wayline.delivery.audit import RETRIES
from wayline.delivery.holder import SnapshotHolder
from wayline.delivery.metrics import DeliveryMetrics
from wayline.delivery.operations import OperationsProducer, dead_lettered_events, endpoint_disabled_event
from wayline.delivery.outcomes import BatchSummary
from wayline.delivery.runtime.registry_changes import DELIVERY_CALLER, disable_gone
from wayline.delivery.runtime.send_step import write_outcomes
from wayline.delivery.runtime.senders import load_sender_snapshot
from wayline.delivery.runtime.worker import WorkerPool
from wayline.delivery.stage import StageSettings
from wayline.delivery.storage.drain import Failing, RetryQueue, run_retry_stage
from wayline.registry.db import Database
from wayline.registry.endpoint import EndpointPatch, EndpointService

_log = logging.getLogger(__name__)

# Dead entries moved per transaction; the rest wait for the next pass.
BURY_LIMIT = 5000
# Rows of each table deleted per retention transaction, and how often retention runs.
EXPIRE_LIMIT = 10_000
RETENTION_POLL_S = 600.0
FAILED_PASS_PAUSE_S = 1.0


def disable_failing(database: Database, endpoints: EndpointService, failing: Failing, failing_for: timedelta,
                    producer: OperationsProducer, now: datetime) -> None:
    """Disable one endpoint that keeps failing; the announcement goes out before the change commits."""
    days = failing_for.total_seconds() / 86_400
    reason = (f"disabled automatically: every delivery has failed since {failing.since:%Y-%m-%d %H:%M} UTC "
              f"(over {days:g} days); last error: {failing.last_error}")[:500]
    try:
        with database.transaction() as session:
            disabled = endpoints.update(session, DELIVERY_CALLER, failing.endpoint_id,
                                        EndpointPatch(enabled=False, disabled_reason=reason))
            producer.publish([endpoint_disabled_event(failing, disabled.customer_id, reason, now)])
    except RejectedInput as exc:
        _log.warning("could not disable failing endpoint %s: %s", failing.endpoint_id, exc)
    else:
        _log.warning("disabled endpoint %s: %s", failing.endpoint_id, reason)


class RetryDrain:
    """The retry path's passes, with the registry snapshot they keep between passes."""

    def __init__(self, settings: Settings, database: Database, endpoints: EndpointService,
                 metrics: DeliveryMetrics | None = None) -> None:
        delivery = settings.delivery
        self._settings = settings
        self._database = database
        self._endpoints = endpoints
        self._metrics = metrics
        self._holder = SnapshotHolder(load=lambda: load_sender_snapshot(database, endpoints),
                                      version=database.current_version, poll_s=delivery.version_poll_s)
        self._holder.current()  # a registry that cannot be read is an error at start, not in the loop
        bootstrap = settings.kafka_bootstrap()
        ensure_topics(bootstrap, [delivery.operations_topic], settings.kafka.topic_partitions)
        if settings.audit.enabled:  # the self-audit's outcomes of what this path settles
            ensure_topics(bootstrap, [settings.audit.outcomes_topic], settings.kafka.topic_partitions)
        self._producer = OperationsProducer(bootstrap, delivery.operations_topic)
        self._queue = RetryQueue(database.engine)
        # The slow endpoints the main path cuts as stragglers are this path's work: it waits
        # for them until the deadline.
        self._stage = replace(StageSettings.from_settings(delivery), straggler_cut_s=None)
        self._lease = timedelta(seconds=delivery.retry_lease_s)
        self._expire_at = 0.0  # monotonic time of the next retention pass

    def run(self, stop: threading.Event) -> None:
        """Pass after pass until ``stop`` is set; the pass in progress finishes first."""
        # Made on the thread that runs the passes: its event loop is that thread's.
        pool = WorkerPool(self._settings)
        try:
            while not stop.is_set():
                try:
                    full = self.drain(pool)
                    self.tidy()
                except (WaylineError, KafkaException) as exc:
                    # Claims taken in a failed pass come back when their lease runs out.
                    _log.warning("a retry pass failed, trying again in %g s: %s", FAILED_PASS_PAUSE_S, exc)
                    stop.wait(FAILED_PASS_PAUSE_S)
                else:
                    if not full:
                        stop.wait(self._settings.delivery.retry_poll_s)
        finally:
            pool.close()

    def drain(self, pool: WorkerPool) -> bool:
        """Attempt and settle one claim of due entries with ``pool``'s transport; whether the
        claim was full (more are due)."""
        queue = self._queue
        if not queue.any_due(datetime.now(timezone.utc)):  # one index probe when idle
            return False
        limit = self._settings.delivery.retry_claim_limit
        # One claimant holds every endpoint: an endpoint's in-flight and rate limits hold
        # within its stage, as on the main path.
        claims = queue.claim(0, 1, limit, self._lease, datetime.now(timezone.utc))
        snapshot = self._holder.current()
        settled: list[State] = []
        tally = run_retry_stage(claims, snapshot.targets, queue, pool.transport, self._stage,
                                run=pool.run, on_settled=settled.extend)
        write_outcomes(pool, self._settings, settled, {}, RETRIES)
        if self._metrics is not None:
            self._metrics.add(BatchSummary(deliveries=tally, registry_version=snapshot.version))
        gone = tally.gone_subscriptions()
        if gone:
            disable_gone(self._database, gone)
            self._holder.refresh()
        return len(claims) == limit

    def tidy(self) -> None:
        """Bury the exhausted, disable endpoints failing too long and, every ten minutes, expire old history."""
        delivery = self._settings.delivery
        queue = self._queue
        now = datetime.now(timezone.utc)
        announce = self._producer.publish
        while len(queue.bury(BURY_LIMIT, now, lambda buried: announce(dead_lettered_events(buried)))) == BURY_LIMIT:
            pass
        failing_for = timedelta(seconds=delivery.disable_after_s)
        for failing in queue.failing_endpoints(failing_for, now):
            disable_failing(self._database, self._endpoints, failing, failing_for, self._producer, now)
        if time.monotonic() >= self._expire_at:
            self._expire_at = time.monotonic() + RETENTION_POLL_S
            while queue.expire(now - timedelta(seconds=delivery.history_retention_s),
                               now - timedelta(seconds=delivery.dead_letter_retention_s), EXPIRE_LIMIT):
                pass

class RunningRetries:
    """A :class:`RetryDrain` running on its own thread until :meth:`stop`, watched like a
    Spark query (``isActive``, ``exception()``, ``stop()``): `wayline run retries` shows
    it in a live view, and ``make demo`` runs it beside the delivery job in one process."""

    def __init__(self, drain: RetryDrain) -> None:
        self._drain = drain
        self._stop = threading.Event()
        self._failure: Exception | None = None
        self._thread = threading.Thread(target=self._run, name="wayline-retries", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._drain.run(self._stop)
        except Exception as exc:  # handed to whoever watches, as a failed query's exception is
            self._failure = exc
            _log.exception("the retry drain failed")

    @property
    def isActive(self) -> bool:  # the name Spark's StreamingQuery gives it
        return self._thread.is_alive()

    def exception(self) -> Exception | None:
        return self._failure

    def stop(self) -> None:
        """Finish the pass in progress, then close the pools."""
        self._stop.set()
        self._thread.join()


def start_retries(settings: Settings, database: Database, endpoints: EndpointService,
                  metrics: DeliveryMetrics | None = None) -> RunningRetries:
    """Start the retry drain (its first snapshot is loaded here, so a bad registry fails now)."""
    return RunningRetries(RetryDrain(settings, database, endpoints, metrics))


__all__ = [
    "BURY_LIMIT", "EXPIRE_LIMIT", "FAILED_PASS_PAUSE_S", "RETENTION_POLL_S", "RetryDrain", "RunningRetries",
    "disable_failing", "start_retries",
]
