"""The source hop alone: how long after an event is made the broker appends it, on the
500-topic layout (a topic per event type, one partition each), written by one producer or
spread over producers (``loadgen.Producers``), with a reader of all 500 topics beside or not.

No Wayline process runs. Each case gets 500 new topics on the same broker, stamped by the
broker (``LogAppendTime``) and settled (``toolkit.topics.settle``); a reader (if any) joins
them 5 s before a paced load of ``--rate`` events/s for ``--seconds``. Afterwards every
record is read back: its append time less the ``time`` its producer wrote in it. Reported
per case: p50 and p99 overall and per 10 s. Readers (librdkafka consumers): ``plain`` is the
plain sender's (``fetch.wait.max.ms`` 10, answered at the first byte), ``held`` Wayline's
stream readers' (answered at 64 KiB or after 100 ms), ``intake`` the intake's over more
than ``intake.HELD_FETCH_MAX_PARTITIONS`` partitions (100 ms, the first byte). The cases
run in the order given, each on a broker warmed by the ones before.

    nice -n -15 .venv/bin/python bench/broker_appends.py --cases 500:plain,64:plain,64:held,64:intake

(``500``: one producer for all 500 topics; ``64``: a producer per 64 topics, the load
generator's default, ``loadgen.TOPICS_PER_PRODUCER``.)
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from datetime import datetime
from typing import Any

import orjson
from confluent_kafka import Consumer, Message

from toolkit import cli
from toolkit.plain_sender import PLAIN_FETCH
from toolkit.produce import SPAWN, send
from toolkit.results import RESULTS, record_results
from toolkit.stack import fresh_stack
from toolkit.stats import quantile
from toolkit.systems import APPENDED
from toolkit.topics import read_topic, settle
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.delivery.runtime import intake
from wayline.stack import loadgen

_STREAM = Settings().kafka.stream_fetch()
READERS: dict[str, dict[str, Any] | None] = {
    "none": None,
    "plain": PLAIN_FETCH,
    "held": _STREAM,
    "intake": intake.intake_fetch(Settings(), intake.HELD_FETCH_MAX_PARTITIONS + 1),
}
WINDOW_S = 10


def read_along(bootstrap: str, topics: list[str], config: dict[str, Any], stop: threading.Event) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"appends-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **config})
    consumer.subscribe(topics)
    try:
        while not stop.is_set():
            consumer.consume(1000, 0.2)
    finally:
        consumer.close()


def paced_load(bootstrap: str, prefix: str, rate: float, seconds: float, topics_per_producer: int, out: Any) -> None:
    """The load's process: ``rate`` events/s for ``seconds``; sends back when it began."""
    factory = loadgen.EventFactory(topic_prefix=prefix, run_id=prefix, layout="types")
    producers = loadgen.Producers({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                   "queue.buffering.max.messages": 1_000_000}, topics_per_producer=topics_per_producer)
    began = time.time()
    for due in loadgen.paced(rate, seconds):
        for record in factory.records(due):
            send(producers, record.topic, record.value, record.key)
        producers.poll(0)
    producers.flush(120)
    out.send({"began": began, "producers": len(producers)})


def appended_after(record: Message) -> tuple[float, float]:
    made = datetime.fromisoformat(orjson.loads(record.value())["time"]).timestamp()
    return made, record.timestamp()[1] / 1000 - made


def one_case(bootstrap: str, number: int, topics_per_producer: int, reader: str, args: argparse.Namespace
             ) -> dict[str, Any]:
    prefix = f"appends.c{number}.events."
    topics = loadgen.topics(prefix, layout="types")
    ensure_topics(bootstrap, topics, 1, APPENDED)
    settle(bootstrap, topics)
    stop = threading.Event()
    config = READERS[reader]
    reading = threading.Thread(target=read_along, args=(bootstrap, topics, config, stop)) if config else None
    if reading:
        reading.start()
        time.sleep(5)  # joined and fetching before the load starts
    try:
        receive, reply = SPAWN.Pipe(duplex=False)
        load = SPAWN.Process(target=paced_load, args=(bootstrap, prefix, args.rate, args.seconds, topics_per_producer, reply))
        load.start()
        sent = receive.recv()
        load.join()
    finally:
        stop.set()
        if reading:
            reading.join()
    rows: list[tuple[float, float]] = []
    read_topic(bootstrap, topics, appended_after, rows)
    lags = sorted(lag for _, lag in rows)
    windows = []
    for start in range(0, int(args.seconds), WINDOW_S):
        inside = sorted(lag for made, lag in rows if 0 <= made - sent["began"] - start < WINDOW_S)
        windows.append({"from_s": start, "p50_s": quantile(inside, 0.5), "p99_s": quantile(inside, 0.99)})
    return {"case": f"{topics_per_producer}:{reader}", "producers": sent["producers"], "reader": reader,
            "events": len(rows), "p50_s": quantile(lags, 0.5), "p99_s": quantile(lags, 0.99), "windows": windows}


def parse_args() -> argparse.Namespace:
    parser = cli.parser(__doc__, out=("--out",))
    parser.add_argument("--cases", type=cli.comma(str), default=["500:plain", "64:plain", "64:held", "64:intake"],
                        help=f"topics per producer and reader ({', '.join(READERS)}), each case on new topics")
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--seconds", type=float, default=30)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    results = []
    with fresh_stack(RESULTS / "broker_appends-state") as (settings, _database):
        for number, case in enumerate(args.cases):
            share, reader = case.split(":")
            result = one_case(settings.kafka_bootstrap(), number, int(share), reader, args)
            print(orjson.dumps(result).decode(), flush=True)
            results.append(result)
    record_results("broker_appends", {"args": vars(args), "results": results}, args.out)


if __name__ == "__main__":
    main()
