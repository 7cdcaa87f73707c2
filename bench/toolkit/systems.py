"""The delivery systems the delivery benchmarks start, feed and count, on one stack with
one receiver (``bench/delivery_targets.py`` describes each):

- **plain**: :mod:`toolkit.plain_sender` in a process of its own, the baseline;
- **floor**: a Structured Streaming query on the same topics whose ``foreachBatch`` runs
  one trivial Spark job: Spark's own limit for a micro-batch;
- **wayline**: ``wayline run delivery`` and ``wayline run retries`` as a user starts them;
- **job**: the micro-batch engine's delivery job, through ``start_delivery``, in this process;
- **senders**: ``wayline run delivery`` with ``delivery.engine = "senders"``.

Every system but the floor delivers to the signature-checking receiver under the same
registry shape (:func:`shape`), one path prefix per measurement, which counts its arrivals.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from toolkit import plain_sender
from toolkit.processes import MemorySampler, cpu_seconds
from toolkit.produce import SPAWN, produce_steady
from toolkit.receiver import Trust, signature_receiver, totals
from toolkit.stack import wayline
from toolkit.stats import weighted_quantile
from toolkit.topics import settle
from toolkit.waiting import while_arriving
from wayline.core.kafka import ensure_topics
from wayline.core.secret import Secret
from wayline.core.settings import Settings
from wayline.delivery.metrics import DeliveryMetrics
from wayline.delivery.runtime.intake import intake_partitions
from wayline.pipelines.delivery import start_delivery
from wayline.pipelines.source import read_kafka
from wayline.registry import subscription
from wayline.registry.db import Database
from wayline.registry.endpoint import EndpointService, NoAuth
from wayline.registry.subscription import Mode
from wayline.stack import loadgen
from wayline.stack.seed import SeedEndpoint, seed
from wayline.stack.spark import spark_session

SYSTEMS = ("plain", "floor", "wayline", "job", "senders")
SOURCE_PARTITIONS: dict[loadgen.Layout, int] = {"domains": 2, "types": 1, "ingest": 2}
"""Partitions per event topic in each layout unless ``--source-partitions`` says otherwise:
the demo's 20 topics x 2, the brief's 500 topics x 1, an ingest topic of 2."""
ENDPOINTS = 50
"""Endpoints the load is spread over. The work topic is keyed by endpoint (one endpoint's
limits hold in one sender process), so with 5, which sender process got which endpoints
was a coin toss per run: in one run of issue 25's, one process got every request and the
other none. The product's users have thousands; 50 spreads the load over the processes as
theirs does, and changes nothing for the plain sender, which routes by type."""
# Give up when nothing new arrived for this long; the first arrival may take longer (a
# job's first micro-batch starts its Python workers and loads the registry).
STALL_S = 120.0
FIRST_ARRIVAL_S = 300.0
PRIME_EVENTS = 200
APPENDED = {"message.timestamp.type": "LogAppendTime"}
"""The config of the topics a bench makes and reads back: records stamped by the broker
as appended, so that each hop's share of an event's latency shows in its records."""
BUCKET_MS = 10


def shape(mode: subscription.Mode, run: str) -> list[SeedEndpoint]:
    """The registry shape: ``ENDPOINTS`` endpoints under ``/<run>/<mode>/``, each subscribed
    to its share of the load generator's event types for every tenant, so that every
    event is delivered once."""
    names = [t.name for t in loadgen.catalog()]
    per = len(names) // ENDPOINTS
    extra: dict[str, Any] = {"max_count": 1000, "max_wait_ms": 1000} if mode == "batch" else {}
    return [
        SeedEndpoint(f"/{run}/{mode}/{n}", "Bench", NoAuth(), (subscription.SubscriptionIn(
            endpoint_id="", event_types=names[n * per:(n + 1) * per], mode=mode, **extra),))
        for n in range(ENDPOINTS)
    ]


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
        return totals(self.url, self.prefix, sent_from, sent_to)


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


# --- The systems ---------------------------------------------------------------------------


@dataclass
class Bench:
    """What every measurement shares: the stack, the Spark session, the receiver, the flags."""

    spark: Any
    settings: Settings
    database: Database
    receiver_url: str
    trust: Trust
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
            **env, "WAYLINE_STATE_DIR": str(settings.state_dir),
            "WAYLINE_REGISTRY__URL_ALLOW_LIST": json.dumps(settings.registry.url_allow_list),
            "WAYLINE_DELIVERY__STAGE_DEADLINE_S": str(settings.delivery.stage_deadline_s),
            "WAYLINE_DELIVERY__METRICS_PORT": "0", "WAYLINE_DELIVERY__RETRY_METRICS_PORT": "0",
        }
        self.processes = [wayline("run", command, env=env, log=log) for command in commands]

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
    # Made before Wayline would make it, as it would (whether or not the layout needs it),
    # but stamped by the broker as each copy is appended: the intake's hop shows in the
    # copies' timestamps (Wayline keeps the original's).
    ensure_topics(settings.kafka_bootstrap(), [intake_topic(tag)], intake_partitions(settings, os.cpu_count() or 1),
                  APPENDED)
    commands = Commands(settings, ["delivery", RETRIES], settings.state_dir / f"wayline-{tag}.log", **{
        "WAYLINE_KAFKA__EVENT_TOPIC_PREFIX": prefix, "WAYLINE_DELIVERY__WORK_TOPIC": work_topic(tag),
        "WAYLINE_DELIVERY__SENDER_GROUP": tag, "WAYLINE_DELIVERY__INTAKE_TOPIC": intake_topic(tag),
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


def intake_topic(tag: str) -> str:
    return f"wayline.bench.{tag}.intake"


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


def wait_for(started: Running, expected: int) -> dict[str, Any]:
    """The arrivals once ``expected`` events arrived; an error if they stop coming."""
    got = while_arriving(started.arrivals.totals, lambda t: t["events"], expected, stall_s=STALL_S,
                         first_s=FIRST_ARRIVAL_S, alive=started.alive)
    if got["events"] < expected:
        patience = STALL_S if got["events"] else FIRST_ARRIVAL_S
        raise RuntimeError(f"{got['events']} of {expected} events arrived; none more for {patience:g} s")
    return got


def fresh_topics(bench: Bench, tag: str) -> str:
    """The layout's event topics for one measurement, made and settled (:func:`~toolkit.topics.settle`): empty,
    and past the broker's first writes; their prefix."""
    prefix = f"bench.{tag}.events."
    topics = loadgen.topics(prefix, layout=bench.layout)
    ensure_topics(bench.settings.kafka_bootstrap(), topics, bench.partitions, APPENDED)
    settle(bench.settings.kafka_bootstrap(), topics)
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
    return {"prefix": prefix, "marks": marks, "memory_peak_mb": memory.peaks_mb, "memory_peak_by_role_mb": memory.peaks_by_role_mb,
            "arrivals": started.arrivals, "cpu_s": cpu}


@contextmanager
def bench_session(settings: Settings, database: Database, args: argparse.Namespace,
                  spark: bool = True) -> Iterator[Bench]:
    """The receiver process and (unless ``spark`` is false: no system in this process needs
    it) the Spark session, stopped on the way out."""
    # The receiver is forked before the Spark JVM starts; later processes are spawned.
    with signature_receiver() as (url, trust):
        session = spark_session(settings) if spark else None
        try:
            yield Bench(session, settings, database, url, trust, args)
        finally:
            if session is not None:
                session.stop()
