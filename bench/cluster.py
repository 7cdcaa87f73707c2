"""Benchmark: the delivery and rules jobs on a Spark standalone cluster of 1 and 2 workers
against local[2].

Each configuration runs each benchmark script in its own process, so each gets its own
SparkSession against its master: ``local[2]``; then ``wayline cluster``'s master with one
worker of 1 core; then with two workers of 1 core each. The scripts: ``bench/delivery.py``
(batch mode, a backlog drained by the job) and ``bench/rules.py`` (one rule mix over events
already in Kafka; see those files). All on this machine, sharing its cores with the broker,
PostgreSQL and the receiver, so the figures give the cost of going distributed (executor
processes, task serialisation, the driver's file server), not a speed-up.

Run: .venv/bin/python bench/cluster.py [--runs 3] [--only delivery|rules] [--batch-events 20000]
     [--rules "10 rules (7/2/1)"] [--rules-events 50000]
Results: bench/results/cluster-<time>.json; medians go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit import cli
from toolkit.results import RESULTS, record_results
from wayline.core.settings import Settings
from wayline.stack import cluster

BENCH = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Script:
    """A benchmark script, its arguments, and where its rates are in the JSON it writes."""

    file: str
    written: str
    arguments: Callable[[argparse.Namespace], list[str]]
    rates: Callable[[dict[str, Any], argparse.Namespace], dict[str, Any]]


SCRIPTS = {
    "delivery": Script(
        "delivery.py", "delivery-*.json",
        lambda args: ["--runs", str(args.runs), "--measures", "batch", "--batch-events", str(args.batch_events)],
        lambda data, args: {"rates": [run["events_per_s"] for run in data["runs"]], "runs": data["runs"]},
    ),
    # rules.py measures a fresh query over events already in Kafka; "warm" leaves out each
    # run's first micro-batch, which also pays for starting the query.
    "rules": Script(
        "rules.py", "rules.json",
        lambda args: ["--runs", str(args.runs), "--only", args.rules, "--events", str(args.rules_events)],
        lambda data, args: {"rates": data["results"][args.rules]["rates"],
                            "warm_rates": data["results"][args.rules]["warm_rates"]},
    ),
}


def script_runs(script: Script, master: str, args: argparse.Namespace) -> dict[str, Any]:
    started = time.time()
    environment = os.environ | {
        "WAYLINE_SPARK__MASTER": master,
        "WAYLINE_SPARK__EXTRA_CONF": json.dumps({"spark.executor.memory": args.executor_memory}),
    }
    subprocess.run([sys.executable, str(BENCH / script.file), *script.arguments(args)], env=environment,
                   check=True, cwd=BENCH, stdout=subprocess.DEVNULL)
    # rules.py rewrites one file, delivery.py writes a new one each time: the run's is the newer.
    [written] = [path for path in RESULTS.glob(script.written) if path.stat().st_mtime >= started]
    return script.rates(json.loads(written.read_text()), args)


def all_runs(master: str, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    return {name: script_runs(SCRIPTS[name], master, args) for name in args.only}


def on_cluster(workers: int, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    settings = Settings(state_dir=RESULTS / "cluster-state", cluster={
        "workers": workers, "worker_cores": 1, "worker_memory": args.worker_memory})
    state = cluster.up(settings)
    try:
        return all_runs(state.master_url, args)
    finally:
        cluster.down(settings)


def main() -> None:
    parser = cli.parser(__doc__, runs=3)
    parser.add_argument("--only", action="append", choices=sorted(SCRIPTS),
                        help="run only these benchmarks (default: all)")
    parser.add_argument("--batch-events", type=int, default=20_000)
    parser.add_argument("--rules", default="10 rules (7/2/1)", help="rules.py's configuration to run")
    parser.add_argument("--rules-events", type=int, default=50_000)
    parser.add_argument("--worker-memory", default="1536m")
    parser.add_argument("--executor-memory", default="1g")
    args = parser.parse_args()
    args.only = args.only or list(SCRIPTS)
    configurations = {
        "local[2]": lambda: all_runs("local[2]", args),
        "standalone, 1 worker x 1 core": lambda: on_cluster(1, args),
        "standalone, 2 workers x 1 core": lambda: on_cluster(2, args),
    }
    results: dict[str, dict[str, Any]] = {name: {} for name in args.only}
    for configuration, measure in configurations.items():
        for name, runs in measure().items():
            median = statistics.median(runs["rates"])
            baseline = results[name].get("local[2]", {"median_events_per_s": median})["median_events_per_s"]
            results[name][configuration] = {"median_events_per_s": median, "ratio_to_local": median / baseline, **runs}
            print(f"{name}, {configuration}: median {median:,.0f} events/s, {median / baseline:.2f} of local[2] "
                  f"({', '.join(f'{r:,.0f}' for r in runs['rates'])})", flush=True)
    summary = {"batch_events": args.batch_events, "rules": args.rules,
               "rules_events": args.rules_events, "benchmarks": results}
    record_results(f"cluster-{int(time.time())}", summary, args.out)


if __name__ == "__main__":
    main()
