"""Benchmark: the sender hop alone (issue 13) — work records → sender processes → receiver.

What `delivery.engine = "senders"` adds after the matching query: records in the work
topic's format (:mod:`wayline.delivery.work`), produced here as the matching query would
write them (each load-generator event routed by type to its one subscription, key = the
endpoint, body = the event), sent by ``wayline run senders`` processes
(:func:`wayline.delivery.runtime.senders.running_senders`), arriving at the receiver
(``wayline.stack.receiver``, checking every signature). The baseline in the same run:
``bench/toolkit/plain_sender.py`` on the same receiver with the same signing, reading the same
events from event topics (no registry, no log, no retries, no audit).

- ``steady``: ``--rates`` records/s for ``--steady-seconds`` after a primed start: latency
  from the event's ``time`` (stamped as it is produced) to its arrival, p50/p99;
- ``backlog``: ``--backlog-events`` produced first, then the system started: deliveries/s
  from its start to its last arrival, with ``--backlog-processes`` sender processes (1 and
  2), and the sender processes' CPU per request: their user + system time (every thread:
  librdkafka's, the recorder's) from the first arrival to the last, over the requests
  that arrived in between — the least noisy figure on a shared machine.

``--scenarios`` picks either or both.

Run from bench/: ../.venv/bin/python senders.py --runs 1 --rates 300,1000,5000
(or ``--scenarios backlog --backlog-processes 1``)
It starts its own stack under bench/results/senders-state and stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
from confluent_kafka import Producer
from sqlalchemy import func, select

from toolkit import cli, systems
from toolkit.processes import Sampler, cpu_of
from toolkit.produce import produce_steady, send
from toolkit.results import RESULTS, markdown_table, record_results
from toolkit.stack import LOOPBACK, fresh_stack
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.delivery import work
from wayline.delivery.runtime.senders import running_senders
from wayline.delivery.storage.store import RetryEntry
from wayline.registry.db import Database
from wayline.registry.endpoint import EndpointService
from wayline.registry.models import Subscription
from wayline.stack import loadgen
from wayline.stack.seed import seed


class WorkRouter:
    """Writes an event as the matching query would: one work record for its subscription
    (picklable: the paced producer runs in a process of its own)."""

    def __init__(self, topic: str, routes: dict[str, tuple[str, str]], version: int) -> None:
        self.topic, self.routes, self.version = topic, routes, str(version).encode()

    def __call__(self, producer: Producer | loadgen.Producers, record: loadgen.Record) -> None:
        event = orjson.loads(record.value)
        subscription_id, endpoint_id = self.routes[event["type"]]
        headers = [(work.KIND, b"single"), (work.SUBSCRIPTION, subscription_id.encode()),
                   (work.ENDPOINT, endpoint_id.encode()), (work.EVENT, event["id"].encode()),
                   (work.SOURCE, record.topic.encode()), (work.VERSION, self.version)]
        send(producer, self.topic, record.value, endpoint_id.encode(), headers=headers)


def router_for(bench: systems.Bench, tag: str) -> WorkRouter:
    """The registry seeded for ``tag`` and its routes by event type."""
    settings = bench.settings
    bench.trust(seed(bench.database, EndpointService.from_settings(settings), bench.receiver_url,
                     systems.shape("streaming", tag)).secrets)
    with bench.database.transaction() as session:
        rows = session.scalars(select(Subscription))
        routes = {t: (row.id, row.endpoint_id) for row in rows for t in row.event_types}
    topic = f"wayline.bench.{tag}.work"
    ensure_topics(settings.kafka_bootstrap(), [topic], settings.delivery.work_partitions)
    return WorkRouter(topic, routes, bench.database.current_version())


@contextmanager
def senders(bench: systems.Bench, router: WorkRouter, tag: str, processes: int) -> Iterator[tuple[systems.Running, "CpuSampler"]]:
    os.environ.update({
        "WAYLINE_STATE_DIR": str(bench.settings.state_dir),
        "WAYLINE_DELIVERY__WORK_TOPIC": router.topic,
        "WAYLINE_DELIVERY__SENDER_GROUP": f"bench-{tag}",
        "WAYLINE_DELIVERY__SENDER_PROCESSES": str(processes),
        "WAYLINE_REGISTRY__URL_ALLOW_LIST": json.dumps(LOOPBACK),
        # No retry path runs here: a request cut as a straggler (the receiver slow on the
        # loaded machine) would wait in the retry store for ever and stall the count. The
        # cut waits for the stage deadline instead; what still goes there is reported.
        "WAYLINE_DELIVERY__STRAGGLER_CUT_S": str(bench.settings.delivery.stage_deadline_s),
    })
    with running_senders(Settings()) as pids:
        alive = lambda: all(os.path.exists(f"/proc/{pid}") for pid in pids)  # noqa: E731
        with CpuSampler(pids) as cpu:
            yield systems.Running(systems.ReceiverArrivals(bench.receiver_url, f"/{tag}/"), alive, lambda: None), cpu


class CpuSampler(Sampler):
    """The processes' user + system CPU seconds (all threads), sampled every 50 ms with the
    time, until one of them ends."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__(0.05)
        self._pids = pids
        self.samples: list[tuple[float, float]] = []

    def sample(self) -> bool:
        used = [cpu_of(pid) for pid in self._pids]
        if None in used:
            return False
        self.samples.append((time.time(), sum(used)))
        return True

    def between(self, start: float, end: float) -> float:
        """CPU seconds used between the samples nearest ``start`` and ``end``."""
        def at(when: float) -> float:
            return min(self.samples, key=lambda sample: abs(sample[0] - when))[1]
        return at(end) - at(start)


