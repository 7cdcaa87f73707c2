"""Thin wrappers over confluent-kafka that every part uses; its errors stop here."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from wayline.core.errors import RetryLater


def ensure_topics(bootstrap: str, names: Iterable[str], partitions: int, config: dict[str, str] | None = None) -> list[str]:
    """Create the topics that do not exist yet; returns the ones created."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        existing = set(admin.list_topics(timeout=10).topics)
    except KafkaException as exc:
        raise RetryLater(f"Kafka at {bootstrap} did not answer: {exc}") from exc
    missing = sorted(set(names) - existing)
    if not missing:
        return []
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {}) for name in missing]
    )
    for name, future in futures.items():
        try:
            future.result(timeout=30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise RetryLater(f"could not create topic {name}: {exc}") from exc
    return missing


__all__ = ["ensure_topics"]
