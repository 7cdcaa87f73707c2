"""Benchmark: the sender hop alone (issue 13) — work records → sender processes → receiver.

What `delivery.engine = "senders"` adds after the matching query: records in the work
topic's format (:mod:`wayline.delivery.work`), produced here as the matching query would
write them (each load-generator event routed by type to its one subscription, key = the
endpoint, body = the event), sent by ``wayline run senders`` processes
(:func:`wayline.delivery.runtime.senders.running_senders`), arriving at the receiver
(``wayline.stack.receiver``, checking every signature). The baseline in the same run:
``bench/plain_sender.py`` on the same receiver with the same signing, reading the same
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
import multiprocessing
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
from confluent_kafka import Producer
from sqlalchemy import func, select

import delivery_targets as targets
from delivery import receive, shape
from fresh_stack import fresh_stack, machine
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

RESULTS = targets.RESULTS


class WorkRouter:
    """Writes an event as the matching query would: one work record for its subscription
    (picklable: the paced producer runs in a process of its own)."""

    def __init__(self, topic: str, routes: dict[str, tuple[str, str]], version: int) -> None:
        self.topic, self.routes, self.version = topic, routes, str(version).encode()

    def __call__(self, producer: Producer, record: loadgen.Record) -> None:
        event = orjson.loads(record.value)
        subscription_id, endpoint_id = self.routes[event["type"]]
        headers = [(work.KIND, b"single"), (work.SUBSCRIPTION, subscription_id.encode()),
                   (work.ENDPOINT, endpoint_id.encode()), (work.EVENT, event["id"].encode()),
                   (work.SOURCE, record.topic.encode()), (work.VERSION, self.version)]
        while True:
            try:
                producer.produce(self.topic, record.value, endpoint_id.encode(), headers=headers)
                return
            except BufferError:
                producer.poll(0.05)


def router_for(bench: targets.Bench, tag: str) -> WorkRouter:
    """The registry seeded for ``tag`` and its routes by event type."""
    settings = bench.settings
    bench.trust(seed(bench.database, EndpointService.from_settings(settings), bench.receiver_url,
                     shape("streaming", tag)).secrets)
    with bench.database.transaction() as session:
        rows = session.scalars(select(Subscription))
        routes = {t: (row.id, row.endpoint_id) for row in rows for t in row.event_types}
    topic = f"wayline.bench.{tag}.work"
    ensure_topics(settings.kafka_bootstrap(), [topic], settings.delivery.work_partitions)
    return WorkRouter(topic, routes, bench.database.current_version())


@contextmanager
def senders(bench: targets.Bench, router: WorkRouter, tag: str, processes: int) -> Iterator[tuple[targets.Running, "CpuSampler"]]:
    os.environ.update({
        "WAYLINE_STATE_DIR": str(bench.settings.state_dir),
        "WAYLINE_DELIVERY__WORK_TOPIC": router.topic,
        "WAYLINE_DELIVERY__SENDER_GROUP": f"bench-{tag}",
        "WAYLINE_DELIVERY__SENDER_PROCESSES": str(processes),
        "WAYLINE_REGISTRY__URL_ALLOW_LIST": '["127.0.0.1/32"]',
        # No retry path runs here: a request cut as a straggler (the receiver slow on the
        # loaded machine) would wait in the retry store for ever and stall the count. The
        # cut waits for the stage deadline instead; what still goes there is reported.
        "WAYLINE_DELIVERY__STRAGGLER_CUT_S": str(bench.settings.delivery.stage_deadline_s),
    })
    with running_senders(Settings()) as pids:
        alive = lambda: all(os.path.exists(f"/proc/{pid}") for pid in pids)  # noqa: E731
        with CpuSampler(pids) as cpu:
            yield targets.Running(targets.ReceiverArrivals(bench.receiver_url, f"/{tag}/"), alive, lambda: None), cpu


class CpuSampler(targets.Sampler):
    """The processes' user + system CPU seconds (all threads), sampled every 50 ms with the
    time, until one of them ends."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__(0.05)
        self._pids = pids
        self._tick = os.sysconf("SC_CLK_TCK")
        self.samples: list[tuple[float, float]] = []

    def sample(self) -> bool:
        total = 0.0
        for pid in self._pids:
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    # Fields after the command (which may hold spaces): utime, stime are 14th, 15th.
                    fields = stat.read().rsplit(")", 1)[1].split()
            except FileNotFoundError:
                return False
            total += (int(fields[11]) + int(fields[12])) / self._tick
        self.samples.append((time.time(), total))
        return True

    def between(self, start: float, end: float) -> float:
        """CPU seconds used between the samples nearest ``start`` and ``end``."""
        def at(when: float) -> float:
            return min(self.samples, key=lambda sample: abs(sample[0] - when))[1]
        return at(end) - at(start)


@contextmanager
def plain(bench: targets.Bench, tag: str) -> Iterator[tuple[targets.Running, str]]:
    prefix = targets.fresh_topics(bench, tag)
    started = targets.start_plain(bench, prefix, tag, "streaming")
    try:
        yield started, prefix
    finally:
        started.stop()