@contextmanager
def plain(bench: systems.Bench, tag: str) -> Iterator[tuple[systems.Running, str]]:
    prefix = systems.fresh_topics(bench, tag)
    started = systems.start_plain(bench, prefix, tag, "streaming")
    try:
        yield started, prefix
    finally:
        started.stop()


def steady(bench: systems.Bench, system: str, tag: str, rate: float) -> dict[str, Any]:
    args, bootstrap = bench.args, bench.settings.kafka_bootstrap()
    segments = [(rate, args.steady_seconds)]
    if system == "plain":
        with plain(bench, tag) as (started, prefix):
            loadgen.produce(bootstrap, loadgen.EventFactory(topic_prefix=prefix, run_id=f"{tag}p").records(
                systems.PRIME_EVENTS))
            systems.wait_for(started, systems.PRIME_EVENTS)
            marks = produce_steady(bootstrap, prefix, tag, segments)
            systems.wait_for(started, systems.PRIME_EVENTS + marks[0]["sent"])
    else:
        router = router_for(bench, tag)
        with senders(bench, router, tag, 1) as (started, _cpu):
            prime = Producer({"bootstrap.servers": bootstrap})
            for record in loadgen.EventFactory(run_id=f"{tag}p").records(systems.PRIME_EVENTS):
                router(prime, record)
            prime.flush(30)
            systems.wait_for(started, systems.PRIME_EVENTS)
            marks = produce_steady(bootstrap, "events.", tag, segments, router)
            systems.wait_for(started, systems.PRIME_EVENTS + marks[0]["sent"])
    window = started.arrivals.totals(marks[0]["from"] + args.warmup_s, math.inf)
    return {"system": system, "measure": f"steady {rate:g}/s", "achieved_rate": marks[0]["achieved_rate"],
            "latency_p50_s": window["latency_p50_s"], "latency_p99_s": window["latency_p99_s"],
            "to_retry": handed_over(bench)}


def handed_over(bench: systems.Bench) -> int:
    """Requests the senders handed to the retry path so far (cut by the deadline, say)."""
    with bench.database.transaction() as session:
        return session.scalar(select(func.count()).select_from(RetryEntry)) or 0


