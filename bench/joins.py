"""Benchmark: join rules against the rules job with no rules (the baseline), in one run.

The join rule's query runs alone (the rules job starts it beside its own query, which
has nothing to do here).

- ``table``: a stream-table enrichment (``LEFT JOIN reference.customers``) against a
  reference table of ``--rows`` (1,000,000) rows, put through the registry's own service;
  ``--events`` orders, each for a random customer.
- ``interval``: an interval join of orders and payments on the order id within
  ``--interval-s`` seconds (inner), over ``--events`` events, half orders and half payments,
  at 10,000 events/s per side of event time (a payment 0–2 s after its order).

Each configuration runs ``--runs`` times on a fresh checkpoint over the events already in
Kafka (join queries read from the earliest offsets here), so the rate is the query's: events
/ the summed durations of the micro-batches that read them. The baseline is the rules job
with no rule over the same events (read, parse, route, write nothing). Also reported: the
join's state after the run (Spark's state rows and bytes, for the interval join) or the
cached reference table's size in memory (the stream-table join keeps no state).

Run: .venv/bin/python bench/joins.py [--events 200000] [--rows 1000000] [--runs 3] [--only table|interval]
It starts its own stack under bench/results/joins-<only|all>-state and stops it at the end.
"""

from __future__ import annotations

import random
import shutil
import statistics
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson
from sqlalchemy import delete

from toolkit import cli
from toolkit.produce import produce_all
from toolkit.results import RESULTS, record_results
from toolkit.stack import fresh_stack
from toolkit.waiting import wait_until
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.registry import reference
from wayline.registry import rule as rule_service
from wayline.registry.access import ADMIN
from wayline.registry.db import Database
from wayline.registry.models import Rule

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
PER_SIDE_RATE = 10_000  # events/s of event time, per side of the interval join
TABLE = "customers"
ENRICH = (f"SELECT e.id, e.data.amount AS amount, c.data.tier AS tier FROM events e "
          f"LEFT JOIN reference.{TABLE} c ON c.key = e.data.customer WHERE e.type = 'bench.order'")
PAID = ("SELECT a.id AS order_id, b.id AS payment_id FROM events a JOIN events b ON a.data.order = b.data.order "
        "AND b.type = 'bench.payment' AND b.event_time BETWEEN a.event_time AND a.event_time + INTERVAL '{s}' SECOND "
        "WHERE a.type = 'bench.order'")


def orders(count: int, customers: int, seed: int = 7):
    rng = random.Random(seed)
    for n in range(count):
        yield orjson.dumps({
            "specversion": "1.0", "id": f"o{n}", "source": "bench", "type": "bench.order", "tenantid": "t",
            "time": (T0 + timedelta(seconds=n / PER_SIDE_RATE)).isoformat(),
            "data": {"customer": f"c{rng.randrange(customers)}", "amount": rng.randrange(1000), "order": f"k{n}"},
        })


