"""Benchmark: the delivery targets (issues 13 and 25), each beside its baselines in the same run.

The *systems* read the same kind of traffic on this machine (broker, PostgreSQL, Spark
and the receiver all here):

- **plain**: ``bench/plain_sender.py``, a plain Kafka consumer → route by type → sign →
  aiohttp POST in one process: what Wayline must beat;
- **wayline**: ``wayline run delivery`` and ``wayline run retries`` as a user starts them,
  every delivery setting at its default: the figure a user gets, whatever the default
  engine and trigger are when this runs;
- **floor**: a Structured Streaming query on the same topics, with the same source,
  trigger and ``maxOffsetsPerTrigger`` as the job, whose ``foreachBatch`` runs one trivial
  Spark job (event-time buckets counted): Spark's own limit for a micro-batch;
- **job**: the micro-batch engine's delivery job, started through its public entry point
  (``start_delivery`` with ``Settings``) in this process;
- **senders**: ``delivery.engine = "senders"``, ``wayline run delivery`` in its own process,
  with this bench's delivery flags (``--per-trigger`` and the like).

Both Wayline systems run with ``wayline run retries`` beside them, as deployed: what a
send stage hands to the retry path (a request cut as a straggler, an endpoint marked
slow or failing) arrives through it, later, and counts.

The plain sender and the job deliver to one receiver process (``wayline.stack.receiver``,
checking every signature) under the same registry shape: five endpoints, each subscribed
to 100 of the load generator's 500 event types for every tenant, so every event is
delivered once. Latency is an event's ``time`` to its arrival at the receiver (for the
floor: its Kafka timestamp, stamped as it is produced, to the end of its micro-batch).

*Scenarios*, each chosen with ``--scenarios`` so one can be rerun alone:

- ``steady``: streaming mode at each of ``--rates`` events/s for ``--steady-seconds`` after
  a small primed warm-up; latency p50/p99, the producer's achieved rate, and for the
  systems in processes of their own (plain, wayline, senders) CPU seconds per 1,000
  events (every process of the system and its descendants: JVMs, Python workers, sender
  processes, the retry job) and peak resident memory;
- ``batch_latency``: the same in batch mode (1,000 events or 1 s) at each of
  ``--batch-rates``, where no endpoint reaches 1,000 events in a second: event ``time`` →
  arrival of the batch that carried it;
- ``backlog``: ``--backlog-events`` produced first, drained in streaming mode: deliveries/s
  and wall time from the system's start to its last request;
- ``batch``: ``--batch-events`` drained in batch mode (1,000 events or 1 s): events/s, wall time;
- ``spike``: ``--spike-base`` → ``--spike-peak`` for ``--spike-seconds`` → base again,
  streaming: p99 before, during and after (by event time), time to catch up (after the
  spike, the first second whose p99 is back within 2x the p99 before it), and the peak
  resident memory of the Spark JVM, its Python workers and the plain sender.

The events go to the load generator's topics in each of ``--layouts`` in turn (results
labelled by layout in one table): ``domains``, 20 topics × 2 partitions (the demo's);
``types``, 500 topics × 1 partition (the design brief's count); ``ingest``, one topic × 2
partitions. ``--source-partitions`` overrides the partitions per topic.

Every scenario is run ``--runs`` times (systems in a rotating order); the table shows
medians. Results: ``bench/results/delivery_targets-<time>.json`` and a markdown table.
Run: .venv/bin/python bench/delivery_targets.py --scenarios steady --rates 1000 --runs 3
(default systems: plain,wayline; default layouts: domains,types,ingest)
It starts its own stack under bench/results/delivery_targets-state and stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Protocol, Self

import orjson
from confluent_kafka import Message, Producer

import plain_sender
from delivery import receive, shape
from fresh_stack import RESULTS, fresh_stack, record_results
from topic_records import read_topic
from wayline.core.kafka import ensure_topics
from wayline.core.secret import Secret
from wayline.core.settings import Settings
from wayline.delivery.metrics import DeliveryMetrics
from wayline.pipelines.delivery import start_delivery
from wayline.pipelines.source import read_kafka
from wayline.registry.db import Database
from wayline.registry.endpoint import EndpointService
from wayline.registry.subscription import Mode
from wayline.stack import loadgen
from wayline.stack.seed import seed
from wayline.stack.spark import spark_session

SYSTEMS = ("plain", "floor", "wayline", "job", "senders")
SCENARIOS = ("steady", "batch_latency", "backlog", "batch", "spike")
SOURCE_PARTITIONS: dict[loadgen.Layout, int] = {"domains": 2, "types": 1, "ingest": 2}
"""Partitions per event topic in each layout unless ``--source-partitions`` says otherwise:
the demo's 20 topics x 2, the brief's 500 topics x 1, an ingest topic of 2."""
# Give up when nothing new arrived for this long; the first arrival may take longer (a
# job's first micro-batch starts its Python workers and loads the registry).
STALL_S = 120.0
FIRST_ARRIVAL_S = 300.0
PRIME_EVENTS = 200
TICK_S = 0.01
BUCKET_MS = 10
SAMPLE_S = 0.5
CATCH_UP_FACTOR = 2.0
SPAWN = multiprocessing.get_context("spawn")


# --- Where each system's deliveries are counted ---------------------------------------


class Arrivals(Protocol):
    def totals(self, sent_from: float = -math.inf, sent_to: float = math.inf) -> dict[str, Any]:
        """``events``, ``first_at``, ``last_at`` and ``latency_p50_s``/``latency_p99_s`` over
        the events whose ``time`` is in [sent_from, sent_to)."""
        ...


@dataclass(frozen=True)
class ReceiverArrivals:
    """What the receiver counted under one path prefix (the plain sender's or the job's)."""

    url: str
    prefix: str

    def totals(self, sent_from: float = -math.inf, sent_to: float = math.inf) -> dict[str, Any]:
        query = {"prefix": self.prefix} | {k: v for k, v in (("sent_from", sent_from), ("sent_to", sent_to))
                                             if math.isfinite(v)}
        with urllib.request.urlopen(f"{self.url}/totals?{urllib.parse.urlencode(query)}", timeout=120) as answer:
            return json.loads(answer.read())


@dataclass
class FloorTally:
    """The floor query's micro-batches: per event-time bucket, its count and its batch's end."""

    buckets: list[tuple[float, float, int]] = field(default_factory=list)
    """(sent, latency, count) per bucket."""
    ends: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, counts: list[tuple[float, int]], ended_at: float) -> None:
        with self.lock:
            self.buckets.extend((sent, ended_at - sent, count) for sent, count in counts)
            if counts:
                self.ends.append(ended_at)

    def totals(self, sent_from: float = -math.inf, sent_to: float = math.inf) -> dict[str, Any]:
        with self.lock:
            chosen = sorted((lat, n) for sent, lat, n in self.buckets if sent_from <= sent < sent_to)
            return {"events": sum(n for _, _, n in self.buckets), "latency_samples": sum(n for _, n in chosen),
                    "latency_p50_s": weighted_quantile(chosen, 0.5),
                    "latency_p99_s": weighted_quantile(chosen, 0.99),
                    "first_at": min(self.ends, default=None), "last_at": max(self.ends, default=None)}


def weighted_quantile(ordered: list[tuple[float, int]], q: float) -> float | None:
    """The ``q`` quantile of values given in order, each with its count."""
    total = sum(n for _, n in ordered)
    seen = 0
    for value, n in ordered:
        seen += n
        if seen > q * total:
            return value
    return None


# --- Memory ----------------------------------------------------------------------------


class Sampler:
    """Calls :meth:`sample` every ``every_s`` on a thread of its own, inside a ``with``
    block, until the block ends or ``sample`` returns False."""

    def __init__(self, every_s: float) -> None:
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._every_s) and self.sample() is not False:
            pass

    def sample(self) -> bool | None:
        raise NotImplementedError


class MemorySampler(Sampler):
    """Peak resident memory, sampled every ``SAMPLE_S``: the Spark JVM (this process's
    SparkSubmit child), its Python workers together, and a system's own processes with their
    descendants (the plain sender; `wayline run delivery` with its JVM and sender processes,
    and `wayline run retries` with its JVM)."""

    def __init__(self, pids: list[int] = ()) -> None:
        super().__init__(SAMPLE_S)
        self._pids = list(pids)
        self.peaks_mb = {"jvm": 0.0, "python_workers": 0.0, "process": 0.0}

    def sample(self) -> None:
        processes = _processes()
        jvms = [p for p, (parent, _, cmd) in processes.items() if parent == os.getpid() and b"SparkSubmit" in cmd]
        workers = [p for p in _descendants(processes, jvms) if b"python" in processes[p][2]]
        now = {"jvm": sum(processes[p][1] for p in jvms),
               "python_workers": sum(processes[p][1] for p in workers),
               "process": sum(processes[p][1] for p in self._tree(processes))}
        self.peaks_mb = {k: max(v, now[k]) for k, v in self.peaks_mb.items()}

    def _tree(self, processes: dict[int, tuple[int, float, bytes]]) -> list[int]:
        roots = [pid for pid in self._pids if pid in processes]
        return [*roots, *_descendants(processes, roots)]


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> dict[str, float]:
    """User and system CPU seconds used so far by ``pids`` and every descendant alive now,
    per role: ``<command>:<kind>``, the command a root runs (``wayline run delivery``'s
    "delivery") and the kind of process (its Python ``driver``, its ``jvm``, the JVM's Python
    ``workers``, and the driver's other children, its ``senders``)."""
    processes = _processes()
    used: dict[str, float] = {}
    for root in (pid for pid in pids if pid in processes):
        command = processes[root][2].rstrip(b"\0").rsplit(b"\0", 1)[-1].decode(errors="replace")
        for pid in [root, *_descendants(processes, [root])]:
            role = f"{command}:{_kind(processes, pid, root)}"
            used[role] = used.get(role, 0.0) + _cpu_of(pid)
    return used


def _kind(processes: dict[int, tuple[int, float, bytes]], pid: int, root: int) -> str:
    if pid == root:
        return "driver"
    if b"java" in processes[pid][2].split(b"\0", 1)[0]:
        return "jvm"
    parent = processes[pid][0]
    while parent != root and parent in processes:
        if b"java" in processes[parent][2].split(b"\0", 1)[0]:
            return "workers"
        parent = processes[parent][0]
    return "senders"


def _cpu_of(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0  # gone meanwhile
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def _processes() -> dict[int, tuple[int, float, bytes]]:
    """pid → (parent pid, resident MB, command line) of every process readable now."""
    found: dict[int, tuple[int, float, bytes]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            status = Path(f"/proc/{name}/status").read_text()
            command = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        resident_kb = int(fields.get("VmRSS", "0 kB").split()[0])
        found[int(name)] = (int(fields["PPid"]), resident_kb / 1024, command)
    return found


def _descendants(processes: dict[int, tuple[int, float, bytes]], roots: list[int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


# --- Producing -------------------------------------------------------------------------


def produce_paced(bootstrap: str, prefix: str, run_id: str, segments: list[tuple[float, float]], out: Any,
                  emit: Callable[[Producer, loadgen.Record], None] | None = None,
                  layout: loadgen.Layout = "domains") -> None:
    """The steady producer's process: each (rate, seconds) segment in turn, paced every
    ``TICK_S`` (not in bursts), each tick's events stamped with the time they are sent.
    Sends back, per segment, its epoch bounds and the rate it achieved. ``emit`` writes
    each event (``bench/senders.py``: as work records); default: to its event topic."""
    emit = emit or _produce
    factory = loadgen.EventFactory(topic_prefix=prefix, run_id=run_id, layout=layout)
    # Uncompressed: with lz4 the broker held a 20-topic layout's small batches 0.7-1.2 s (p50,
    # broker append time against the producer's stamp) before any system could read them,
    # which every system's latency carried (docs/benchmarks.md, issue 25's section).
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    marks = []
    for rate, seconds in segments:
        began, began_at, sent = time.monotonic(), time.time(), 0
        while (elapsed := time.monotonic() - began) < seconds:
            due = int(rate * elapsed) - sent
            # A fresh `records` call stamps its first event with the time now.
            for record in factory.records(due):
                emit(producer, record)
            sent += due
            producer.poll(0)
            time.sleep(TICK_S)
        ended_at = time.time()
        marks.append({"rate": rate, "from": began_at, "to": ended_at, "sent": sent,
                      "achieved_rate": sent / (ended_at - began_at)})
    producer.flush(60)
    out.send(marks)


def _produce(producer: Producer, record: loadgen.Record) -> None:
    while True:
        try:
            producer.produce(record.topic, record.value, record.key)
            return
        except BufferError:
            producer.poll(0.05)  # the local queue is full: let the broker catch up


def produce_steady(bootstrap: str, prefix: str, run_id: str, segments: list[tuple[float, float]],
                   emit: Callable[[Producer, loadgen.Record], None] | None = None,
                   layout: loadgen.Layout = "domains") -> list[dict[str, Any]]:
    receive_marks, send_marks = SPAWN.Pipe(duplex=False)
    process = SPAWN.Process(target=produce_paced,
                            args=(bootstrap, prefix, run_id, segments, send_marks, emit, layout))
    process.start()
    marks: list[dict[str, Any]] = receive_marks.recv()
    process.join()
    return marks


# --- The three systems ------------------------------------------------------------------


@dataclass
class Bench:
    """What every measurement shares: the stack, the Spark session, the receiver, the flags."""

    spark: Any
    settings: Settings
    database: Database
    receiver_url: str
    trust: Callable[[dict[str, list[str]]], None]
    args: argparse.Namespace

    layout: loadgen.Layout = "domains"
    """The event topics of the measurements under way (``--layouts``)."""

    @property
    def partitions(self) -> int:
        return self.args.source_partitions or SOURCE_PARTITIONS[self.layout]

    def events(self, prefix: str, run_id: str) -> loadgen.EventFactory:
        return loadgen.EventFactory(topic_prefix=prefix, run_id=run_id, layout=self.layout)

    def settings_for(self, prefix: str, tag: str, mode: Mode) -> Settings:
        """The job's and the floor's settings for one measurement: its topics, and the flags."""
        args, base = self.args, self.settings
        per_trigger = args.per_trigger if mode == "streaming" else args.batch_per_trigger
        kafka = {"event_topic_prefix": prefix}
        delivery = {"batch_topic": f"wayline.bench.{tag}.batching", "metrics_port": 0, "retry_metrics_port": 0}
        if per_trigger:
            delivery["max_offsets_per_trigger"] = per_trigger
        for name, value in (("trigger_interval_s", args.trigger_interval), ("send_partitions", args.send_partitions),
                            ("stage_deadline_s", args.deadline)):
            if value is not None:
                delivery[name] = value
        return base.model_copy(update={"kafka": base.kafka.model_copy(update=kafka),
                                       "delivery": base.delivery.model_copy(update=delivery)})


@dataclass
class Running:
    arrivals: Arrivals
    alive: Callable[[], bool]
    stop: Callable[[], None]
    pids: list[int] = field(default_factory=list)
    """The system's own processes (with their descendants: what its memory and CPU are)."""


def start_plain(bench: Bench, prefix: str, tag: str, mode: Mode) -> Running:
    routes: dict[str, list[plain_sender.Route]] = {}
    secrets: dict[str, list[str]] = {}
    for endpoint in shape(mode, tag):
        secrets[endpoint.path] = [Secret.generate().text]
        for n, sub in enumerate(endpoint.subscriptions):
            route = plain_sender.Route(bench.receiver_url + endpoint.path, f"{endpoint.path}#{n}",
                                       tuple(secrets[endpoint.path]))
            for event_type in sub.event_types:
                routes.setdefault(event_type, []).append(route)
    bench.trust(secrets)
    config = plain_sender.SenderConfig(bench.settings.kafka_bootstrap(), loadgen.topics(prefix, layout=bench.layout),
                                       bench.partitions, routes, mode)
    stopping = SPAWN.Event()
    process = SPAWN.Process(target=plain_sender.run, args=(config, stopping))
    process.start()

    def stop() -> None:
        stopping.set()
        process.join(60)
        if process.is_alive():
            process.kill()

    return Running(ReceiverArrivals(bench.receiver_url, f"/{tag}/"), process.is_alive, stop, [process.pid])


def start_floor(bench: Bench, prefix: str, tag: str, mode: Mode) -> Running:
    from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention

    settings = bench.settings_for(prefix, tag, mode)
    tally = FloorTally()

    def each(frame: Any, _batch_id: int) -> None:
        bucket = (F.unix_millis("timestamp") / BUCKET_MS).cast("long").alias("bucket")
        rows = frame.groupBy(bucket).count().collect()
        tally.add([(row["bucket"] * BUCKET_MS / 1000, row["count"]) for row in rows], time.time())

    query = (read_kafka(bench.spark, settings, max_offsets_per_trigger=settings.delivery.max_offsets_per_trigger)
             .writeStream.foreachBatch(each)
             .trigger(processingTime=f"{settings.delivery.trigger_interval_s} seconds")
             .option("checkpointLocation", str(settings.checkpoint_root / "floor" / tag))
             .start())
    return Running(tally, lambda: query.isActive, query.stop)


class Commands:
    """``wayline run <command>`` processes with one measurement's settings, as an operator
    runs them, each with its own Spark driver; their output goes to ``log`` (default:
    nowhere)."""

    def __init__(self, settings: Settings, commands: list[str], log: Path | None = None, **env: str) -> None:
        env = {
            **os.environ, **env, "WAYLINE_STATE_DIR": str(settings.state_dir),
            "WAYLINE_REGISTRY__URL_ALLOW_LIST": json.dumps(settings.registry.url_allow_list),
            "WAYLINE_DELIVERY__STAGE_DEADLINE_S": str(settings.delivery.stage_deadline_s),
            "WAYLINE_DELIVERY__METRICS_PORT": "0", "WAYLINE_DELIVERY__RETRY_METRICS_PORT": "0",
        }
        output = log.open("ab") if log is not None else subprocess.DEVNULL
        self.processes = [subprocess.Popen([sys.executable, "-m", "wayline.cli.main", "run", command], env=env,
                                           stdout=output, stderr=subprocess.STDOUT)
                          for command in commands]

    def alive(self) -> bool:
        for process in self.processes:
            if process.poll() not in (None, 0):
                raise RuntimeError(f"wayline run {process.args[-1]} exited with {process.returncode}")
        return all(process.poll() is None for process in self.processes)

    def stop(self) -> None:
        for process in self.processes:
            process.send_signal(signal.SIGINT)
        for process in self.processes:
            try:
                process.wait(90)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# As deployed, ``wayline run retries`` runs beside either engine: it sends what a stage
# handed to the retry path (cut as a straggler, or for an endpoint marked slow or failing).
RETRIES = "retries"


def start_job(bench: Bench, prefix: str, tag: str, mode: Mode) -> Running:
    settings = bench.settings_for(prefix, tag, mode)
    endpoints = EndpointService.from_settings(settings)
    bench.trust(seed(bench.database, endpoints, bench.receiver_url, shape(mode, tag)).secrets)
    job = start_delivery(bench.spark, settings, bench.database, endpoints, DeliveryMetrics(),
                         checkpoint=settings.checkpoint_root / "delivery" / tag)
    retries = Commands(settings, [RETRIES])

    def alive() -> bool:
        if job.exception() is not None:
            raise RuntimeError(f"the delivery job failed: {job.exception()}")
        return job.isActive and retries.alive()

    def stop() -> None:
        job.stop()
        retries.stop()

    return Running(ReceiverArrivals(bench.receiver_url, f"/{tag}/"), alive, stop)


def start_senders(bench: Bench, prefix: str, tag: str, mode: Mode) -> Running:
    """``wayline run delivery`` with ``delivery.engine = "senders"``: its own Spark (the
    real-time matching query takes a slot per source partition), its sender processes, on
    this bench's stack and topics."""
    settings = bench.settings_for(prefix, tag, mode)
    endpoints = EndpointService.from_settings(settings)
    bench.trust(seed(bench.database, endpoints, bench.receiver_url, shape(mode, tag)).secrets)
    shutil.rmtree(settings.checkpoint_root / "delivery", ignore_errors=True)  # the last measurement's topics
    commands = senders_process(settings, tag)
    return Running(ReceiverArrivals(bench.receiver_url, f"/{tag}/"), commands.alive, commands.stop,
                   [p.pid for p in commands.processes])


def start_wayline(bench: Bench, prefix: str, tag: str, mode: Mode) -> Running:
    """``wayline run delivery`` and ``wayline run retries`` as a user starts them: every
    delivery setting at its default (whatever the default engine and trigger are when this
    runs), with only this measurement's event topics, and a work topic, intake topic and
    consumer groups of its own so that no measurement reads another's work."""
    settings = bench.settings
    endpoints = EndpointService.from_settings(settings)
    bench.trust(seed(bench.database, endpoints, bench.receiver_url, shape(mode, tag)).secrets)
    shutil.rmtree(settings.checkpoint_root / "delivery", ignore_errors=True)  # the last measurement's topics
    commands = Commands(settings, ["delivery", RETRIES], settings.state_dir / f"wayline-{tag}.log", **{
        "WAYLINE_KAFKA__EVENT_TOPIC_PREFIX": prefix, "WAYLINE_DELIVERY__WORK_TOPIC": work_topic(tag),
        "WAYLINE_DELIVERY__SENDER_GROUP": tag, "WAYLINE_DELIVERY__INTAKE_TOPIC": f"wayline.bench.{tag}.intake",
        "WAYLINE_DELIVERY__INTAKE_GROUP": f"{tag}-intake"})
    return Running(ReceiverArrivals(bench.receiver_url, f"/{tag}/"), commands.alive, commands.stop,
                   [p.pid for p in commands.processes])


def senders_process(settings: Settings, tag: str, more: dict[str, str] | None = None, *, retries: bool = True,
                    log: Path | None = None) -> Commands:
    """``wayline run delivery`` with the senders engine, on ``settings``' stack, event
    topics, batch topic and delivery flags, with a work topic and sender group of its own
    (``tag``), and ``wayline run retries`` beside it unless the caller runs its own;
    ``more`` adds settings as environment variables."""
    delivery = settings.delivery
    return Commands(settings, ["delivery", RETRIES] if retries else ["delivery"], log, **{
        "WAYLINE_DELIVERY__ENGINE": "senders", "WAYLINE_KAFKA__EVENT_TOPIC_PREFIX": settings.kafka.event_topic_prefix,
        "WAYLINE_DELIVERY__BATCH_TOPIC": delivery.batch_topic, "WAYLINE_DELIVERY__WORK_TOPIC": work_topic(tag),
        "WAYLINE_DELIVERY__SENDER_GROUP": tag,
        "WAYLINE_DELIVERY__MAX_OFFSETS_PER_TRIGGER": str(delivery.max_offsets_per_trigger), **(more or {})})


def work_topic(tag: str) -> str:
    return f"wayline.bench.{tag}.work"


def matching_hop(bench: Bench, tag: str, since: float) -> dict[str, float | None]:
    """The senders engine's first hop, for events sent from ``since``: an event's ``time``
    to its work record's Kafka timestamp (stamped as the matching query writes it); the
    rest of the end-to-end latency is the sender processes'."""
    def hop(record: Message) -> tuple[float, float]:
        sent = datetime.fromisoformat(orjson.loads(record.value())["time"]).timestamp()
        return sent, record.timestamp()[1] / 1000 - sent

    rows: list[tuple[float, float]] = []
    read_topic(bench.settings.kafka_bootstrap(), work_topic(tag), hop, rows)
    hops = sorted(latency for sent, latency in rows if sent >= since)
    return {"matching_p50_s": hops[len(hops) // 2] if hops else None,
            "matching_p99_s": hops[int(len(hops) * 0.99)] if hops else None}


STARTERS: dict[str, Callable[[Bench, str, str, Mode], Running]] = {
    "plain": start_plain, "floor": start_floor, "wayline": start_wayline, "job": start_job, "senders": start_senders}


@contextmanager
def running(bench: Bench, system: str, prefix: str, tag: str, mode: Mode) -> Iterator[tuple[Running, MemorySampler]]:
    started = STARTERS[system](bench, prefix, tag, mode)
    try:
        with MemorySampler(started.pids) as memory:
            yield started, memory
    finally:
        started.stop()


def memory_figures(system: str, peaks_mb: dict[str, float]) -> dict[str, float]:
    """The peaks that belong to ``system``: the idle JVM is not the plain sender's, and the
    floor starts no Python workers (those seen are the job's, idle). The JVM is one session
    through every measurement, so its peak includes what earlier ones left on its heap."""
    mine = {"plain": ("process",), "floor": ("jvm",), "wayline": ("process",), "job": ("jvm", "python_workers"),
            "senders": ("process",)}[system]
    return {f"peak_{k}_mb": peaks_mb[k] for k in mine}


def wait_for(started: Running, expected: int) -> dict[str, Any]:
    """The arrivals once ``expected`` events arrived; an error if they stop coming."""
    seen, moved_at = -1, time.time()
    while True:
        totals = started.arrivals.totals()
        if totals["events"] >= expected:
            return totals
        if totals["events"] > seen:
            seen, moved_at = totals["events"], time.time()
        patience = STALL_S if seen else FIRST_ARRIVAL_S
        if time.time() - moved_at > patience or not started.alive():
            raise RuntimeError(f"{totals['events']} of {expected} events arrived; none more for {patience:g} s")
        time.sleep(0.5)


# --- Scenarios ----------------------------------------------------------------------------


def fresh_topics(bench: Bench, tag: str) -> str:
    prefix = f"bench.{tag}.events."
    ensure_topics(bench.settings.kafka_bootstrap(), loadgen.topics(prefix, layout=bench.layout), bench.partitions)
    return prefix


def rate_run(bench: Bench, system: str, tag: str, segments: list[tuple[float, float]],
             mode: Mode = "streaming") -> dict[str, Any]:
    """``mode`` fed at the segments' rates after a primed start; the arrivals, the
    producer's marks, the peak memory, and the CPU seconds the system's processes used
    from the first segment's start to the last event's arrival (None for the systems that
    run in this process)."""
    prefix = fresh_topics(bench, tag)
    bootstrap = bench.settings.kafka_bootstrap()
    with running(bench, system, prefix, tag, mode) as (started, memory):
        # A few events first, so start-up (workers, registry load) is not in the timed part.
        loadgen.produce(bootstrap, bench.events(prefix, f"{tag}p").records(PRIME_EVENTS))
        wait_for(started, PRIME_EVENTS)
        cpu_from = cpu_seconds(started.pids)
        marks = produce_steady(bootstrap, prefix, tag, segments, layout=bench.layout)
        wait_for(started, PRIME_EVENTS + sum(m["sent"] for m in marks))
        cpu_to = cpu_seconds(started.pids)
        cpu = {role: used - cpu_from.get(role, 0.0) for role, used in cpu_to.items()} if started.pids else None
    return {"marks": marks, "memory_peak_mb": memory.peaks_mb, "arrivals": started.arrivals, "cpu_s": cpu}


def steady(bench: Bench, system: str, tag: str, rate: float, mode: Mode = "streaming") -> dict[str, Any]:
    got = rate_run(bench, system, tag, [(rate, bench.args.steady_seconds)], mode)
    mark = got["marks"][0]
    window = got["arrivals"].totals(mark["from"] + bench.args.warmup_s, math.inf)
    hop = matching_hop(bench, tag, mark["from"] + bench.args.warmup_s) if system in ("senders", "wayline") else {}
    cpu = {} if got["cpu_s"] is None else {
        "cpu_s_per_1000": sum(got["cpu_s"].values()) / mark["sent"] * 1000,
        "cpu_s_per_1000_by_role": {role: round(used / mark["sent"] * 1000, 3) for role, used in got["cpu_s"].items()}}
    return {"measure": f"steady {rate:g}/s" if mode == "streaming" else f"batch mode {rate:g}/s",
            "achieved_rate": mark["achieved_rate"],
            "latency_p50_s": window["latency_p50_s"], "latency_p99_s": window["latency_p99_s"],
            "events": mark["sent"], **hop, **cpu, **memory_figures(system, got["memory_peak_mb"])}


def spike(bench: Bench, system: str, tag: str) -> dict[str, Any]:
    args = bench.args
    got = rate_run(bench, system, tag, [(args.spike_base, args.spike_calm_seconds),
                                        (args.spike_peak, args.spike_seconds),
                                        (args.spike_base, args.spike_calm_seconds)])
    before, during, after = got["marks"]
    arrivals: Arrivals = got["arrivals"]
    p99 = {name: arrivals.totals(mark["from"] + (args.warmup_s if name == "before" else 0), mark["to"])["latency_p99_s"]
           for name, mark in (("before", before), ("during", during), ("after", after))}
    return {"measure": "spike", "achieved_rates": [m["achieved_rate"] for m in got["marks"]],
            "p99_before_s": p99["before"], "p99_during_s": p99["during"], "p99_after_s": p99["after"],
            "catch_up_s": catch_up(arrivals, after, p99["before"]),
            **memory_figures(system, got["memory_peak_mb"])}


def catch_up(arrivals: Arrivals, after: dict[str, Any], calm_p99: float | None) -> float | None:
    """Seconds from the spike's end to the first second of events whose p99 is back within
    ``CATCH_UP_FACTOR`` times the p99 before the spike; None if not within the run."""
    if calm_p99 is None:
        return None
    second = after["from"]
    while second < after["to"]:
        p99 = arrivals.totals(second, second + 1)["latency_p99_s"]
        if p99 is not None and p99 <= CATCH_UP_FACTOR * calm_p99:
            return second - after["from"]
        second += 1
    return None


def backlog(bench: Bench, system: str, tag: str, prefix: str, events: int, mode: Mode) -> dict[str, Any]:
    """A backlog already in ``prefix``'s topics, drained from the system's start."""
    began = time.time()
    with running(bench, system, prefix, tag, mode) as (started, memory):
        totals = wait_for(started, events)
    wall = totals["last_at"] - began
    return {"measure": f"{mode} backlog {events:,}", "events": totals["events"], "wall_s": wall,
            "events_per_s": totals["events"] / wall,
            # None when all came at once (the floor's single micro-batch).
            "first_to_last_per_s": (totals["events"] / (totals["last_at"] - totals["first_at"])
                                    if totals["last_at"] > totals["first_at"] else None),
            **memory_figures(system, memory.peaks_mb)}


def one_round(bench: Bench, run: int, scenario: str) -> list[dict[str, Any]]:
    """Every chosen system through one scenario; the systems' order rotates from run to run,
    so none always goes first on a cold JVM or last on a warm one."""
    args = bench.args
    systems = [s for s in SYSTEMS if s in args.systems.split(",")]
    systems = systems[run % len(systems):] + systems[:run % len(systems)]
    stamp = f"r{run}t{int(time.time()) % 100_000}"
    measurements: list[tuple[str, Callable[[], dict[str, Any]]]]
    if scenario in ("backlog", "batch"):
        events = args.backlog_events if scenario == "backlog" else args.batch_events
        mode: Mode = "streaming" if scenario == "backlog" else "batch"
        # One backlog per round, drained by each system in turn from its own start.
        prefix = fresh_topics(bench, f"{stamp}{scenario}")
        loadgen.produce(bench.settings.kafka_bootstrap(), bench.events(prefix, stamp).records(events))
        measurements = [(s, partial(backlog, bench, s, f"{stamp}{scenario}{s}", prefix, events, mode))
                        for s in systems]
    elif scenario == "steady":
        measurements = [(s, partial(steady, bench, s, f"{stamp}s{int(rate)}{s}", rate))
                        for rate in args.rates for s in systems]
    elif scenario == "batch_latency":
        measurements = [(s, partial(steady, bench, s, f"{stamp}b{int(rate)}{s}", rate, "batch"))
                        for rate in args.batch_rates for s in systems if s != "floor"]
    else:
        measurements = [(s, partial(spike, bench, s, f"{stamp}spike{s}")) for s in systems]
    results = []
    for system, measure in measurements:
        result = measure() | {"run": run, "system": system, "layout": bench.layout, "partitions": bench.partitions,
                              "load_average": os.getloadavg()}
        print(json.dumps(result), flush=True)
        results.append(result)
    return results


# --- Report ---------------------------------------------------------------------------------

FIGURES = ("achieved_rate", "latency_p50_s", "latency_p99_s", "matching_p50_s", "matching_p99_s", "events_per_s",
           "first_to_last_per_s", "wall_s", "p99_before_s", "p99_during_s", "p99_after_s", "catch_up_s",
           "cpu_s_per_1000", "peak_jvm_mb", "peak_python_workers_mb", "peak_process_mb")
LAYOUT_NAMES = {"domains": "20 topics", "types": "500 topics", "ingest": "ingest topic"}


def _label(result: dict[str, Any]) -> str:
    layout = result.get("layout", "domains")
    return f"{LAYOUT_NAMES[layout]} × {result.get('partitions', '?')}: {result['measure']}"


def table(results: list[dict[str, Any]]) -> str:
    """Markdown: per layout, measure and figure, each system's median and its runs."""
    systems = [s for s in SYSTEMS if any(r["system"] == s for r in results)]
    lines = ["| measure | figure | " + " | ".join(systems) + " |", "| --- | --- |" + " --- |" * len(systems)]
    for measure in dict.fromkeys(map(_label, results)):
        for figure in FIGURES:
            cells = [_cell([r[figure] for r in results
                            if _label(r) == measure and r["system"] == s and figure in r])
                     for s in systems]
            if any(cells):
                lines.append(f"| {measure} | {figure} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(values: list[Any]) -> str:
    if not values:
        return ""
    # None: not reached within the run (a catch-up that never came).
    numbers = [v if v is not None else math.inf for v in values]
    shown = " · ".join(_number(v) for v in numbers)
    return f"**{_number(statistics.median(numbers))}** ({shown})" if len(numbers) > 1 else _number(numbers[0])


def _number(value: float) -> str:
    if math.isinf(value):
        return "—"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


# --- Main -------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scenarios", default="steady,backlog,batch,spike", help=f"some of {','.join(SCENARIOS)}")
    parser.add_argument("--systems", default="plain,wayline", help=f"some of {','.join(SYSTEMS)}")
    parser.add_argument("--rates", type=lambda t: [float(r) for r in t.split(",")], default=[300.0, 1000.0, 5000.0])
    parser.add_argument("--steady-seconds", type=float, default=30)
    parser.add_argument("--warmup-s", type=float, default=2.0, help="first seconds of a steady phase not timed")
    parser.add_argument("--backlog-events", type=int, default=100_000)
    parser.add_argument("--batch-events", type=int, default=400_000)
    parser.add_argument("--spike-base", type=float, default=5000)
    parser.add_argument("--spike-peak", type=float, default=50_000)
    parser.add_argument("--spike-seconds", type=float, default=30)
    parser.add_argument("--spike-calm-seconds", type=float, default=30, help="at the base rate, before and after")
    parser.add_argument("--layouts", type=lambda t: t.split(","), default=list(loadgen.LAYOUTS),
                        help="event topics, each layout measured in turn: domains (a topic per domain, 20: the "
                             "demo's), types (a topic per event type, 500), ingest (one topic for every type)")
    parser.add_argument("--batch-rates", type=lambda t: [float(r) for r in t.split(",")], default=[300.0, 1000.0],
                        help="batch_latency: events/s in batch mode (1,000 events or 1 s, so the second decides)")
    parser.add_argument("--source-partitions", type=int, help="partitions per event topic (kafka.topic_partitions)")
    # Unset: the job's own defaults (whatever the job is when this runs); the floor uses the same.
    parser.add_argument("--trigger-interval", type=float, help="delivery.trigger_interval_s")
    parser.add_argument("--per-trigger", type=int, help="delivery.max_offsets_per_trigger in streaming scenarios")
    parser.add_argument("--batch-per-trigger", type=int, help="delivery.max_offsets_per_trigger in the batch scenario")
    parser.add_argument("--send-partitions", type=int, help="delivery.send_partitions")
    parser.add_argument("--deadline", type=float, help="delivery.stage_deadline_s")
    args = parser.parse_args()
    unknown = (set(args.scenarios.split(",")) - set(SCENARIOS) | set(args.systems.split(",")) - set(SYSTEMS)
               | set(args.layouts) - set(loadgen.LAYOUTS))
    if unknown:
        parser.error(f"unknown scenarios or systems: {', '.join(sorted(unknown))}")
    return args


def main() -> None:
    args = parse_args()
    state = RESULTS / "delivery_targets-state"
    with fresh_stack(state, registry={"url_allow_list": ["127.0.0.1/32"]}) as (settings, database):
        results = run_all(settings, database, args)
    record_results(f"delivery_targets-{int(time.time())}", {"args": vars(args), "results": results})
    print(table(results))


def run_all(settings: Settings, database: Database, args: argparse.Namespace) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    with bench_session(settings, database, args) as bench:
        for layout in args.layouts:
            bench.layout = layout
            for run in range(args.runs):
                for scenario in (s for s in SCENARIOS if s in args.scenarios.split(",")):
                    results += one_round(bench, run, scenario)
    return results


@contextmanager
def bench_session(settings: Settings, database: Database, args: argparse.Namespace,
                  spark: bool = True) -> Iterator[Bench]:
    """The receiver process and (unless ``spark`` is false: no system in this process needs
    it) the Spark session, stopped on the way out."""
    # The receiver is forked before the Spark JVM starts; later processes are spawned.
    port_in, port_out = multiprocessing.Pipe(duplex=False)
    secrets_in, secrets_out = multiprocessing.Pipe(duplex=False)
    receiver = multiprocessing.Process(target=receive, args=(port_out, secrets_in), daemon=True)
    receiver.start()
    session = spark_session(settings) if spark else None
    try:
        yield Bench(session, settings, database, f"http://127.0.0.1:{port_in.recv()}", secrets_out.send, args)
    finally:
        if session is not None:
            session.stop()
        receiver.kill()


if __name__ == "__main__":
    main()
