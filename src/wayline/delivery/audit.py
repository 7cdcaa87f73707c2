"""The delivery self-audit's records: what was consumed, and each consumed unit's final outcome.

The delivery job writes one *consumed* CloudEvent per unit of work it took from Kafka and
one *outcome* CloudEvent when that unit is settled for good; the built-in reconciliation
(:mod:`wayline.recon.self_audit`) matches them by ``data.record``. A unit is:

- a quarantined record: ``record`` is its ``topic/partition/offset``; consumed and outcome
  are written together;
- an (event, subscription) pair: ``record`` is ``subscription_id/event_id`` — the unit
  the delivery promise is about (a webhook id), so the same event twice on Kafka is one
  unit read twice (a duplicate on the consumed side), not two. Its outcome is written
  when the stage that sent it settles it: delivered, or dead-lettered.

``data.event_time`` is when the job consumed or settled the unit (the audit's own clock:
an event's own time may be days old in a backlog), ``data.topic`` the Kafka topic it
came from — for an outcome settled where that is no longer known (a batch, the retry
path), the batch topic or :data:`RETRIES`. The JVM builds the consumed records and the outcomes of quarantined records
(:mod:`wayline.pipelines.routing`); the sending tasks build the pairs' outcomes here.

An event no subscription wants is not a unit: its outcome is decided in the projection
that reads it, so pairing it would prove only that Kafka kept two writes, and the audit's
volume would follow every event read rather than the deliveries (docs/decisions.md, "The
self-audit follows what leaves the projection"). The delivery metrics count it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

import orjson

from wayline.delivery.attempt import DeadLettered, Gone, Pending, State, Succeeded

SOURCE = "/wayline/delivery"
TENANT = "wayline"
CONSUMED = "consumed"
OUTCOMES = "outcomes"
DELIVERED = "delivered"
DEAD_LETTERED = "dead_lettered"
QUARANTINED = "quarantined"
RETRIES = "wayline.retries"
"""``data.topic`` of the outcomes the retry path settles."""


def event_type(kind: str) -> str:
    return f"wayline.audit.{kind}"


def pair_record(subscription_id: str, event_id: str) -> str:
    return f"{subscription_id}/{event_id}"


def audit_event(kind: str, record: str, outcome: str | None, event_id: str | None, topic: str | None,
                at: datetime | str) -> bytes:
    """One audit CloudEvent; its id names the unit and the outcome, so a replay repeats it.
    ``at`` may come already in ISO 8601 (the same instant for a whole batch of outcomes)."""
    when = at if isinstance(at, str) else at.isoformat()
    data: dict[str, object] = {"record": record, "event_id": event_id, "event_time": when, "topic": topic}
    if outcome is not None:
        data["outcome"] = outcome
    return orjson.dumps({
        "specversion": "1.0", "id": f"{kind}:{record}" + (f":{outcome}" if outcome else ""), "source": SOURCE,
        "type": event_type(kind), "tenantid": TENANT, "time": when, "data": data,
    })


def final_outcome(state: State) -> tuple[Pending, str] | None:
    """The pending a settled state is about and its final outcome; None if it goes on to the retry path."""
    if isinstance(state, Succeeded):
        return state.delivered, DELIVERED
    if isinstance(state, DeadLettered | Gone):
        return state.failed, DEAD_LETTERED
    return None


def outcome_events(states: Iterable[State], topics: Mapping[str, str], otherwise: str,
                   at: datetime) -> list[tuple[bytes, bytes]]:
    """(key, value) of the outcome record of every event in the states that are final;
    ``topics`` gives each event id's Kafka topic where known, ``otherwise`` the rest's."""
    events = []
    when = at.isoformat()
    for state in states:
        final = final_outcome(state)
        if final is None:
            continue
        pending, outcome = final
        for event_id in pending.event_ids:
            record = pair_record(pending.subscription_id, event_id)
            events.append((record.encode(), audit_event(OUTCOMES, record, outcome, event_id,
                                                           topics.get(event_id, otherwise), when)))
    return events


__all__ = [
    "CONSUMED", "DEAD_LETTERED", "DELIVERED", "OUTCOMES", "QUARANTINED", "RETRIES", "SOURCE", "TENANT",
    "audit_event", "event_type", "final_outcome", "outcome_events", "pair_record",
]
