"""Reserved topics: Wayline's own and the broker's, which no API caller may write, create or delete.

Wayline's jobs trust what they read from their own topics: the senders sign and send what
the work topic holds, the operations topic's events go to the customer they name, and the
self-audit counts what the audit topics say. Whoever could write there could forge any of
it, so every API path that names a topic to write, create, delete or grant checks it here:
messaging publish (single, batch, transactional), topic grants, topic admin, rule output
topics and reconciliation output topics. Reading them (an admin polling the quarantine) is
no such risk and stays allowed to admin keys.

Reserved are the broker's own topics (``__*``), every name under ``wayline.`` and each
topic the settings name for Wayline's internal use, wherever an operator moved it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from wayline.core.errors import Forbidden, RejectedInput
from wayline.core.settings import Settings

BROKER_PREFIX = "__"
INTERNAL_PREFIX = "wayline."
# Characters that make a topic grant's pattern a glob (fnmatch).
GLOB_CHARACTERS = "*?["


def event_topic_pattern(settings: Settings) -> str:
    return "^" + re.escape(settings.kafka.event_topic_prefix) + ".*"


def delivered_topic_pattern(settings: Settings) -> str:
    """What the delivery job reads: the event topics and the rules' alert topics, whose
    events customers subscribe to like any others (the rules job reads only the former).
    Spark's Kafka source (Java's regex) and the intake processes' consumer (librdkafka's,
    which refuses ``(?:``) both take it, so it is here, apart from Spark, in the syntax
    they share."""
    prefixes = (settings.kafka.event_topic_prefix, settings.kafka.alert_topic_prefix)
    return "^(" + "|".join(map(re.escape, prefixes)) + ").*"


def matched_topic_pattern(settings: Settings) -> str:
    """What the matching query reads: with ``delivery.intake = "on"`` the intake topic
    alone, otherwise the delivered topics themselves."""
    if settings.delivery.intake == "on":
        return "^" + re.escape(settings.delivery.intake_topic) + "$"
    return delivered_topic_pattern(settings)


@dataclass(frozen=True)
class ReservedTopics:
    internal: frozenset[str]  # the settings' internal topics, wherever they are named

    @classmethod
    def from_settings(cls, settings: Settings) -> ReservedTopics:
        return cls(frozenset({
            settings.kafka.quarantine_topic,
            settings.delivery.batch_topic,
            settings.delivery.work_topic,
            settings.delivery.intake_topic,
            settings.delivery.operations_topic,
            settings.rules.control_topic,
            settings.recon.output_topic,
            settings.audit.consumed_topic,
            settings.audit.outcomes_topic,
        }))

    def reason(self, topic: str) -> str | None:
        """Why ``topic`` is reserved, or None when an API caller may use it."""
        if topic.startswith(BROKER_PREFIX):
            return f"topics named {BROKER_PREFIX}* are the Kafka broker's own (offsets, transaction state)"
        if topic.startswith(INTERNAL_PREFIX) or topic in self.internal:
            named = ", ".join(sorted(t for t in self.internal if not t.startswith(INTERNAL_PREFIX)))
            return (f"it is one of Wayline's own topics ({INTERNAL_PREFIX}*{', ' + named if named else ''}), "
                    "which only Wayline writes: its jobs trust what they read there")
        return None

    def refuse(self, topic: str, doing: str) -> None:
        """Forbidden (403) when ``topic`` is reserved: a request to ``doing`` it (publish, delete, …)."""
        reason = self.reason(topic)
        if reason is not None:
            raise Forbidden(f"topic {topic} is reserved, this API key may not {doing} it: {reason}")

    def refuse_field(self, field: str, topic: str) -> None:
        """Invalid (422) when a body's ``field`` names a reserved topic."""
        reason = self.reason(topic)
        if reason is not None:
            raise RejectedInput(f"{field}: {topic} is reserved: {reason}; choose another")

    def pattern_reason(self, pattern: str) -> str | None:
        """Why a grant's glob ``pattern`` can only ever match reserved topics, or None. A pattern
        that matches other topics too (``*``) is allowed: the reserved ones are refused at use."""
        glob_at = min((i for i, c in enumerate(pattern) if c in GLOB_CHARACTERS), default=None)
        if glob_at is None:
            return self.reason(pattern)
        literal = pattern[:glob_at]
        return self.reason(literal) if literal.startswith((BROKER_PREFIX, INTERNAL_PREFIX)) else None


__all__ = ["BROKER_PREFIX", "INTERNAL_PREFIX", "ReservedTopics", "delivered_topic_pattern", "event_topic_pattern",
           "matched_topic_pattern"]