def backlog(bench: systems.Bench, system: str, tag: str, events: int) -> dict[str, Any]:
    bootstrap = bench.settings.kafka_bootstrap()
    if system == "plain":
        prefix = systems.fresh_topics(bench, tag)
        loadgen.produce(bootstrap, loadgen.EventFactory(topic_prefix=prefix, run_id=tag).records(events))
        began = time.time()
        started = systems.start_plain(bench, prefix, tag, "streaming")
        try:
            totals = systems.wait_for(started, events)
        finally:
            started.stop()
    else:
        router = router_for(bench, tag)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
        for record in loadgen.EventFactory(run_id=tag).records(events):
            router(producer, record)
            producer.poll(0)
        producer.flush(120)
        began = time.time()
        with senders(bench, router, tag, int(system.removeprefix("senders"))) as (started, cpu):
            totals = systems.wait_for(started, events)
            time.sleep(0.1)  # a sample after the last arrival
        # Requests that arrived after the first one: the CPU between is theirs.
        cpu_us = cpu.between(totals["first_at"], totals["last_at"]) / (totals["events"] - 1) * 1e6
    wall = totals["last_at"] - began
    first_to_last = totals["last_at"] - totals["first_at"]
    return {"system": system, "measure": f"backlog {events:,}", "wall_s": wall, "events_per_s": totals["events"] / wall,
            "first_to_last_per_s": totals["events"] / first_to_last if first_to_last > 0 else None,
            "to_retry": handed_over(bench)} | ({} if system == "plain" else {"cpu_us_per_request": cpu_us})


def run_all(settings: Settings, database: Database, args: argparse.Namespace) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    with systems.bench_session(settings, database, args, spark=False) as bench:
        for run in range(args.runs):
            for rate in args.rates if "steady" in args.scenarios else ():
                for system in ("plain", "senders"):
                    tag = f"r{run}{system}{int(rate)}"
                    results.append(steady(bench, system, tag, rate) | {"run": run})
                    print(json.dumps(results[-1]), flush=True)
            drainers = ["plain", *(f"senders{n}" for n in args.backlog_processes)] if "backlog" in args.scenarios else []
            for system in drainers:
                results.append(backlog(bench, system, f"b{run}{system}", args.backlog_events) | {"run": run})
                print(json.dumps(results[-1]), flush=True)
    return results


def table(results: list[dict[str, Any]]) -> str:
    rows = {}
    for result in results:
        rows.setdefault((result["measure"], result["system"]), []).append(result)
    figures = ("latency_p50_s", "latency_p99_s", "events_per_s", "first_to_last_per_s", "cpu_us_per_request")

    def median(found: list[dict[str, Any]], key: str) -> str:
        values = [r[key] for r in found if r.get(key) is not None]
        return f"{statistics.median(values):.4g}" if values else "—"

    return markdown_table(
        ["measure", "system", "p50 s", "p99 s", "deliveries/s", "first to last /s", "CPU µs/request", "runs"],
        ([measure, system, *(median(found, figure) for figure in figures), str(len(found))]
         for (measure, system), found in rows.items()))


def main() -> None:
    parser = cli.parser(__doc__, runs=3)
    parser.add_argument("--rates", type=cli.comma(float), default=[300.0, 1000.0, 5000.0])
    parser.add_argument("--steady-seconds", type=float, default=30)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--backlog-events", type=int, default=100_000)
    parser.add_argument("--backlog-processes", type=cli.comma(int), default=[1, 2])
    parser.add_argument("--scenarios", type=cli.names("steady", "backlog"), default=["steady", "backlog"])
    args = parser.parse_args()
    args.source_partitions = None  # the load generator's topics, a topic per domain (Bench.partitions)
    with fresh_stack(RESULTS / "senders-state", registry={"url_allow_list": LOOPBACK}) as (settings, database):
        results = run_all(settings, database, args)
    record_results(f"senders-{int(time.time())}", {"args": vars(args), "results": results}, args.out)
    print(table(results))


if __name__ == "__main__":
    main()
