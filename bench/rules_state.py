"""Benchmark: one stateful group of the rules job in plain Python, kept and resumed.

What the rules job's Python processor does for one (key spec, shard) group per micro-batch,
without Spark: the 10 MATCH_RECOGNIZE patterns of ``bench/rules.py``'s 100-rule mix over
that benchmark's stream (100,000 users, one hour of event time, micro-batches of 25,000
events, or ``--batch``), restricted to the users of one shard of ``--shards``. Per micro-batch it times

- *kept*: the worker holds the group's evaluator: ``process``, ``snapshot`` and pickling
  the blob (what a task costs when Spark gives it to the worker that ran it last);
- *resumed*: the worker does not: unpickling the stored blob, a new ``GroupEvaluator``
  from it, then the same (a cache miss, about half the groups in the job).

Both paths must emit the same events (checked). Prints the medians over the micro-batches
after the first, in CPU ms of this process per group and micro-batch (CPU time, not wall
time: the machine is shared), and the blob's size.

Run: .venv/bin/python bench/rules_state.py [--events 250000] [--shards 64] [--repeat 3] [--gc 100000,50,100]
Pure Python: no stack, no Spark.
"""

from __future__ import annotations

import gc
import pickle
import statistics
import time
import zlib
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson

from toolkit import cli
from toolkit.results import record_results
from toolkit.rules_mix import PATTERNS, stream
from wayline.rules.engine import ActiveRule, GroupEvaluator
from wayline.rules.rule import compile_rule

LATENESS = timedelta(seconds=5)


def group_rows(events: int, shards: int, batch: int, seed: int = 7) -> list[list[tuple[str, dict[str, Any]]]]:
    """The rows of shard 0, in micro-batches of ``batch`` events of the whole stream."""
    batches: list[list[tuple[str, dict[str, Any]]]] = [[] for _ in range(-(-events // batch))]
    for n, event in enumerate(stream(events, seed)):
        key = orjson.dumps([event["data"]["user"]]).decode()
        if zlib.crc32(key.encode()) % shards:
            continue
        batches[n // batch].append((key, {
            "id": event["id"], "type": event["type"], "source": event["source"], "tenantid": event["tenantid"],
            "event_time": event["time"], "data": event["data"],
        }))
    return batches


def run(rules: list[ActiveRule], batches: list[list[tuple[str, dict[str, Any]]]]) -> dict[str, Any]:
    kept = GroupEvaluator(rules)
    blob = pickle.dumps((None, None))
    newest: datetime | None = None
    timings: dict[str, list[float]] = {"kept": [], "resumed": []}
    outputs: dict[str, list[str]] = {"kept": [], "resumed": []}
    for rows in batches:
        watermark = newest - LATENESS if newest is not None else None
        started = time.process_time()
        result = kept.process(rows, watermark)
        pickle.dumps((kept.watermark, kept.snapshot()), protocol=pickle.HIGHEST_PROTOCOL)
        timings["kept"].append(time.process_time() - started)
        outputs["kept"] += [emitted.id for emitted in result.emitted]

        started = time.process_time()
        mark, state = pickle.loads(blob)
        resumed = GroupEvaluator(rules, state, watermark=mark)
        result = resumed.process(rows, watermark)
        blob = pickle.dumps((resumed.watermark, resumed.snapshot()), protocol=pickle.HIGHEST_PROTOCOL)
        timings["resumed"].append(time.process_time() - started)
        outputs["resumed"] += [emitted.id for emitted in result.emitted]
        newest = max([row["event_time"] for _, row in rows], default=newest)
    assert sorted(outputs["kept"]) == sorted(outputs["resumed"]), "kept and resumed evaluators disagree"
    return {"timings": timings, "blob": len(blob), "emitted": len(outputs["kept"])}


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--events", type=int, default=250_000)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--batch", type=int, default=25_000, help="events of the whole stream per micro-batch")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--gc", help="the collector's thresholds, e.g. 100000,50,100 (the rules job's "
                        "workers: wayline.pipelines.worker_cache.GC_THRESHOLDS); default: the interpreter's")
    args = parser.parse_args()
    if args.gc:
        gc.set_threshold(*map(int, args.gc.split(",")))
    rules = [ActiveRule(f"bench-{i}", 1, f"bench-{i}", compile_rule(PATTERNS[i % len(PATTERNS)].format(i=i)),
                        "bench.rules.out", "bench.alert", 100_000, 60_000) for i in range(10)]
    batches = group_rows(args.events, args.shards, args.batch)
    rows = sum(map(len, batches))
    print(f"{rows} rows in {len(batches)} micro-batches for one of {args.shards} shards, 10 patterns, "
          f"gc thresholds {gc.get_threshold()} ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)")
    medians: dict[str, list[float]] = {"kept": [], "resumed": []}
    for _ in range(args.repeat):
        measured = run(rules, batches)
        for path, seconds in measured["timings"].items():
            medians[path].append(statistics.median(seconds[1:]) * 1000)
    for path, values in medians.items():
        print(f"  {path:8} median {statistics.median(values):8.2f} ms per group and micro-batch   "
              f"repeats {', '.join(f'{value:.2f}' for value in values)}")
    print(f"  blob after the last micro-batch: {measured['blob']:,} bytes; {measured['emitted']} matches")
    record_results("rules_state", {"args": vars(args), "rows": rows, "micro_batches": len(batches),
                                   "gc_thresholds": gc.get_threshold(),
                                   "median_ms": {path: statistics.median(values) for path, values in medians.items()},
                                   "repeats_ms": medians, "blob_bytes": measured["blob"],
                                   "matches": measured["emitted"]}, args.out)


if __name__ == "__main__":
    main()
