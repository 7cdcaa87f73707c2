import threading
import time
from collections import Counter

import orjson

from tests.recon.streams import read_records
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.stack import loadgen


def test_a_topic_per_domain_by_default() -> None:
    assert len(loadgen.topics("p.")) == len(loadgen.DOMAINS)
    assert {t.topic.removeprefix("p.") for t in loadgen.catalog("p.")} == set(loadgen.DOMAINS)


def test_the_ingest_layout_puts_every_type_on_one_topic() -> None:
    assert loadgen.topics("p.", layout="ingest") == ["p.ingest"]
    records = list(loadgen.EventFactory(topic_prefix="p.", layout="ingest", seed=3).records(200))
    assert {r.topic for r in records} == {"p.ingest"}


def test_the_types_layout_gives_each_of_the_500_types_a_topic() -> None:
    topics = loadgen.topics("p.", layout="types")
    assert len(topics) == 500 and "p.billing.invoice.created" in topics
    assert len(loadgen.topics("p.")) == 20
    records = list(loadgen.EventFactory(topic_prefix="p.", layout="types", seed=3).records(200))
    assert all(r.topic == "p." + orjson.loads(r.value)["type"].removeprefix("com.wayline.") for r in records)
    # The same event types as the per-domain layout: only where they are written changes.
    types = {orjson.loads(r.value)["type"] for r in records}
    assert types <= {t.name for t in loadgen.catalog()} and len(types) > 50


def test_an_events_time_is_the_time_it_is_made_not_of_an_earlier_record() -> None:
    # Receivers measure latency from `time`: a stamp kept for a hundred records made a
    # paced stream at 300/s look up to a third of a second later than it was.
    records = loadgen.EventFactory(seed=3).records()
    first = orjson.loads(next(records).value)["time"]
    time.sleep(0.02)
    assert orjson.loads(next(records).value)["time"] > first


def test_a_paced_stream_goes_out_every_tick_not_in_bursts(settings: Settings, unique: str) -> None:
    # At 300/s the demo's producer sent a thousand records at once, then slept 3.3 s: every
    # stage after it saw a burst, and the demo's latencies were the burst's.
    prefix = f"paced.{unique}."
    bootstrap = settings.kafka_bootstrap()
    ensure_topics(bootstrap, loadgen.topics(prefix, layout="ingest"), 1)
    summary = loadgen.produce(bootstrap, loadgen.EventFactory(topic_prefix=prefix, layout="ingest").records(600),
                              rate=400)
    assert summary.sent == 600 and summary.seconds > 1.2
    sent_at = Counter(message.timestamp()[1] // 100 for message in read_records(bootstrap, f"{prefix}ingest"))
    assert sum(sent_at.values()) == 600
    assert max(sent_at.values()) < 600 * 0.4, f"records per 100 ms: {sorted(sent_at.values())}"


def test_many_topics_are_spread_over_producers_each_keeping_its_topics_order(settings: Settings,
                                                                               unique: str) -> None:
    # One producer for 500 topics sent a request per record down one connection, which the
    # broker takes a request at a time: at 1,000/s records waited seconds in flight.
    bootstrap = settings.kafka_bootstrap()
    topics = [f"spread.{unique}.{n:03d}" for n in range(loadgen.TOPICS_PER_PRODUCER * 2 + 2)]
    ensure_topics(bootstrap, topics, 1)
    producers = loadgen.Producers({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for sequence in range(3):
        for topic in topics:
            producers.produce(topic, str(sequence).encode())
        producers.poll(0)
    assert producers.flush(30) == 0
    assert len(producers) == 3
    for topic in topics[:: loadgen.TOPICS_PER_PRODUCER // 2]:
        assert [m.value() for m in read_records(bootstrap, topic)] == [b"0", b"1", b"2"]


def test_a_stream_stops_when_told(settings: Settings, unique: str) -> None:
    prefix = f"stopped.{unique}."
    bootstrap = settings.kafka_bootstrap()
    ensure_topics(bootstrap, loadgen.topics(prefix, layout="ingest"), 1)
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    summary = loadgen.produce(bootstrap, loadgen.EventFactory(topic_prefix=prefix, layout="ingest").records(),
                              rate=200, stop=stop)
    assert 0 < summary.sent < 200 * 5  # stopped within seconds of being told, however loaded the machine
    assert len(read_records(bootstrap, f"{prefix}ingest")) == summary.sent
