"""Rules deployed by records on a compacted Kafka topic, as the reference Flink engine took them.

Each record's key is the rule's name; its value is the rule as JSON (the admin API's body
without ``name``), or empty (a tombstone) to remove the rule. Compaction keeps the latest
record per name, so reading the topic from the start rebuilds the intended rule set, and
applying a record twice changes nothing (an unchanged definition keeps its revision).

A record that does not make a valid rule is not applied; it is kept in ``rejected`` with
the reason, counted, and logged — a control topic has nobody to answer a 4xx to.

The job applies records before each micro-batch, and an idle job runs none; librdkafka takes
a consumer not polled for ``max.poll.interval.ms`` out of its group. So a thread polls the
consumer while nobody else does, holding what it reads for the next ``apply_pending``;
and a poll that brings only errors (such as having left the group) commits nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from pydantic import ValidationError

from wayline.core.errors import RejectedInput, RetryLater
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.registry import rule
from wayline.registry.access import ADMIN
from wayline.registry.db import Database

log = logging.getLogger(__name__)


@dataclass
class ControlTopic:
    """Applies the control topic's new records to the registry, between micro-batches."""

    settings: Settings
    group_id: str = "wayline-rules-control"
    applied: int = 0
    rejected: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        ensure_topics(self.settings.kafka_bootstrap(), [self.settings.rules.control_topic], 1,
                      {"cleanup.policy": "compact"})
        interval_ms = round(self.settings.rules.control_max_poll_interval_s * 1000)
        self._consumer = Consumer({
            "bootstrap.servers": self.settings.kafka_bootstrap(), "group.id": self.group_id,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "max.poll.interval.ms": interval_ms,
            "session.timeout.ms": min(interval_ms, 45_000),
        })
        self._consumer.subscribe([self.settings.rules.control_topic])
        self._lock = threading.Lock()
        self._held: list[Message] = []
        self._polled_at = time.monotonic()
        self._closed = threading.Event()
        self._keeper = threading.Thread(target=self._keep_in_group, name="wayline-rules-control", daemon=True)
        self._keeper.start()

    def _poll(self, max_records: int, timeout_s: float) -> list[Message]:
        """The records a poll brings (its errors are logged); call with the lock held."""
        try:
            messages = self._consumer.consume(max_records, timeout=timeout_s)
        except KafkaException as exc:
            raise RetryLater(f"the rules control topic could not be read: {exc}") from exc
        self._polled_at = time.monotonic()
        for message in messages:
            if message.error():
                log.warning("rules control topic: %s", message.error())
        return [message for message in messages if not message.error()]

    def _keep_in_group(self) -> None:
        period = self.settings.rules.control_max_poll_interval_s / 3
        while not self._closed.wait(period / 4):
            with self._lock:
                if self._closed.is_set() or time.monotonic() - self._polled_at < period:
                    continue
                try:
                    self._held += self._poll(500, 0)
                except RetryLater as exc:  # the job's next apply_pending meets it, and fails there
                    log.warning("%s", exc)

    def apply_pending(self, database: Database, max_records: int = 500, timeout_s: float = 0.0) -> int:
        """Apply what has arrived (waiting at most ``timeout_s``); returns how many records were applied."""
        with self._lock:
            messages, self._held = self._held + self._poll(max_records, timeout_s), []
            done = self._apply(database, messages)
            if messages:
                self._commit()
        self.applied += done
        return done

    def _commit(self) -> None:
        try:
            self._consumer.commit(asynchronous=False)
        except KafkaException as exc:
            # Not committed, the records are read and applied again, which changes nothing.
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                log.warning("rules control topic: the commit failed (%s); the records will be applied again", exc)

    def _apply(self, database: Database, messages: list[Message]) -> int:
        done = 0
        policy = rule.RulePolicy.from_settings(self.settings)
        for message in messages:
            name = (message.key() or b"").decode(errors="replace")
            try:
                with database.transaction() as session:
                    if not message.value():
                        rule.delete_by_name(session, ADMIN, name)
                    else:
                        body = rule.RuleIn.model_validate({**orjson.loads(message.value()), "name": name})
                        rule.upsert(session, ADMIN, body, policy)
                done += 1
            except (RejectedInput, ValidationError, orjson.JSONDecodeError) as exc:
                reason = str(exc).splitlines()[0]
                self.rejected.append((name, reason))
                log.warning("control record for rule %r rejected: %s", name, reason)
        return done

    def close(self) -> None:
        self._closed.set()
        self._keeper.join()
        with self._lock:
            self._consumer.close()


def publish(settings: Settings, name: str, definition: dict[str, object] | None) -> None:
    """Write one control record (``None``: remove the rule)."""
    ensure_topics(settings.kafka_bootstrap(), [settings.rules.control_topic], 1, {"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap()})
    producer.produce(settings.rules.control_topic, key=name.encode(),
                     value=None if definition is None else orjson.dumps(definition))
    if producer.flush(30):
        raise RetryLater("the control record was not acknowledged within 30 s")


__all__ = ["ControlTopic", "publish"]
