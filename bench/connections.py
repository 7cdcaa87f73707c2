"""Benchmark: new TCP connections per endpoint over a steady run (issue 13).

Each system of ``bench/delivery_targets.py`` chosen with ``--systems`` — ``job`` (the
``micro_batch`` engine, in this process's Spark session), ``senders`` (``wayline run
delivery`` with the senders engine, as its own process) and ``plain`` (the plain
one-process sender, the baseline) — is fed ``--rate`` events/s in streaming mode for
``--seconds``, after delivery_targets' small primed start, with that bench's registry
shape (five endpoints, 100 event types each) and receiver. The receiver counts, per
endpoint path, the distinct client connections (address, port) its requests came on:
every new TCP connection a system opened to that endpoint over the run. A system that
keeps its HTTP pools shows a bounded number (at most its sending processes × the
endpoint's in-flight limit); one that reconnects per micro-batch shows one per micro-batch.
All endpoints share the receiver's address, so a pool per host may carry several
endpoints' requests on one connection: such a connection counts once per endpoint it
served, and once in the system's total. The total is also sampled every ``--sample-s``
during the run: a bounded pool stops growing once it has opened what its concurrency
needs, while reconnecting keeps it growing at the micro-batch rate.

Results: ``bench/results/connections-<time>.json`` and a markdown table.
Run: .venv/bin/python bench/connections.py --systems job,senders,plain --rate 300 --seconds 300
It starts its own stack under bench/results/connections-state and stops it at the end.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from typing import Any

from toolkit import cli
from toolkit.receiver import stats
from toolkit.results import RESULTS, markdown_table, record_results
from toolkit.stack import LOOPBACK, fresh_stack
from toolkit.systems import SYSTEMS, Bench, ReceiverArrivals, bench_session, rate_run


def measure(bench: Bench, system: str, tag: str, rate: float, seconds: float, sample_s: float) -> dict[str, Any]:
    arrivals = ReceiverArrivals(bench.receiver_url, f"/{tag}/")
    samples: list[tuple[float, int]] = []
    done = threading.Event()

    def sample() -> None:
        began = time.monotonic()
        while not done.wait(sample_s):
            samples.append((round(time.monotonic() - began), arrivals.totals()["connections"]))

    sampler = threading.Thread(target=sample, name="connections-sampler", daemon=True)
    sampler.start()
    try:
        got = rate_run(bench, system, tag, [(rate, seconds)])
    finally:
        done.set()
        sampler.join()
    totals = arrivals.totals()
    steady = arrivals.totals(got["marks"][0]["from"])
    paths = {path: counts for path, counts in stats(bench.receiver_url).items() if path.startswith(f"/{tag}/")}
    per_endpoint = sorted(counts["connections"] for counts in paths.values())
    return {"system": system, "rate": rate, "seconds": seconds, "achieved_rate": got["marks"][0]["achieved_rate"],
            "endpoints": len(paths), "requests": totals["requests"], "events": totals["events"],
            "connections_per_endpoint": per_endpoint, "connections_in_all": totals["connections"],
            "connections_in_all_over_time": samples,
            "requests_per_endpoint": sorted(counts["requests"] for counts in paths.values()),
            "latency_p50_s": steady["latency_p50_s"], "latency_p99_s": steady["latency_p99_s"],
            "load_average": os.getloadavg()}


def table(results: list[dict[str, Any]]) -> str:
    def row(r: dict[str, Any]) -> list[str]:
        per = r["connections_per_endpoint"]
        return [r["system"], str(r["run"]), f"{statistics.median(r['requests_per_endpoint']):,.0f}",
                f"{statistics.median(per):g} ({per[0]}–{per[-1]})",
                f"{r['connections_in_all']} ({', '.join(f'{n} at {t} s' for t, n in r['connections_in_all_over_time'])})",
                f"{r['latency_p50_s']:.2f} / {r['latency_p99_s']:.2f} s"]

    return markdown_table(["system", "run", "requests per endpoint (median)",
                           "new connections per endpoint: median (min–max)",
                           "connections in all (sampled during the run)", "p50 / p99"], map(row, results))


def main() -> None:
    parser = cli.parser(__doc__, runs=1)
    parser.add_argument("--systems", type=cli.names(*SYSTEMS), default=["job", "senders", "plain"],
                        help=f"some of {','.join(SYSTEMS)}")
    parser.add_argument("--rate", type=float, default=300)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--sample-s", type=float, default=60, help="sample the connections in all this often")
    cli.delivery_flags(parser)
    args = parser.parse_args()
    systems = args.systems
    args.batch_per_trigger = None  # streaming only
    args.source_partitions = None  # the load generator's topics, a topic per domain (Bench.layout)

    results = []
    with (fresh_stack(RESULTS / "connections-state", registry={"url_allow_list": LOOPBACK})
          as (settings, database),
          bench_session(settings, database, args, spark="job" in systems) as bench):
        for run in range(args.runs):
            for system in systems:
                result = measure(bench, system, f"c{run}{system}", args.rate, args.seconds, args.sample_s) | {"run": run}
                print(json.dumps(result), flush=True)
                results.append(result)
    record_results(f"connections-{int(time.time())}", {"args": vars(args), "results": results}, args.out)
    print(table(results))


if __name__ == "__main__":
    main()
