"""Benchmark: the delivery targets (issues 13 and 25), each beside its baselines in the same run.

The *systems* read the same kind of traffic on this machine (broker, PostgreSQL, Spark
and the receiver all here):

- **plain**: ``bench/toolkit/plain_sender.py``, a plain Kafka consumer → route by type → sign →
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
import os
import statistics
import time
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any

import orjson
from confluent_kafka import Message

from toolkit import cli
from toolkit.processes import CpuTimeline
from toolkit.results import RESULTS, markdown_table, record_results
from toolkit.stack import LOOPBACK, fresh_stack
from toolkit.stats import quantile
from toolkit.systems import (
    SYSTEMS,
    Arrivals,
    Bench,
    bench_session,
    fresh_topics,
    intake_topic,
    rate_run,
    running,
    wait_for,
    work_topic,
)
from toolkit.topics import drop_topics, read_topic
from wayline.core.settings import Settings
from wayline.registry.db import Database
from wayline.registry.subscription import Mode
from wayline.stack import loadgen

SCENARIOS = ("steady", "batch_latency", "backlog", "batch", "spike")
CATCH_UP_FACTOR = 2.0


TIMELINE_S = 10
"""The steady scenario's timeline: p99s per this many seconds of send time, to tell a
start-up stall from a lasting lag (the two give the same p50 over a short phase)."""


HOPS = ("source", "intake", "matching")
"""Where an event's time goes before its sender (:func:`hops`), in the order it passes."""


def hops(bench: Bench, system: str, prefix: str, tag: str, since: float) -> dict[str, list[tuple[float, float]]]:
    """For events sent from ``since``: each event's ``time`` and from it to the Kafka
    timestamp of its record in each topic it passes, per hop: ``source`` (its event topic,
    appended by the broker: the load generator's and the broker's part, every system's),
    and for Wayline ``intake`` (the intake topic, when the layout uses it) and
    ``matching`` (the work topic, stamped as the matching query writes it). The rest of the
    end-to-end latency is the sender processes'."""
    def hop(record: Message) -> tuple[float, float]:
        sent = datetime.fromisoformat(orjson.loads(record.value())["time"]).timestamp()
        return sent, record.timestamp()[1] / 1000 - sent

    topics = {"source": loadgen.topics(prefix, layout=bench.layout)}
    if system in ("senders", "wayline"):
        topics |= {"intake": [intake_topic(tag)], "matching": [work_topic(tag)]}
    found: dict[str, list[tuple[float, float]]] = {}
    for name, names in topics.items():
        rows: list[tuple[float, float]] = []
        read_topic(bench.settings.kafka_bootstrap(), names, hop, rows)
        if rows:
            found[name] = [(sent, latency) for sent, latency in rows if sent >= since]
    return found


def hop_figures(found: dict[str, list[tuple[float, float]]]) -> dict[str, float | None]:
    figures: dict[str, float | None] = {}
    for name, rows in found.items():
        latencies = sorted(latency for _, latency in rows)
        figures |= {f"{name}_p50_s": quantile(latencies, 0.5), f"{name}_p99_s": quantile(latencies, 0.99)}
    return figures


def timeline(arrivals: Arrivals, found: dict[str, list[tuple[float, float]]], began: float,
             ended: float) -> list[dict[str, Any]]:
    """End-to-end p99 and each hop's per ``TIMELINE_S`` of send time from ``began``."""
    rows = []
    for start in range(0, math.ceil(ended - began), TIMELINE_S):
        low, high = began + start, began + start + TIMELINE_S
        row: dict[str, Any] = {"from_s": start, "p99_s": arrivals.totals(low, high)["latency_p99_s"]}
        for name, hop_rows in found.items():
            window = sorted(latency for sent, latency in hop_rows if low <= sent < high)
            row[f"{name}_p99_s"] = quantile(window, 0.99) if window else None
        rows.append(row)
    return rows


def memory_figures(system: str, peaks_mb: dict[str, float], by_role_mb: dict[str, float]) -> dict[str, Any]:
    """The peaks that belong to ``system``: the idle JVM is not the plain sender's, and the
    floor starts no Python workers (those seen are the job's, idle). The JVM is one session
    through every measurement, so its peak includes what earlier ones left on its heap.
    With the system's own processes, each role's own peak beside their sum's."""
    mine = {"plain": ("process",), "floor": ("jvm",), "wayline": ("process",), "job": ("jvm", "python_workers"),
            "senders": ("process",)}[system]
    figures: dict[str, Any] = {f"peak_{k}_mb": peaks_mb[k] for k in mine}
    if "process" in mine:
        figures["peak_process_mb_by_role"] = {role: round(mb) for role, mb in sorted(by_role_mb.items())}
    return figures


