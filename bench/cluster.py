"""Benchmark: the delivery job on a Spark standalone cluster of 1 and 2 workers against local[2].

Each configuration runs ``bench/delivery.py`` (batch mode, a backlog drained by the job;
see that file) in its own process, so each gets its own SparkSession against its master:
``local[2]``; then ``wayline cluster``'s master with one worker of 1 core; then with two
workers of 1 core each. All on this machine, sharing its cores with the broker,
PostgreSQL and the receiver, so the figures give the cost of going distributed (executor
processes, task serialisation, the driver's file server), not a speed-up.

Run: .venv/bin/python bench/cluster.py [--runs 3] [--batch-events 20000]
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
from pathlib import Path
from typing import Any

from fresh_stack import machine
from wayline.core.settings import Settings
from wayline.stack import cluster

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"


def delivery_runs(master: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    before = set(RESULTS.glob("delivery-*.json"))
    environment = os.environ | {
        "WAYLINE_SPARK__MASTER": master,
        "WAYLINE_SPARK__EXTRA_CONF": json.dumps({"spark.executor.memory": args.executor_memory}),
    }
    subprocess.run([sys.executable, str(BENCH / "delivery.py"), "--runs", str(args.runs), "--measures", "batch",
                    "--batch-events", str(args.batch_events)], env=environment, check=True, cwd=BENCH,
                   stdout=subprocess.DEVNULL)
    [written] = set(RESULTS.glob("delivery-*.json")) - before
    return list(json.loads(written.read_text())["runs"])


def on_cluster(workers: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    settings = Settings(state_dir=RESULTS / "cluster-state", cluster={
        "workers": workers, "worker_cores": 1, "worker_memory": args.worker_memory})
    state = cluster.up(settings)
    try:
        return delivery_runs(state.master_url, args)
    finally:
        cluster.down(settings)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch-events", type=int, default=20_000)
    parser.add_argument("--worker-memory", default="1536m")
    parser.add_argument("--executor-memory", default="1g")
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    configurations = {
        "local[2]": lambda: delivery_runs("local[2]", args),
        "standalone, 1 worker x 1 core": lambda: on_cluster(1, args),
        "standalone, 2 workers x 1 core": lambda: on_cluster(2, args),
    }
    results: dict[str, Any] = {}
    for name, measure in configurations.items():
        runs = measure()
        rates = [run["events_per_s"] for run in runs]
        results[name] = {"median_events_per_s": statistics.median(rates), "rates": rates, "runs": runs}
        print(f"{name}: median {statistics.median(rates):,.0f} events/s ({', '.join(f'{r:,.0f}' for r in rates)})",
              flush=True)
    summary = {**machine(), "batch_events": args.batch_events, "configurations": results}
    (RESULTS / f"cluster-{int(time.time())}.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
