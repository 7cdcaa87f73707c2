"""Probe: where an event's time goes in a running `make demo`, hop by hop.

Start `make demo`, then, from the checkout, while it runs:

    .venv/bin/python bench/demo_hops.py --seconds 60

It reads the demo's stack (`.wayline/stack.json`) and tails, from their ends, the demo's
event topics, the intake topic and the work topic, with a consumer that asks the broker
for every byte at once (so its own fetch adds about 5 ms). Per 10 s of wall time and over
the whole window, p50 and p99 of:

- ``source``: an event seen on its event topic, minus its ``time`` (the load generator and
  the broker);
- ``intake``: its copy seen on the intake topic, minus its ``time`` (plus the intake process);
- ``matched``: its work record's ``CreateTime`` (stamped as the matching query hands the
  record to its Kafka producer) minus its ``time``: what the matching query adds up to there;
- ``visible``: its work record seen, minus that ``CreateTime``: the matching query's
  producer and the broker.

What the receiver shows for the same events is on the demo's own screen (event ``time`` to
arrival); what it adds after ``visible`` is the sender processes'. Nothing is written.
"""

from __future__ import annotations

import collections
import json
import time
from datetime import datetime

import orjson
from confluent_kafka import Consumer

from toolkit.cli import parser
from toolkit.stats import quantile
from wayline.core.settings import Settings

HOPS = ("source", "intake", "matched", "visible")
WINDOW_S = 10


def event_time(value: bytes | None) -> float | None:
    try:
        return datetime.fromisoformat(orjson.loads(value or b"")["time"]).timestamp()
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None  # a broken record of the demo's, or a batch-mode record without one event's time


def tail(bootstrap: str, settings: Settings, seconds: float) -> dict[str, list[tuple[float, float]]]:
    """(seen at, hop seconds) per hop, for ``seconds`` of records from the topics' ends."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"demo-hops-{time.time_ns()}", "auto.offset.reset": "latest",
        "enable.auto.commit": False, "fetch.wait.max.ms": 5, "fetch.min.bytes": 1,
    })
    intake, work = settings.delivery.intake_topic, settings.delivery.work_topic
    consumer.subscribe([f"^{settings.kafka.event_topic_prefix.replace('.', '[.]')}.*", intake, work])
    hops: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            for message in consumer.consume(500, 0.05):
                seen = time.time()
                sent = None if message.error() else event_time(message.value())
                if sent is None:
                    continue
                if message.topic() == work:
                    stamped = message.timestamp()[1] / 1000
                    hops["matched"].append((seen, stamped - sent))
                    hops["visible"].append((seen, seen - stamped))
                else:
                    hops["intake" if message.topic() == intake else "source"].append((seen, seen - sent))
    finally:
        consumer.close()
    return hops


def main() -> None:
    made = parser(__doc__, out=None)
    made.add_argument("--seconds", type=float, default=60, help="how long to tail the topics (60)")
    args = made.parse_args()
    settings = Settings()
    bootstrap = json.loads(settings.stack_file.read_text())["kafka_bootstrap"]
    hops = tail(bootstrap, settings, args.seconds)
    began = min((seen for rows in hops.values() for seen, _ in rows), default=0.0)

    def figures(values: list[float]) -> str:
        ordered = sorted(values)
        return f"p50 {quantile(ordered, 0.5):.3f} p99 {quantile(ordered, 0.99):.3f} (n {len(ordered)})"

    for hop in HOPS:
        rows = hops.get(hop, [])
        if not rows:
            print(f"{hop:8s} no records")
            continue
        windows: dict[int, list[float]] = collections.defaultdict(list)
        for seen, latency in rows:
            windows[int((seen - began) // WINDOW_S) * WINDOW_S].append(latency)
        print(f"{hop:8s} all: {figures([latency for _, latency in rows])}")
        for start, values in sorted(windows.items()):
            print(f"{'':8s} {start:3d}-{start + WINDOW_S:<3d}s: {figures(values)}")


if __name__ == "__main__":
    main()
