"""Stable output ids: the rules job killed mid-stream and restarted emits the ids an
uninterrupted run does.

`wayline run rules` runs as its own process group over a stream of events produced while
it runs (a filter, a tumbling window, a sliding window and a pattern over them). Once it
has written its first outputs it is killed with SIGKILL and started again on the same
checkpoint: it replays the micro-batch it did not commit. A second job then reads the
whole stream from the start on a checkpoint of its own, without interruption, in
micro-batches cut elsewhere. Every output of the first pair of runs, duplicates included,
must be an output of the second with the same id and content, and the other way round.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.pipelines.conftest import start_detached
from tests.pipelines.test_delivery_crash import kill_hard
from tests.waiting import wait_for
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.registry import rule as rule_service
from wayline.registry.access import ADMIN

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
EVENTS = 4000
RATE = 150  # events/s: the stream is still coming when the job is killed
USERS = 40
STEP_S = 0.05  # event time between consecutive events
PER_TRIGGER = 400  # records per micro-batch: the backlog is read in many batches
BURST_EVERY = 250

RULES = {
    "filter": "SELECT id, data.amount AS amount FROM events WHERE type = 'rc.tick' AND data.amount >= 90",
    "window": "SELECT data.user, window.start AS start, COUNT(*) AS n, SUM(data.amount) AS total FROM events "
              "WHERE type = 'rc.tick' GROUP BY data.user, window(event_time, '10 seconds')",
    "sliding": "SELECT data.user, id AS at, COUNT(*) AS n FROM events WHERE type = 'rc.tick' "
               "GROUP BY data.user, sliding_window(event_time, '20 seconds') HAVING COUNT(*) >= 3",
    "rise": """SELECT * FROM events MATCH_RECOGNIZE (
                 PARTITION BY data.user ORDER BY event_time
                 MEASURES FIRST(A.id) AS low, LAST(B.id) AS high, COUNT(B.*) AS steps
                 PATTERN (A B{2,}) WITHIN INTERVAL '30' SECOND
                 DEFINE A AS A.type = 'rc.tick', B AS B.data.amount > PREV(B.data.amount))""",
}


def amount(n: int) -> int:
    return (n * n * 31 + n * 17) % 100


def tick(n: int) -> tuple[bytes, bytes]:
    user = f"u{n % USERS}"
    return user.encode(), orjson.dumps({
        "specversion": "1.0", "id": f"rc-{n}", "source": "/crash", "type": "rc.tick", "tenantid": "rc-t",
        "time": (T0 + timedelta(seconds=n * STEP_S)).isoformat(),
        "data": {"user": user, "amount": amount(n)},
    })


def burst(n: int) -> list[tuple[bytes, bytes]]:
    """Tick ``n``'s user again, at its time, rising twice: two matches of the pattern with the
    same first and last times, and sliding windows of peers. Their times alone do not tell
    these outputs apart; the rows' ids do."""
    user = f"u{n % USERS}"
    return [(user.encode(), orjson.dumps({
        "specversion": "1.0", "id": f"rc-{n}-b{step}", "source": "/crash", "type": "rc.tick", "tenantid": "rc-t",
        "time": (T0 + timedelta(seconds=n * STEP_S)).isoformat(), "data": {"user": user, "amount": amount},
    })) for step, amount in enumerate((0, 10, 20, 0, 10, 20, 0))]


def stream() -> list[tuple[bytes, bytes]]:
    """The events in event-time order: every ``BURST_EVERY``-th tick followed by its burst."""
    out = []
    for n in range(EVENTS):
        out.append(tick(n))
        if n % BURST_EVERY == 0:
            out.extend(burst(n))
    return out


def clock() -> tuple[bytes, bytes]:
    """An event far ahead: the watermark passes every window and pattern of the stream."""
    return b"clock", orjson.dumps({
        "specversion": "1.0", "id": "rc-clock", "source": "/crash", "type": "rc.clock", "tenantid": "rc-t",
        "time": (T0 + timedelta(hours=2)).isoformat(), "data": {"user": "clock"},
    })