# --- Scenarios ----------------------------------------------------------------------------


def steady(bench: Bench, system: str, tag: str, rate: float, mode: Mode = "streaming") -> dict[str, Any]:
    got = rate_run(bench, system, tag, [(rate, bench.args.steady_seconds)], mode)
    mark = got["marks"][0]
    since = mark["from"] + bench.args.warmup_s
    window = got["arrivals"].totals(since, math.inf)
    found = hops(bench, system, got["prefix"], tag, since)
    cpu = {} if got["cpu_s"] is None else {
        "cpu_s_per_1000": sum(got["cpu_s"].values()) / mark["sent"] * 1000,
        "cpu_s_per_1000_by_role": {role: round(used / mark["sent"] * 1000, 3) for role, used in got["cpu_s"].items()}}
    return {"measure": f"steady {rate:g}/s" if mode == "streaming" else f"batch mode {rate:g}/s",
            "achieved_rate": mark["achieved_rate"],
            "latency_p50_s": window["latency_p50_s"], "latency_p99_s": window["latency_p99_s"],
            "events": mark["sent"], **hop_figures(found), **cpu,
            **memory_figures(system, got["memory_peak_mb"], got["memory_peak_by_role_mb"]),
            "timeline": timeline(got["arrivals"], found, since, mark["to"])}


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
            **memory_figures(system, got["memory_peak_mb"], got["memory_peak_by_role_mb"])}


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
    with running(bench, system, prefix, tag, mode) as (started, memory), CpuTimeline(started.pids) as cpu:
        totals = wait_for(started, events)
        time.sleep(1.0)  # one more CPU sample after the last arrival
    wall = totals["last_at"] - began
    return {"measure": f"{mode} backlog {events:,}", "events": totals["events"], "wall_s": wall,
            "events_per_s": totals["events"] / wall,
            # None when all came at once (the floor's single micro-batch).
            "first_to_last_per_s": (totals["events"] / (totals["last_at"] - totals["first_at"])
                                    if totals["last_at"] > totals["first_at"] else None),
            # Where the CPU went before the first request and during the drain (the
            # machine's too: the broker, the receiver and PostgreSQL share its two cores).
            "cpu_start": cpu.between(began, totals["first_at"]), "cpu_drain": cpu.between(totals["first_at"], totals["last_at"]),
            **memory_figures(system, memory.peaks_mb, memory.peaks_by_role_mb)}


def one_round(bench: Bench, run: int, scenario: str) -> list[dict[str, Any]]:
    """Every chosen system through one scenario; the systems' order rotates from run to run,
    so none always goes first on a cold JVM or last on a warm one."""
    args = bench.args
    systems = [s for s in SYSTEMS if s in args.systems]
    systems = systems[run % len(systems):] + systems[:run % len(systems)]
    stamp = f"r{run}t{int(time.time()) % 100_000}"
    measurements: list[tuple[str, str, Callable[[], dict[str, Any]]]]
    if scenario in ("backlog", "batch"):
        events = args.backlog_events if scenario == "backlog" else args.batch_events
        mode: Mode = "streaming" if scenario == "backlog" else "batch"
        # One backlog per round, drained by each system in turn from its own start.
        prefix = fresh_topics(bench, f"{stamp}{scenario}")
        loadgen.produce(bench.settings.kafka_bootstrap(), bench.events(prefix, stamp).records(events))
        measurements = [(s, f"{stamp}{scenario}{s}", partial(backlog, bench, s, f"{stamp}{scenario}{s}", prefix,
                                                             events, mode)) for s in systems]
    elif scenario == "steady":
        measurements = [(s, f"{stamp}s{int(rate)}{s}", partial(steady, bench, s, f"{stamp}s{int(rate)}{s}", rate))
                        for rate in args.rates for s in systems]
    elif scenario == "batch_latency":
        measurements = [(s, f"{stamp}b{int(rate)}{s}", partial(steady, bench, s, f"{stamp}b{int(rate)}{s}", rate, "batch"))
                        for rate in args.batch_rates for s in systems if s != "floor"]
    else:
        measurements = [(s, f"{stamp}spike{s}", partial(spike, bench, s, f"{stamp}spike{s}")) for s in systems]
    results = []
    for system, tag, measure in measurements:
        result = measure() | {"run": run, "system": system, "layout": bench.layout, "partitions": bench.partitions,
                              "load_average": os.getloadavg()}
        print(json.dumps(result), flush=True)
        results.append(result)
        # Each measurement's topics go with it (toolkit.topics.drop_topics), a backlog's shared ones after the last.
        drop_topics(bench.settings.kafka_bootstrap(), tag)
    if scenario in ("backlog", "batch"):
        drop_topics(bench.settings.kafka_bootstrap(), f"{stamp}{scenario}.")
    return results


