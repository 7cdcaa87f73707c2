"""Helpers for tests that run the recon job on the real broker: where the topics end, waiting
for the query to read that far, and reading an output topic back whole."""

from __future__ import annotations

import time
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from tests.waiting import wait_for


def end_offsets(bootstrap: str, topics: list[str]) -> dict[str, dict[str, int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"recon-offsets-{time.time_ns()}"})
    try:
        out = {}
        for topic in topics:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            out[topic] = {str(p): consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                          for p in partitions}
        return out
    finally:
        consumer.close()


def caught_up(job, ends: dict[str, dict[str, int]], timeout: float = 300) -> None:
    """Wait until a finished micro-batch has read every topic to ``ends``."""
    def read_to_ends() -> bool:
        assert job.exception() is None, job.exception()
        progress = job.query.lastProgress if job.query is not None else None
        if progress is None:
            return False
        read = progress["sources"][0]["endOffset"]
        read = orjson.loads(read) if isinstance(read, str) else read
        return all(read.get(topic, {}).get(p, -1) >= end for topic, parts in ends.items() for p, end in parts.items())

    wait_for(read_to_ends, f"the recon query to catch up with {ends}", timeout)


def read_records(bootstrap: str, topic: str, timeout: float = 60) -> list[Message]:
    """Every record on ``topic`` up to where it ends now: read from each partition's start
    to its end offset (no consumer group to join, so nothing is missed while one would be
    forming)."""
    remaining = {int(p): end for p, end in end_offsets(bootstrap, [topic])[topic].items() if end > 0}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"recon-test-{time.time_ns()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in remaining])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while remaining and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None or message.error():
                continue
            out.append(message)
            if message.offset() + 1 >= remaining.get(message.partition(), 0):
                remaining.pop(message.partition(), None)
    finally:
        consumer.close()
    assert not remaining, f"{topic}: could not read to the end of partitions {sorted(remaining)}"
    return out


def read_all(bootstrap: str, topic: str, timeout: float = 60) -> list[dict[str, Any]]:
    """Every record's value on ``topic`` up to where it ends now, as JSON (:func:`read_records`)."""
    return [orjson.loads(message.value()) for message in read_records(bootstrap, topic, timeout)]


__all__ = ["caught_up", "end_offsets", "read_all", "read_records"]