def orders_and_payments(count: int, seed: int = 11):
    """Orders at PER_SIDE_RATE per second of event time, each paid 0-2 s later, in time order."""
    rng = random.Random(seed)
    pending: list[tuple[float, bytes]] = []
    for n in range(count // 2):
        at = n / PER_SIDE_RATE
        yield orjson.dumps({
            "specversion": "1.0", "id": f"o{n}", "source": "bench", "type": "bench.order", "tenantid": "t",
            "time": (T0 + timedelta(seconds=at)).isoformat(), "data": {"order": f"k{n}", "amount": rng.randrange(1000)},
        })
        paid = at + rng.uniform(0, 2)
        pending.append((paid, orjson.dumps({
            "specversion": "1.0", "id": f"p{n}", "source": "bench", "type": "bench.payment", "tenantid": "t",
            "time": (T0 + timedelta(seconds=paid)).isoformat(), "data": {"order": f"k{n}"},
        })))
        pending.sort(key=lambda item: item[0])
        while pending and pending[0][0] <= at:
            yield pending.pop(0)[1]
    for _, value in pending:
        yield value


def load_table(database: Database, rows: int) -> float:
    started = time.perf_counter()
    rng = random.Random(3)
    with database.transaction() as session:
        if not reference.exists(session, TABLE):
            reference.create_table(session, ADMIN, reference.ReferenceTableIn(name=TABLE))
        for start in range(0, rows, reference.MAX_ROWS_PER_PUT):
            reference.put_rows(session, ADMIN, TABLE, [
                reference.ReferenceRowIn(key=f"c{n}", data={"tier": rng.choice(["gold", "silver", "bronze"]),
                                                           "region": f"r{n % 50}"})
                for n in range(start, min(rows, start + reference.MAX_ROWS_PER_PUT))])
    return time.perf_counter() - started


def deploy(database: Database, sqls: list[str], settings: Settings) -> None:
    policy = replace(rule_service.RulePolicy.from_settings(settings), time_budget_ms=60_000)
    with database.transaction() as session:
        session.execute(delete(Rule))
        for index, sql in enumerate(sqls):
            rule_service.create(session, ADMIN, rule_service.RuleIn(
                name=f"bench-join-{index}", sql=sql, output_topic="bench.joins.out", output_type="bench.joined"), policy)


def cached_bytes(spark) -> int:
    return sum(info.memSize() for info in spark.sparkContext._jsc.sc().getRDDStorageInfo())


def run_once(spark, settings: Settings, database: Database, events: int, checkpoint: Path) -> dict:
    """The baseline runs the rules job; a join rule runs its own query, as in the job, alone."""
    from wayline.pipelines.joins import JoinQueries
    from wayline.pipelines.rule_sets import load_rule_set
    from wayline.pipelines.rules_job import RulesJob

    shutil.rmtree(checkpoint, ignore_errors=True)
    joins = load_rule_set(database).joins
    if joins:
        job = JoinQueries(spark, settings, database, checkpoint)
        job.sync(joins)
        [query] = job.queries.values()
    else:
        job = RulesJob(spark, settings, database, checkpoint).start()
        query = job.query
    try:
        def read_all() -> bool:
            failed = job.failures() if joins else {}
            if failed or query.exception() is not None:
                raise RuntimeError(f"the query failed: {failed or query.exception()}")
            return sum(p["numInputRows"] for p in query.recentProgress) >= events

        wait_until(read_all, "the query to read every event", 1800, every_s=1)
        busy = [p for p in query.recentProgress if p["numInputRows"] > 0]
        seconds = sum(p["durationMs"]["triggerExecution"] for p in busy) / 1000
        warm = busy[1:]
        state = (query.lastProgress.get("stateOperators") or [])
        return {
            "rate": events / seconds, "seconds": seconds, "batches": len(busy),
            "warm_rate": (sum(p["numInputRows"] for p in warm) * 1000
                          / sum(p["durationMs"]["triggerExecution"] for p in warm)) if warm else None,
            "state_rows": sum(s.get("numRowsTotal", 0) for s in state),
            "state_bytes": sum(s.get("memoryUsedBytes", 0) for s in state),
            "cached_bytes": cached_bytes(spark),
        }
    finally:
        job.stop()


def main() -> None:
    parser = cli.parser(__doc__, runs=3)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--interval-s", type=int, default=10)
    parser.add_argument("--only", choices=("table", "interval"), help="run one of the two streams")
    args = parser.parse_args()
    streams = [args.only] if args.only else ["table", "interval"]

    state_dir = RESULTS / f"joins-{args.only or 'all'}-state"
    results: dict[str, dict] = {}
    with fresh_stack(state_dir) as (base, database):
        bootstrap = base.kafka_bootstrap()
        ensure_topics(bootstrap, ["bench.joins.out"], 2)
        if "table" in streams:
            loaded_s = load_table(database, args.rows)
            print(f"reference table: {args.rows:,} rows put in {loaded_s:.1f} s", flush=True)
        from wayline.stack.spark import spark_session

        spark = spark_session(base)
        for stream in streams:
            values = orders(args.events, args.rows) if stream == "table" else orders_and_payments(args.events)
            prefix = f"events.bench.{stream}."
            ensure_topics(bootstrap, [prefix + "in"], 2)
            produce_all(bootstrap, ((prefix + "in", value, None) for value in values))
            settings = base.model_copy(update={
                "kafka": base.kafka.model_copy(update={"event_topic_prefix": prefix, "max_offsets_per_trigger": 25_000}),
                "rules": base.rules.model_copy(update={"join_starting_offsets": "earliest", "allowed_lateness_s": 1.0}),
            })
            sqls = [ENRICH] if stream == "table" else [PAID.format(s=args.interval_s)]
            for name, deployed in ((f"{stream}: no rules (baseline)", []), (f"{stream}: join", sqls)):
                deploy(database, deployed, settings)
                runs = [run_once(spark, settings, database, args.events, state_dir / f"ckpt-{len(results)}-{run}")
                        for run in range(args.runs)]
                rates = [r["rate"] for r in runs]
                results[name] = {"median_rate": statistics.median(rates), "rates": rates, "last": runs[-1]}
                last = runs[-1]
                print(f"{name:>28}: median {statistics.median(rates):>9,.0f} events/s  runs "
                      f"{', '.join(f'{r:,.0f}' for r in rates)}  state rows {last['state_rows']:,} "
                      f"bytes {last['state_bytes']:,}  cached {last['cached_bytes']:,} bytes", flush=True)
        spark.stop()
    record_results(f"joins-{args.only or 'all'}", {
        "events": args.events, "rows": args.rows, "interval_s": args.interval_s, "results": results}, args.out)


if __name__ == "__main__":
    main()
