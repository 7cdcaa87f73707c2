"""Wayline's own events: an endpoint was disabled, a message was dead-lettered.

They are CloudEvents 1.0 on ``delivery.operations_topic``, which sits under the event
topic prefix, so the delivery job matches them like any other event and a customer can
have them delivered to an operations endpoint. The customer's id is the ``tenantid``, and
the registry routes these types by it: a subscription to them receives its own customer's
events and no one else's (``wayline.registry.snapshot``).

Their ids start with :data:`OPERATIONS_ID_PREFIX`. A dead-lettered operational event does
not announce itself again: an operations endpoint that is down would otherwise feed an
endless chain of announcements about announcements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import orjson
from confluent_kafka import KafkaException, Producer

from wayline.core.errors import RetryLater
from wayline.core.kafka import KafkaRecord, produce_all
from wayline.delivery.storage.drain import Buried, Failing
from wayline.registry.catalog import ENDPOINT_DISABLED, MESSAGE_DEAD_LETTERED

OPERATIONS_ID_PREFIX = "wlop_"
SOURCE = "/wayline/delivery"


@dataclass(frozen=True, slots=True)
class OperationalEvent:
    topic_key: str
    """The Kafka key: the customer, so one customer's events stay in order."""
    value: bytes


def _event(event_id: str, event_type: str, customer_id: str, at: datetime, data: dict[str, object]) -> OperationalEvent:
    body = {
        "specversion": "1.0", "id": f"{OPERATIONS_ID_PREFIX}{event_id}", "source": SOURCE, "type": event_type,
        "time": at.isoformat(), "tenantid": customer_id, "datacontenttype": "application/json", "data": data,
    }
    return OperationalEvent(customer_id, orjson.dumps(body))


def dead_lettered_events(buried: Sequence[Buried]) -> list[OperationalEvent]:
    """One event per new dead letter whose customer is known, operational events excepted."""
    return [
        _event(b.dead_letter_id, MESSAGE_DEAD_LETTERED, b.customer_id, b.dead_at, {
            "dead_letter_id": b.dead_letter_id, "webhook_id": b.webhook_id, "endpoint_id": b.endpoint_id,
            "subscription_id": b.subscription_id, "event_ids": list(b.event_ids), "reason": b.reason,
            "attempts": b.attempts, "last_error": b.last_error,
        })
        for b in buried
        if b.customer_id is not None and not all(e.startswith(OPERATIONS_ID_PREFIX) for e in b.event_ids)
    ]


def endpoint_disabled_event(failing: Failing, customer_id: str, reason: str, at: datetime) -> OperationalEvent:
    # The id names the endpoint and the time it was disabled: a second disabling is a new event.
    return _event(f"{failing.endpoint_id}_{int(at.timestamp())}", ENDPOINT_DISABLED, customer_id, at, {
        "endpoint_id": failing.endpoint_id, "reason": reason, "failing_since": failing.since.isoformat(),
        "last_error": failing.last_error,
    })


class OperationsProducer:
    """Produces operational events and waits until the broker has them all.

    A Kafka producer is made per call: these events are rare, and a producer kept for the
    life of a query would outlive the query (and keep reconnecting to a stopped broker).
    """

    def __init__(self, bootstrap: str, topic: str, flush_timeout_s: float = 30.0) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._flush_timeout_s = flush_timeout_s

    def publish(self, events: Sequence[OperationalEvent]) -> None:
        if not events:
            return
        try:
            producer = Producer({"bootstrap.servers": self._bootstrap, "enable.idempotence": True})
        except KafkaException as exc:
            raise RetryLater(f"could not produce operational events: {exc}") from exc
        produce_all(producer, (KafkaRecord(self._topic, event.topic_key.encode(), event.value) for event in events),
                    self._flush_timeout_s)


__all__ = [
    "OPERATIONS_ID_PREFIX",
    "SOURCE",
    "OperationalEvent",
    "OperationsProducer",
    "dead_lettered_events",
    "endpoint_disabled_event",
]
