"""Topic admin for the messaging API: create, describe, list, delete (admin keys only).
Reserved topics (`wayline.core.topics`) can be described, never created or deleted."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec
from pydantic import BaseModel, ConfigDict, Field

from wayline.core.errors import Conflict, NotFound, RejectedInput, RetryLater
from wayline.core.topics import ReservedTopics
from wayline.messaging.wire import PartitionOut, TopicOut

TOPIC_PATTERN = r"^[A-Za-z0-9._-]{1,249}$"
TIMEOUT_S = 30


class TopicIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=TOPIC_PATTERN)
    partitions: int = Field(default=2, ge=1, le=1000)
    retention_ms: int | None = Field(
        default=None, ge=-1, description="-1 keeps records forever; unset: the broker's default"
    )


class TopicAdmin:
    def __init__(self, bootstrap: str, reserved: ReservedTopics) -> None:
        self._admin = AdminClient({"bootstrap.servers": bootstrap})
        self._reserved = reserved

    def create(self, body: TopicIn) -> TopicOut:
        self._reserved.refuse(body.name, "create")
        config = {"retention.ms": str(body.retention_ms)} if body.retention_ms is not None else {}
        future = self._admin.create_topics(
            [NewTopic(body.name, num_partitions=body.partitions, replication_factor=1, config=config)]
        )[body.name]
        try:
            future.result(timeout=TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                raise Conflict(f"topic {body.name} already exists") from exc
            if not error.retriable():
                raise RejectedInput(f"topic {body.name}: {error.str()}") from exc
            raise RetryLater(f"could not create topic {body.name}: {error.str()}") from exc
        # A new topic's partitions get their leaders a moment after the create returns.
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                return self.describe(body.name)
            except (NotFound, RetryLater):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def names(self) -> list[str]:
        try:
            topics = self._admin.list_topics(timeout=TIMEOUT_S).topics
        except KafkaException as exc:
            raise RetryLater(f"Kafka did not answer: {exc}") from exc
        return sorted(name for name in topics if not name.startswith("__"))

    def describe(self, name: str) -> TopicOut:
        try:
            metadata = self._admin.list_topics(name, timeout=TIMEOUT_S).topics.get(name)
            if metadata is None or metadata.error is not None or not metadata.partitions:
                raise NotFound(f"topic {name} not found")
            partitions = sorted(metadata.partitions)
            earliest = self._offsets(name, partitions, OffsetSpec.earliest())
            latest = self._offsets(name, partitions, OffsetSpec.latest())
            resource = ConfigResource(ConfigResource.Type.TOPIC, name)
            config = self._admin.describe_configs([resource])[resource].result(timeout=TIMEOUT_S)
        except KafkaException as exc:
            raise RetryLater(f"Kafka did not answer about topic {name}: {exc}") from exc
        retention = config.get("retention.ms")
        return TopicOut(
            name=name,
            partitions=[PartitionOut(partition=p, earliest_offset=earliest[p], latest_offset=latest[p])
                        for p in partitions],
            retention_ms=int(retention.value) if retention is not None and retention.value is not None else None,
            records=sum(latest[p] - earliest[p] for p in partitions),
        )

    def delete(self, name: str) -> None:
        self._reserved.refuse(name, "delete")
        future = self._admin.delete_topics([name], operation_timeout=TIMEOUT_S)[name]
        try:
            future.result(timeout=TIMEOUT_S)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise NotFound(f"topic {name} not found") from exc
            raise RetryLater(f"could not delete topic {name}: {exc.args[0].str()}") from exc

    def _offsets(self, name: str, partitions: list[int], spec: OffsetSpec) -> dict[int, int]:
        futures = self._admin.list_offsets({TopicPartition(name, p): spec for p in partitions})
        return {tp.partition: future.result(timeout=TIMEOUT_S).offset for tp, future in futures.items()}


__all__ = ["TOPIC_PATTERN", "TopicAdmin", "TopicIn"]