# --- Report ---------------------------------------------------------------------------------

FIGURES = ("achieved_rate", "latency_p50_s", "latency_p99_s", "source_p99_s", "intake_p99_s", "matching_p50_s",
           "matching_p99_s", "events_per_s",
           "first_to_last_per_s", "wall_s", "p99_before_s", "p99_during_s", "p99_after_s", "catch_up_s",
           "cpu_s_per_1000", "peak_jvm_mb", "peak_python_workers_mb", "peak_process_mb")
LAYOUT_NAMES = {"domains": "20 topics", "types": "500 topics", "ingest": "ingest topic"}


def _label(result: dict[str, Any]) -> str:
    layout = result.get("layout", "domains")
    return f"{LAYOUT_NAMES[layout]} × {result.get('partitions', '?')}: {result['measure']}"


def table(results: list[dict[str, Any]]) -> str:
    """Markdown: per layout, measure and figure, each system's median and its runs."""
    systems = [s for s in SYSTEMS if any(r["system"] == s for r in results)]
    rows = []
    for measure in dict.fromkeys(map(_label, results)):
        for figure in FIGURES:
            cells = [_cell([r[figure] for r in results
                            if _label(r) == measure and r["system"] == s and figure in r])
                     for s in systems]
            if any(cells):
                rows.append([measure, figure, *cells])
    return markdown_table(["measure", "figure", *systems], rows)


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
    parser = cli.parser(__doc__, runs=3)
    parser.add_argument("--scenarios", type=cli.names(*SCENARIOS), default=["steady", "backlog", "batch", "spike"],
                        help=f"some of {','.join(SCENARIOS)}")
    parser.add_argument("--systems", type=cli.names(*SYSTEMS), default=["plain", "wayline"],
                        help=f"some of {','.join(SYSTEMS)}")
    parser.add_argument("--rates", type=cli.comma(float), default=[300.0, 1000.0, 5000.0])
    parser.add_argument("--steady-seconds", type=float, default=30)
    parser.add_argument("--warmup-s", type=float, default=2.0, help="first seconds of a steady phase not timed")
    parser.add_argument("--backlog-events", type=int, default=100_000)
    parser.add_argument("--batch-events", type=int, default=400_000)
    parser.add_argument("--spike-base", type=float, default=5000)
    parser.add_argument("--spike-peak", type=float, default=50_000)
    parser.add_argument("--spike-seconds", type=float, default=30)
    parser.add_argument("--spike-calm-seconds", type=float, default=30, help="at the base rate, before and after")
    parser.add_argument("--layouts", type=cli.names(*loadgen.LAYOUTS), default=list(loadgen.LAYOUTS),
                        help="event topics, each layout measured in turn: domains (a topic per domain, 20: the "
                             "demo's), types (a topic per event type, 500), ingest (one topic for every type)")
    parser.add_argument("--batch-rates", type=cli.comma(float), default=[300.0, 1000.0],
                        help="batch_latency: events/s in batch mode (1,000 events or 1 s, so the second decides)")
    parser.add_argument("--source-partitions", type=int, help="partitions per event topic (kafka.topic_partitions)")
    # Unset: the job's own defaults (whatever the job is when this runs); the floor uses the same.
    cli.delivery_flags(parser)
    parser.add_argument("--batch-per-trigger", type=int, help="delivery.max_offsets_per_trigger in the batch scenario")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    state = RESULTS / "delivery_targets-state"
    with fresh_stack(state, registry={"url_allow_list": LOOPBACK}) as (settings, database):
        results = run_all(settings, database, args)
    record_results(f"delivery_targets-{int(time.time())}", {"args": vars(args), "results": results}, args.out)
    print(table(results))


def run_all(settings: Settings, database: Database, args: argparse.Namespace) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    with bench_session(settings, database, args) as bench:
        for layout in args.layouts:
            bench.layout = layout
            for run in range(args.runs):
                for scenario in (s for s in SCENARIOS if s in args.scenarios):
                    results += one_round(bench, run, scenario)
    return results


if __name__ == "__main__":
    main()