def steady(bench: targets.Bench, system: str, tag: str, rate: float) -> dict[str, Any]:
    args, bootstrap = bench.args, bench.settings.kafka_bootstrap()
    segments = [(rate, args.steady_seconds)]
    if system == "plain":
        with plain(bench, tag) as (started, prefix):
            loadgen.produce(bootstrap, loadgen.EventFactory(topic_prefix=prefix, run_id=f"{tag}p").records(
                targets.PRIME_EVENTS))
            targets.wait_for(started, targets.PRIME_EVENTS)
            marks = targets.produce_steady(bootstrap, prefix, tag, segments)
            targets.wait_for(started, targets.PRIME_EVENTS + marks[0]["sent"])
    else:
        router = router_for(bench, tag)
        with senders(bench, router, tag, 1) as (started, _cpu):
            prime = Producer({"bootstrap.servers": bootstrap})
            for record in loadgen.EventFactory(run_id=f"{tag}p").records(targets.PRIME_EVENTS):
                router(prime, record)
            prime.flush(30)
            targets.wait_for(started, targets.PRIME_EVENTS)
            marks = targets.produce_steady(bootstrap, "events.", tag, segments, router)
            targets.wait_for(started, targets.PRIME_EVENTS + marks[0]["sent"])
    window = started.arrivals.totals(marks[0]["from"] + args.warmup_s, math.inf)
    return {"system": system, "measure": f"steady {rate:g}/s", "achieved_rate": marks[0]["achieved_rate"],
            "latency_p50_s": window["latency_p50_s"], "latency_p99_s": window["latency_p99_s"],
            "to_retry": handed_over(bench)}


def handed_over(bench: targets.Bench) -> int:
    """Requests the senders handed to the retry path so far (cut by the deadline, say)."""
    with bench.database.transaction() as session:
        return session.scalar(select(func.count()).select_from(RetryEntry)) or 0


def backlog(bench: targets.Bench, system: str, tag: str, events: int) -> dict[str, Any]:
    bootstrap = bench.settings.kafka_bootstrap()
    if system == "plain":
        prefix = targets.fresh_topics(bench, tag)
        loadgen.produce(bootstrap, loadgen.EventFactory(topic_prefix=prefix, run_id=tag).records(events))
        began = time.time()
        started = targets.start_plain(bench, prefix, tag, "streaming")
        try:
            totals = targets.wait_for(started, events)
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
            totals = targets.wait_for(started, events)
            time.sleep(0.1)  # a sample after the last arrival
        # Requests that arrived after the first one: the CPU between is theirs.
        cpu_us = cpu.between(totals["first_at"], totals["last_at"]) / (totals["events"] - 1) * 1e6
    wall = totals["last_at"] - began
    first_to_last = totals["last_at"] - totals["first_at"]
    return {"system": system, "measure": f"backlog {events:,}", "wall_s": wall, "events_per_s": totals["events"] / wall,
            "first_to_last_per_s": totals["events"] / first_to_last if first_to_last > 0 else None,
            "to_retry": handed_over(bench)} | ({} if system == "plain" else {"cpu_us_per_request": cpu_us})


def run_all(settings: Settings, database: Database, args: argparse.Namespace) -> list[dict[str, Any]]:
    port_in, port_out = multiprocessing.Pipe(duplex=False)
    secrets_in, secrets_out = multiprocessing.Pipe(duplex=False)
    receiver = multiprocessing.Process(target=receive, args=(port_out, secrets_in), daemon=True)
    receiver.start()
    bench = targets.Bench(None, settings, database, f"http://127.0.0.1:{port_in.recv()}", secrets_out.send, args)
    results: list[dict[str, Any]] = []
    try:
        for run in range(args.runs):
            for rate in args.rates if "steady" in args.scenarios else ():
                for system in ("plain", "senders"):
                    tag = f"r{run}{system}{int(rate)}"
                    results.append(steady(bench, system, tag, rate) | {"run": run})
                    print(json.dumps(results[-1]), flush=True)
            systems = ["plain", *(f"senders{n}" for n in args.backlog_processes)] if "backlog" in args.scenarios else []
            for system in systems:
                results.append(backlog(bench, system, f"b{run}{system}", args.backlog_events) | {"run": run})
                print(json.dumps(results[-1]), flush=True)
    finally:
        receiver.kill()
    return results


def table(results: list[dict[str, Any]]) -> str:
    rows = {}
    for result in results:
        rows.setdefault((result["measure"], result["system"]), []).append(result)
    lines = ["| measure | system | p50 s | p99 s | deliveries/s | first to last /s | CPU µs/request | runs |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (measure, system), found in rows.items():
        def median(key: str) -> str:
            values = [r[key] for r in found if r.get(key) is not None]
            return f"{statistics.median(values):.4g}" if values else "—"
        lines.append(f"| {measure} | {system} | {median('latency_p50_s')} | {median('latency_p99_s')} | "
                     f"{median('events_per_s')} | {median('first_to_last_per_s')} | {median('cpu_us_per_request')} | "
                     f"{len(found)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rates", type=lambda t: [float(r) for r in t.split(",")], default=[300.0, 1000.0, 5000.0])
    parser.add_argument("--steady-seconds", type=float, default=30)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--backlog-events", type=int, default=100_000)
    parser.add_argument("--backlog-processes", type=lambda t: [int(n) for n in t.split(",")], default=[1, 2])
    parser.add_argument("--scenarios", type=lambda t: t.split(","), default=["steady", "backlog"])
    args = parser.parse_args()
    with fresh_stack(RESULTS / "senders-state", registry={"url_allow_list": ["127.0.0.1/32"]}) as (settings, database):
        results = run_all(settings, database, args)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"senders-{int(time.time())}.json").write_text(
        json.dumps({**machine(), "args": vars(args), "results": results}, indent=2))
    print(table(results))


if __name__ == "__main__":
    main()