def expected_windows() -> int:
    return len({(n % USERS, int(n * STEP_S // 10)) for n in range(EVENTS)})


class Outputs:
    """Every record of the output topics, with its offset, read as it arrives."""

    def __init__(self, bootstrap: str, topics: dict[str, str]) -> None:
        self.topics = topics
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rules-crash-{time.time_ns()}",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.consumer.subscribe(list(topics.values()))
        self.seen: dict[str, list[tuple[int, dict[str, Any]]]] = {topic: [] for topic in topics.values()}

    def drain(self) -> None:
        while (message := self.consumer.poll(0.2)) is not None:
            if not message.error():
                self.seen[message.topic()].append((message.offset(), orjson.loads(message.value())))

    def count(self, name: str, since: int = 0) -> int:
        self.drain()
        return sum(1 for offset, _ in self.seen[self.topics[name]] if offset >= since)

    def ends(self) -> dict[str, int]:
        """The next offset of each output topic (one partition each)."""
        return {name: self.consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
                for name, topic in self.topics.items()}

    def between(self, name: str, start: int, end: int) -> list[dict[str, Any]]:
        self.drain()
        return [item for offset, item in self.seen[self.topics[name]] if start <= offset < end]

    def read_to(self, ends: dict[str, int]) -> bool:
        """Whether every record before ``ends`` (see :meth:`ends`) has been read."""
        self.drain()
        return all(max((offset + 1 for offset, _ in self.seen[self.topics[name]]), default=0) >= end
                   for name, end in ends.items())


def committed_to(checkpoint: Path, topic: str) -> int:
    """How far into ``topic`` (one partition) the rules query has read, by the offsets of its
    last micro-batch, once that batch is committed (its outputs written); -1 until then."""
    def numbered(folder: str) -> list[int]:
        return [int(path.name) for path in (checkpoint / folder).glob("*") if path.name.isdigit()]

    planned, committed = numbered("offsets"), numbered("commits")
    if not committed or max(committed) != max(planned, default=-1):
        return -1
    # The offsets log: a version line, the batch's metadata, then one line of offsets per source.
    for line in (checkpoint / "offsets" / str(max(committed))).read_text().splitlines()[2:]:
        offsets = orjson.loads(line) if line.startswith("{") else {}
        if topic in offsets:
            return offsets[topic]["0"]
    return -1


def job_environment(prefix: str, control_topic: str) -> dict[str, str]:
    return {
        "WAYLINE_KAFKA__EVENT_TOPIC_PREFIX": prefix,
        "WAYLINE_KAFKA__MAX_OFFSETS_PER_TRIGGER": str(PER_TRIGGER),
        "WAYLINE_RULES__CONTROL_TOPIC": control_topic,
        "WAYLINE_RULES__SHARDS": "8",
        "WAYLINE_RULES__METRICS_PORT": "0",
    }


class Exited:
    def __init__(self, job, log: Path) -> None:
        self.job, self.log = job, log

    def __call__(self) -> None:
        assert self.job.poll() is None, f"the rules job exited; its log: {self.log}"


def settled(outputs: Outputs, since: dict[str, int], job, log: Path, checkpoint: Path, topic_in: str) -> None:
    """Wait until every window of the stream is out (they close on the clock event, in the
    stream's last micro-batch, with every other output of that batch), until that batch is
    committed (every output of it written), and until every output written is read."""
    alive = Exited(job, log)

    def done() -> bool:
        alive()
        return outputs.count("window", since["window"]) >= expected_windows()

    wait_for(done, "every window's output", 300)
    end_in = outputs.consumer.get_watermark_offsets(TopicPartition(topic_in, 0), timeout=10)[1]
    wait_for(lambda: alive() or committed_to(checkpoint, topic_in) >= end_in,
             "the micro-batch that read the whole stream to be committed", 120)
    ends = outputs.ends()
    wait_for(lambda: outputs.read_to(ends), f"the outputs up to {ends}", 60, every_s=0)


@pytest.fixture(scope="module")
def runs(settings: Settings, database, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    suffix = str(time.time_ns())[-8:]
    prefix = f"events.rcrash{suffix}."
    topics = {name: f"rules.out.crash-{name}.{suffix}" for name in RULES}
    bootstrap = settings.kafka_bootstrap()
    # One input partition: the backlog read by the second run advances event time evenly.
    ensure_topics(bootstrap, [prefix + "in"], 1)
    ensure_topics(bootstrap, list(topics.values()), 1)
    policy = rule_service.RulePolicy.from_settings(settings)
    with database.transaction() as session:
        created = [rule_service.create(session, ADMIN, rule_service.RuleIn(
            name=f"crash-{name}-{suffix}", sql=sql, output_topic=topics[name], output_type=f"crash.{name}"), policy)
            for name, sql in RULES.items()]
    environment = job_environment(prefix, f"wayline.rules.control.crash{suffix}")
    outputs = Outputs(bootstrap, topics)

    def produce() -> None:
        producer = Producer({"bootstrap.servers": bootstrap})
        for key, value in stream():
            producer.produce(prefix + "in", key=key, value=value)
            producer.poll(0)
            time.sleep(1 / RATE)
        key, value = clock()
        producer.produce(prefix + "in", key=key, value=value)
        assert producer.flush(30) == 0

    producer = threading.Thread(target=produce, name="rules-crash-producer")
    interrupted = settings.model_copy(update={"state_dir": tmp_path_factory.mktemp("rules-crash-interrupted")})
    log = interrupted.state_dir / "job.log"
    job = start_detached("rules", interrupted, settings, log, environment)
    try:
        producer.start()
        alive = Exited(job, log)
        wait_for(lambda: alive() or outputs.count("filter") >= 20, "the first outputs", 300)
        kill_hard(job)
        killed_at = outputs.count("filter")
        job = start_detached("rules", interrupted, settings, log, environment)
        producer.join(timeout=120)
        settled(outputs, dict.fromkeys(RULES, 0), job, log, interrupted.checkpoint_root / "rules", prefix + "in")
    finally:
        kill_hard(job)
    outputs.drain()
    boundary = outputs.ends()

    uninterrupted = settings.model_copy(update={"state_dir": tmp_path_factory.mktemp("rules-crash-uninterrupted")})
    log = uninterrupted.state_dir / "job.log"
    job = start_detached("rules", uninterrupted, settings, log, environment)
    try:
        settled(outputs, boundary, job, log, uninterrupted.checkpoint_root / "rules", prefix + "in")
    finally:
        kill_hard(job)
    end = outputs.ends()
    try:
        yield {
            "killed_at": killed_at,
            "interrupted": {name: outputs.between(name, 0, boundary[name]) for name in RULES},
            "uninterrupted": {name: outputs.between(name, boundary[name], end[name]) for name in RULES},
        }
    finally:
        outputs.consumer.close()
        # Other tests' rules jobs run every running rule.
        with database.transaction() as session:
            for rule in created:
                rule_service.delete(session, ADMIN, rule.id)


def test_the_job_was_killed_mid_stream(runs: dict[str, Any]) -> None:
    expected_filter = sum(1 for n in range(EVENTS) if amount(n) >= 90)
    assert 0 < runs["killed_at"] < expected_filter
    assert len({item["id"] for item in runs["interrupted"]["filter"]}) == expected_filter


@pytest.mark.parametrize("name", list(RULES))
def test_a_restarted_job_emits_the_ids_of_an_uninterrupted_run(runs: dict[str, Any], name: str) -> None:
    def by_id(items: list[dict[str, Any]]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        for item in items:
            out.setdefault(item["id"], []).append((item["data"], item.get("subject"), item.get("time")))
        return out

    interrupted, uninterrupted = by_id(runs["interrupted"][name]), by_id(runs["uninterrupted"][name])
    assert len(uninterrupted) > 10
    # One output per id in a run without a crash; a replayed batch may repeat an output,
    # but only with the same content.
    assert all(len(copies) == 1 for copies in uninterrupted.values())
    assert all(all(copy == copies[0] for copy in copies) for copies in interrupted.values())
    assert {key: copies[0] for key, copies in interrupted.items()} == {
        key: copies[0] for key, copies in uninterrupted.items()}
