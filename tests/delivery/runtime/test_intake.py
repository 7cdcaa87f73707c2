"""Intake processes: when they are used, and what they copy against the real broker."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition

from tests.conftest import REPO
from tests.recon.streams import read_records
from tests.waiting import wait_for
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.core.topics import ReservedTopics
from wayline.delivery.runtime.intake import (
    HELD_FETCH_MAX_PARTITIONS,
    INTAKE_COMMAND,
    ORIGIN_HEADERS,
    ORIGIN_OFFSET,
    ORIGIN_PARTITION,
    ORIGIN_TOPIC,
    intake_fetch,
    intake_partitions,
    source_partitions,
    uses_intake,
)


def _intake(settings: Settings, intake: str, partitions: int = 0) -> Settings:
    return settings.model_copy(update={"delivery": settings.delivery.model_copy(update={
        "intake": intake, "intake_partitions": partitions})})


def test_auto_takes_the_intake_exactly_where_the_real_time_trigger_could_not_hold_the_partitions(
        base_settings: Settings) -> None:
    auto = _intake(base_settings, "auto")
    # One partition a core and one to spare: the real-time trigger holds them, no intake.
    assert not uses_intake(auto, partitions=1, cores=2)
    assert not uses_intake(auto, partitions=3, cores=4)
    # One more and it could not: the demo's 20 x 2, an ingest topic of 2, 500 topics, on 2 cores.
    assert uses_intake(auto, partitions=4, cores=4)
    for partitions in (40, 2, 500):
        assert uses_intake(auto, partitions=partitions, cores=2)
    assert not uses_intake(auto, partitions=40, cores=64)
    assert uses_intake(_intake(base_settings, "on"), partitions=1, cores=64)
    assert not uses_intake(_intake(base_settings, "off"), partitions=500, cores=2)


def test_the_intake_topic_has_what_the_real_time_trigger_holds_with_a_slot_to_spare(base_settings: Settings) -> None:
    assert [intake_partitions(_intake(base_settings, "auto"), cores) for cores in (1, 2, 8)] == [1, 1, 7]
    assert intake_partitions(_intake(base_settings, "auto", partitions=5), 2) == 5


def test_the_intake_holds_its_fetches_over_few_partitions_and_not_over_many(base_settings: Settings) -> None:
    # Held over 500 partitions, a fetch made the broker check all of them on every append.
    held = base_settings.kafka.stream_fetch()
    assert intake_fetch(base_settings, 40) == held  # the demo's 20 x 2
    assert intake_fetch(base_settings, HELD_FETCH_MAX_PARTITIONS) == held
    assert intake_fetch(base_settings, 500) == {**held, "fetch.min.bytes": 1}


def test_the_source_partitions_counted_are_the_delivered_topics(settings: Settings, unique: str) -> None:
    bootstrap = settings.kafka_bootstrap()
    ours = settings.model_copy(update={"kafka": settings.kafka.model_copy(update={
        "event_topic_prefix": f"counted.{unique}.", "alert_topic_prefix": f"alerted.{unique}."})})
    ensure_topics(bootstrap, [f"counted.{unique}.a", f"counted.{unique}.b"], 3)
    ensure_topics(bootstrap, [f"alerted.{unique}.x"], 1)
    ensure_topics(bootstrap, [f"other.{unique}.counted.{unique}.a"], 5)
    assert source_partitions(Producer({"bootstrap.servers": bootstrap}), ours) == 7


def test_the_intake_topic_is_reserved(base_settings: Settings) -> None:
    moved = base_settings.model_copy(update={"delivery": base_settings.delivery.model_copy(update={
        "intake_topic": "fan.in"})})
    assert ReservedTopics.from_settings(moved).reason("fan.in") is not None


# ---- an intake process against the real broker ----

EVENTS = 3000
RATE = 400  # records/s


def _start(environment: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(INTAKE_COMMAND, env=environment, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _origin(message: Message) -> tuple[str, int, int]:
    headers = message.headers()
    assert [name for name, _ in headers[-3:]] == list(ORIGIN_HEADERS)
    values = dict(headers[-3:])
    return values[ORIGIN_TOPIC].decode(), int(values[ORIGIN_PARTITION]), int(values[ORIGIN_OFFSET])


def _committed(settings: Settings, group: str, partitions: list[TopicPartition]) -> dict[tuple[str, int], int]:
    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap(), "group.id": group})
    try:
        return {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(partitions, timeout=10)}
    finally:
        consumer.close()


@pytest.mark.integration
def test_an_intake_process_copies_every_record_with_its_origin_and_loses_none_when_killed(
        settings: Settings, unique: str, tmp_path: Path) -> None:
    name = f"in{unique}"
    bootstrap = settings.kafka_bootstrap()
    # Alerts under a prefix of their own: a job of another test reading "alerts." would count them.
    sources = {f"events.{name}.a": 3, f"events.{name}.b": 1, f"alerts-{name}.c": 2}
    for topic, partitions in sources.items():
        ensure_topics(bootstrap, [topic], partitions)
    ignored = f"events.{name}x.other"  # another prefix: not the delivery job's
    ensure_topics(bootstrap, [ignored], 1)
    intake_topic, group = f"wayline.intake.{name}", f"intake-{name}"
    environment = os.environ | {
        "WAYLINE_STATE_DIR": str(settings.state_dir),
        "WAYLINE_SPARK__JARS_DIR": str(REPO / "jars" / "spark"),
        "WAYLINE_KAFKA__EVENT_TOPIC_PREFIX": f"events.{name}.",
        "WAYLINE_KAFKA__ALERT_TOPIC_PREFIX": f"alerts-{name}.",
        "WAYLINE_DELIVERY__INTAKE_TOPIC": intake_topic,
        "WAYLINE_DELIVERY__INTAKE_GROUP": group,
        "WAYLINE_DELIVERY__INTAKE_PARTITIONS": "2",
    }
    topics = list(sources)
    # An hour ago (older would fall to the broker's retention): not when the copy is made.
    start_ms = int(time.time() * 1000) - 3_600_000
    # (topic, key, value, headers, timestamp ms) by number; every fifth without a key, every third without headers.
    made = [(topics[n % 3], None if n % 5 == 0 else f"k{n % 7}".encode(), f"v{n}".encode(),
             [] if n % 3 == 0 else [("trace", f"t{n}".encode()), ("trace", None)], start_ms + n)
            for n in range(EVENTS)]
    held = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for n, (topic, key, value, headers, timestamp) in enumerate(made):
            if n == EVENTS // 2:
                held.wait(120)  # the second half comes once the process was killed
            producer.produce(topic, value, key=key, headers=headers, timestamp=timestamp)
            producer.poll(0)
            time.sleep(1 / RATE)
        producer.produce(ignored, b"not copied")
        assert producer.flush(30) == 0

    log = tmp_path / "intake.log"
    producing = threading.Thread(target=produce)
    intake = _start(environment, log)
    try:
        producing.start()
        wait_for(lambda: len(read_records(bootstrap, intake_topic)) > EVENTS // 4, "the first copies", 120)
        os.killpg(intake.pid, signal.SIGKILL)
        intake.wait(timeout=30)
        held.set()
        intake = _start(environment, log)
        producing.join(timeout=120)

        def origins() -> set[tuple[str, int, int]]:
            return {_origin(m) for m in read_records(bootstrap, intake_topic)}

        wait_for(lambda: len(origins()) >= EVENTS, "every record copied after the restart", 180)
    finally:
        held.set()
        intake.send_signal(signal.SIGTERM)
        assert intake.wait(timeout=60) == 0, log.read_text()

    originals = {(m.topic(), m.partition(), m.offset()): m
                 for topic in topics for m in read_records(bootstrap, topic)}
    assert len(originals) == EVENTS
    copies = read_records(bootstrap, intake_topic)
    by_origin: dict[tuple[str, int, int], list[Message]] = defaultdict(list)
    for copy in copies:
        by_origin[_origin(copy)].append(copy)
    assert by_origin.keys() == originals.keys(), "every record, and only the source topics'"
    for origin, original in originals.items():
        for copy in by_origin[origin]:
            assert (copy.key(), copy.value(), copy.headers()[:-3], copy.timestamp()[1]) == (
                original.key(), original.value(), original.headers() or [], original.timestamp()[1])
    # One key's copies, and one keyless origin partition's, on one intake partition, each
    # origin partition's in their order there.
    lanes: dict[object, set[int]] = defaultdict(set)
    order: dict[tuple[object, str, int], list[int]] = defaultdict(list)
    for copy in copies:
        topic, partition, offset = _origin(copy)
        lanes[copy.key() if copy.key() is not None else (topic, partition)].add(copy.partition())
        order[(copy.key(), topic, partition)].append(offset)
    assert all(len(partitions) == 1 for partitions in lanes.values())
    for offsets in order.values():
        first_seen = list(dict.fromkeys(offsets))
        assert first_seen == sorted(first_seen)
    # It committed all it copied, and only that: the group's offsets are the sources' ends.
    ends = {(t, p): o + 1 for (t, p, o) in originals if (t, p, o + 1) not in originals}
    assert _committed(settings, group, [TopicPartition(t, p) for t, p in ends]) == ends
    duplicated = sum(len(found) - 1 for found in by_origin.values())
    print(f"kill -9 mid-stream: {duplicated} of {EVENTS} records copied twice")  # noqa: T201 - the report's figure
