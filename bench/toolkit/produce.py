"""Sending events to Kafka in a benchmark: paced at a rate (not in bursts), or all at once."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import Producer

from wayline.stack import loadgen
from wayline.stack.loadgen import paced

SPAWN = multiprocessing.get_context("spawn")


def send(producer: Producer | loadgen.Producers, topic: str, value: bytes, key: bytes | None = None, *,
         headers: list[tuple[str, bytes]] | None = None, backoff_s: float = 0.05) -> None:
    """One record; while the producer's local queue is full, wait ``backoff_s`` for the
    broker to catch up."""
    while True:
        try:
            producer.produce(topic, value, key, headers=headers)
            return
        except BufferError:
            producer.poll(backoff_s)


def produce_all(bootstrap: str, records: Iterable[tuple[str, bytes, bytes | None]], **config: Any) -> int:
    """Every (topic, value, key) as fast as the broker takes them, then flushed; how many.
    ``config`` adds to or overrides the producer's (batches of up to 10,000, 20 ms linger)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000, **config})
    sent = 0
    for topic, value, key in records:
        send(producer, topic, value, key, backoff_s=0.1)
        sent += 1
        if sent % 10_000 == 1:
            producer.poll(0)
    producer.flush(120)
    return sent


def _emit(producer: loadgen.Producers, record: loadgen.Record) -> None:
    send(producer, record.topic, record.value, record.key)


def produce_paced(bootstrap: str, prefix: str, run_id: str, segments: list[tuple[float, float]], out: Any,
                  emit: Callable[[loadgen.Producers, loadgen.Record], None] | None = None,
                  layout: loadgen.Layout = "domains") -> None:
    """The steady producer's process: each (rate, seconds) segment in turn, paced every
    ``loadgen.TICK_S``, each tick's events stamped with the time they are sent. Sends back, per
    segment, its epoch bounds and the rate it achieved. ``emit`` writes each event
    (``bench/senders.py``: as work records); default: to its event topic."""
    emit = emit or _emit
    factory = loadgen.EventFactory(topic_prefix=prefix, run_id=run_id, layout=layout)
    # Uncompressed: with lz4 the broker held a 20-topic layout's small batches 0.7-1.2 s (p50,
    # broker append time against the producer's stamp) before any system could read them,
    # which every system's latency carried (docs/benchmarks.md, issue 25's section).
    # Spread over producers as ``wayline produce`` does (loadgen.TOPICS_PER_PRODUCER).
    producer = loadgen.Producers({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                  "queue.buffering.max.messages": 1_000_000})
    marks = []
    for rate, seconds in segments:
        began_at, sent = time.time(), 0
        for due in paced(rate, seconds):
            # Each event is stamped with the time it is made (to the millisecond).
            for record in factory.records(due):
                emit(producer, record)
            sent += due
            producer.poll(0)
        ended_at = time.time()
        marks.append({"rate": rate, "from": began_at, "to": ended_at, "sent": sent,
                      "achieved_rate": sent / (ended_at - began_at)})
    producer.flush(60)
    out.send(marks)


def produce_steady(bootstrap: str, prefix: str, run_id: str, segments: list[tuple[float, float]],
                   emit: Callable[[loadgen.Producers, loadgen.Record], None] | None = None,
                   layout: loadgen.Layout = "domains") -> list[dict[str, Any]]:
    """:func:`produce_paced` in a process of its own (spawned: this one may run a JVM); its marks."""
    receive_marks, send_marks = SPAWN.Pipe(duplex=False)
    process = SPAWN.Process(target=produce_paced,
                            args=(bootstrap, prefix, run_id, segments, send_marks, emit, layout))
    process.start()
    marks: list[dict[str, Any]] = receive_marks.recv()
    process.join()
    return marks
