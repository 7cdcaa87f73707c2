"""Rules deployed by records on a compacted Kafka topic, as the reference Flink engine took them.

Each record's key is the rule's name; its value is the rule as JSON (the admin API's body
without ``name``), or empty (a tombstone) to remove the rule. Compaction keeps the latest
record per name, so reading the topic from the start rebuilds the intended rule set, and
applying a record twice changes nothing (an unchanged definition keeps its revision).

A record that does not make a valid rule is not applied; it is kept in ``rejected`` with
the reason, counted, and logged — a control topic has nobody to answer a 4xx to.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import orjson
from confluent_kafka import Consumer, KafkaException, Producer
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
        self._consumer = Consumer({
            "bootstrap.servers": self.settings.kafka_bootstrap(), "group.id": self.group_id,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
        })
        self._consumer.subscribe([self.settings.rules.control_topic])

    def apply_pending(self, database: Database, max_records: int = 500, timeout_s: float = 0.0) -> int:
        """Apply what has arrived (waiting at most ``timeout_s``); returns how many records were applied."""
        try:
            messages = self._consumer.consume(max_records, timeout=timeout_s)
        except KafkaException as exc:
            raise RetryLater(f"the rules control topic could not be read: {exc}") from exc
        done = 0
        policy = rule.RulePolicy.from_settings(self.settings)
        for message in messages:
            if message.error():
                continue
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
        if messages:
            self._consumer.commit(asynchronous=False)
        self.applied += done
        return done

    def close(self) -> None:
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
