"""Benchmark: the rules job with 0 (baseline), 1, 10, 100 and 1,000 rules over 100,000 partition keys,
and (``--flink``) Flink SQL over the same events with the same rules, in the same run.

The stream: ``--events`` CloudEvents on one topic, spread over one hour of simulated event
time, each for one of 100,000 users (``data.user``) with a price and an amount; types
``bench.order``, ``bench.login.failed``, ``bench.login.ok``, ``bench.price``. The rule mix
at 100 is the issue's: 70 filters/projections, 20 one-minute window aggregations per user
(HAVING), 10 MATCH_RECOGNIZE patterns per user (WITHIN 5 minutes); 10 and 1,000 rules keep
the same proportions (7/2/1, 700/200/100); "1 filter" and "1 pattern" show each path alone. Every run starts a
fresh query on a fresh checkpoint over the same events already in Kafka, so the rate is the
job's, not the producer's: events / the summed durations of the micro-batches that read
them (``maxOffsetsPerTrigger`` cuts the input into several). The baseline (no rules: read,
parse, route, write nothing) runs in the same session. Reports medians of ``--runs``, the
state after the hour (RocksDB rows and bytes of the stateful operator), and whether the
plan reads Kafka once (the shuffle reused by both branches).

Also prints each configuration's rate without the first micro-batch of each run (a fresh
query's first batch also pays for starting it). ``--stages`` starts the Spark UI on
127.0.0.1 and prints the last run's per-micro-batch ``durationMs`` and the executor time
of each Spark stage, for profiling.

``--flink`` then runs ``bench/rules_flink.py`` (Flink SQL 2.3, local mini-cluster at
parallelism 2, in a virtualenv of its own that ``make bench-flink`` makes) over the same
topic with the same mix for every configuration run, and prints Wayline's rate, Flink's and
their ratio; both rates count the start of the job's work (Wayline's first micro-batch,
Flink's job deployment), and the steady-state pair leaves it out (Wayline: without each
run's first micro-batch; Flink: less the same job's time over an empty topic).

Run: .venv/bin/python bench/rules.py [--events 100000] [--runs 3] [--only NAME] [--stages] [--flink] [--name rules]
It starts its own stack under bench/results/rules-state (NAME-state) and stops it at the end.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import orjson
from confluent_kafka import Consumer, TopicPartition
from sqlalchemy import delete

from toolkit import cli
from toolkit.codegen import compilations
from toolkit.produce import produce_all
from toolkit.results import RESULTS, record_results
from toolkit.rules_mix import CONFIGS, MIXES, T0, stream, windows
from toolkit.stack import fresh_stack
from toolkit.waiting import wait_until
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.registry import rule as rule_service
from wayline.registry.access import ADMIN
from wayline.registry.db import Database
from wayline.registry.models import Rule

REPO = Path(__file__).resolve().parents[1]
TOPIC = "events.bench.rules"
EMPTY_TOPIC = "events.bench.rules-empty"  # Flink's fixed cost: the same job over no events
FLINK_PYTHON = RESULTS / "flink-venv" / "bin" / "python"
FLINK_OUTPUT = "bench.rules.flink.out"  # one topic per configuration: this and its mix


RESTART = "window-rule change"


def produce(bootstrap: str, count: int, seed: int = 7, start: datetime = T0) -> None:
    produce_all(bootstrap, ((TOPIC, orjson.dumps(event | {"time": event["time"].isoformat()}),
                             event["data"]["user"].encode()) for event in stream(count, seed, start)))


def deploy(database: Database, sqls: list[str], settings: Settings, keep: bool = False) -> None:
    # A generous time budget: the benchmark measures throughput, not quarantines.
    policy = replace(rule_service.RulePolicy.from_settings(settings), time_budget_ms=60_000)
    with database.transaction() as session:
        if not keep:
            session.execute(delete(Rule))
        first = session.query(Rule).count()
        for index, sql in enumerate(sqls, start=first):
            rule_service.create(session, ADMIN, rule_service.RuleIn(
                name=f"bench-{index}", sql=sql, output_topic="bench.rules.out", output_type="bench.alert",
            ), policy)


def run_once(spark, settings: Settings, database: Database, events: int, checkpoint: Path) -> dict[str, float]:
    from wayline.pipelines.rules_job import RulesJob

    shutil.rmtree(checkpoint, ignore_errors=True)
    compiled_before = compilations(spark)
    job = RulesJob(spark, settings, database, checkpoint).start()
    try:
        # The job's own count: numInputRows counts every scan of the source in the plan.
        wait_until(lambda: job.raise_if_failed() or job.counters.events >= events, "the job to read every event",
                   1800, every_s=1)
        # The counter moves inside the micro-batch; its progress is reported when it ends.
        wait_until(lambda: sum(p["numInputRows"] for p in job.query.recentProgress) >= events, "the last progress",
                   120, every_s=0.05)
        busy = [p for p in job.query.recentProgress if p["numInputRows"] > 0]
        seconds = sum(p["durationMs"]["triggerExecution"] for p in busy) / 1000
        # The first micro-batch of a fresh query also pays for starting it (planning and code
        # generation from cold, the Python workers): the rate without it is the steady state.
        warm = busy[1:]
        warm_rate = (sum(p["numInputRows"] for p in warm) / sum(p["durationMs"]["triggerExecution"] for p in warm) * 1000
                     if warm else None)
        last = job.query.lastProgress
        # Both stateful operators: the Python processor's shards and the window aggregation.
        operators = last.get("stateOperators") or []
        custom = [operator.get("customMetrics") or {} for operator in operators]
        plan = io.StringIO()
        with contextlib.redirect_stdout(plan):
            job.query.explain()
        return {
            "rate": events / seconds, "warm_rate": warm_rate, "seconds": seconds, "batches": len(busy),
            # Where each micro-batch's time went: addBatch is the query's jobs and foreachBatch;
            # the rest is planning, offsets and the commit log.
            "batch_ms": [(p["numInputRows"], p["durationMs"]) for p in busy],
            "state_rows": sum(o.get("numRowsTotal", 0) for o in operators),
            "state_bytes": sum(o.get("memoryUsedBytes", 0) for o in operators),
            "rocksdb_bytes": sum(c.get("rocksdbTotalSizeOfL0Files", 0) + c.get("rocksdbSstFileSize", 0) for c in custom),
            "state_by_operator": [(o.get("operatorName"), o.get("numRowsTotal", 0), o.get("memoryUsedBytes", 0))
                                  for o in operators],
            # Each stateful operator's time in each busy batch (summed over its tasks): its rows
            # in, its state updates and removals, and the state store's commit.
            "operator_ms": [[(o.get("operatorName"), o.get("numRowsUpdated", 0), o.get("allUpdatesTimeMs", 0),
                              o.get("allRemovalsTimeMs", 0), o.get("commitTimeMs", 0)) for o in p.get("stateOperators") or []]
                            for p in busy],
            "kafka_scans": plan.getvalue().count("MicroBatchScan"),
            "reused_exchanges": plan.getvalue().count("ReusedExchange"),
            "plan": plan.getvalue(),
            "compilations": compilations(spark) - compiled_before,
            "matches": sum(c.matches for c in job.counters.rules.values()),
            # The stateful rules' own evaluation in the Python workers, over the run: the rest of
            # the Python operator's time is Arrow, the state calls and the state's pickling.
            "engine_s": sum(c.micros for c in job.counters.rules.values()) / 1e6,
            "quarantined": sum(c.quarantined for c in job.counters.rules.values()),
        }
    finally:
        job.stop()


def measure_restart(spark, settings: Settings, database: Database, events: int, checkpoint: Path) -> dict[str, float]:
    """What a window-rule change costs: the job restarts its query on the checkpoint.

    With the 10-rule mix running and every event read, 1,000 new events are produced and
    timed until a micro-batch has counted them (a warm batch's latency). Then a window rule
    is added and 1,000 more produced: the batch that reads them runs on the old plan and asks
    for the restart; the supervisor stops the query and starts it again (timed until the new
    query reports progress). A last 1,000 events time the new query's first batch."""
    from wayline.pipelines.rules_job import RulesJob

    shutil.rmtree(checkpoint, ignore_errors=True)
    bootstrap = settings.kafka_bootstrap()
    deploy(database, CONFIGS["10 rules (7/2/1)"], settings)
    job = RulesJob(spark, settings, database, checkpoint).start()
    try:
        wait_until(lambda: job.raise_if_failed() or job.counters.events >= events, "every event", 900, every_s=0.05)

        def probe(nth: int) -> float:
            before = job.counters.events
            started = time.monotonic()
            produce(bootstrap, 1_000, seed=nth, start=T0 + timedelta(hours=nth))
            wait_until(lambda: job.raise_if_failed() or job.counters.events >= before + 1_000, "the probe", 900,
                       every_s=0.05)
            return time.monotonic() - started

        warm = [probe(n) for n in (1, 2, 3)]
        old = job.query
        deploy(database, windows(1), settings, keep=True)
        time.sleep(settings.rules.version_poll_s)  # the job reads the registry at most this often
        asking = probe(4)
        asked = time.monotonic()
        wait_until(lambda: job.raise_if_failed() or (job.query is not old and job.query.lastProgress is not None),
                   "the restarted query", 900, every_s=0.05)
        restart_s = time.monotonic() - asked
        first = probe(5)
        return {"warm_probe_s": statistics.median(warm), "asking_probe_s": asking, "restart_s": restart_s,
                "first_probe_after_s": first, "restarts": job.counters.restarts}
    finally:
        job.stop()


def _ui(spark, what: str) -> list[dict]:
    """The Spark UI's REST answer about this application's ``what``."""
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{app}/{what}") as r:
        return json.load(r)


def _stages(spark) -> list[dict]:
    return _ui(spark, "stages?status=complete")


def stage_ids(spark) -> set[int]:
    return {stage["stageId"] for stage in _stages(spark)}


def _jobs(spark) -> list[dict]:
    return _ui(spark, "jobs")


def job_ids(spark) -> set[int]:
    return {job["jobId"] for job in _jobs(spark)}


def _ui_time(text: str) -> float:
    return datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def print_jobs(spark, seen: set[int]) -> None:
    """The last run's Spark jobs in order: each one's wall time, and the driver's time before
    it since the previous job ended (planning, py4j, foreachBatch's own Python)."""
    jobs = sorted((job for job in _jobs(spark) if job["jobId"] not in seen and "completionTime" in job),
                  key=lambda job: job["jobId"])
    last_end = None
    for job in jobs[-12:]:
        start, end = _ui_time(job["submissionTime"]), _ui_time(job["completionTime"])
        gap = f"{start - last_end:6.2f} s" if last_end is not None else "     - "
        print(f"      job {job['jobId']:4}: driver before it {gap}  wall {end - start:6.2f} s  "
              f"{job['name'].split(' at ')[0]}", flush=True)
        last_end = end


def print_stages(spark, seen: set[int], runs: int) -> None:
    """Executor time per stage name (the call site: count, collect, save, start...) over the runs."""
    totals: dict[str, list[float]] = {}
    for stage in _stages(spark):
        if stage["stageId"] in seen:
            continue
        name = stage["name"].replace(str(REPO) + "/", "")
        entry = totals.setdefault(name, [0, 0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += stage["numTasks"]
        entry[2] += stage["executorRunTime"] / 1000 / runs
        entry[3] += stage["executorCpuTime"] / 1e9 / runs
    for name, (count, tasks, run_s, cpu_s) in sorted(totals.items(), key=lambda item: -item[1][2]):
        print(f"    {run_s:8.2f} s run {cpu_s:8.2f} s cpu per run  {count:5} stages {tasks:6} tasks  {name}")
    for stage in sorted(_stages(spark), key=lambda stage: stage["stageId"]):
        if stage["stageId"] not in seen and stage["executorRunTime"] > 200:
            print(f"      stage {stage['stageId']:4}: {stage['executorRunTime'] / 1000:6.2f} s run "
                  f"{stage['executorCpuTime'] / 1e9:6.2f} s cpu {stage['numTasks']:3} tasks  in {stage['inputRecords']:7} "
                  f"shuffle r/w {stage['shuffleReadRecords']:7}/{stage['shuffleWriteRecords']:7}  "
                  f"{stage['name'].split(' at ')[0]}")


def run_flink(settings: Settings, names: list[str], events: int, runs: int) -> dict[str, dict]:
    """``bench/rules_flink.py`` over the topic Wayline read, in its own virtualenv: per configuration."""
    subprocess.run(["make", "-s", "bench-flink"], cwd=REPO, check=True)
    outputs = {name: f"{FLINK_OUTPUT}.{'-'.join(map(str, MIXES[name]))}" for name in names}
    ensure_topics(settings.kafka_bootstrap(), list(outputs.values()), 2)
    command = [str(FLINK_PYTHON), str(REPO / "bench" / "rules_flink.py"), "--bootstrap", settings.kafka_bootstrap(),
               "--topic", TOPIC, "--empty-topic", EMPTY_TOPIC, "--events", str(events), "--runs", str(runs),
               "--lateness-s", str(settings.rules.allowed_lateness_s), "--output-topic", FLINK_OUTPUT]
    for name in names:
        command += ["--config", ",".join(map(str, MIXES[name]))]
    results = {}
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as flink:
        assert flink.stdout is not None
        by_mix = {",".join(map(str, MIXES[name])): name for name in names}
        for line in flink.stdout:
            result = json.loads(line)
            results[by_mix[result["config"]]] = result
            print(f"{'Flink ' + by_mix[result['config']]:>28}: median {result['median_rate']:>9,.0f} events/s  runs "
                  f"{', '.join(f'{r:,.0f}' for r in result['rates'])}  less its {result['empty_wall']:.1f} s over no "
                  f"events: {result['median_net_rate']:,.0f}", flush=True)
    if flink.returncode:
        raise RuntimeError(f"bench/rules_flink.py exited with {flink.returncode}")
    # Flink's outputs per run, to set beside Wayline's (each configuration's own topic).
    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap(), "group.id": "bench-rules"})
    try:
        for name, topic in outputs.items():
            written = sum(consumer.get_watermark_offsets(TopicPartition(topic, partition))[1] for partition in (0, 1))
            results[name]["outputs_per_run"] = written / runs
    finally:
        consumer.close()
    return results


def print_comparison(results: dict[str, dict], flink: dict[str, dict]) -> None:
    print(f"\n{'rules':>26} | {'Wayline':>9} | {'Flink':>9} | ratio | steady: Wayline | Flink | ratio "
          f"| outputs: Wayline | Flink")
    for name, theirs in flink.items():
        ours = results[name]
        warm = ours["median_warm_rate"] or 0
        print(f"{name:>26} | {ours['median_rate']:>9,.0f} | {theirs['median_rate']:>9,.0f} | "
              f"{ours['median_rate'] / theirs['median_rate']:5.2f} | {warm:>15,.0f} | {theirs['median_net_rate']:>5,.0f} | "
              f"{warm / theirs['median_net_rate']:5.2f} | {ours['last']['matches']:>16,} | "
              f"{theirs.get('outputs_per_run', 0):,.0f}", flush=True)
        ours["flink"] = theirs
        ours["ratio"] = ours["median_rate"] / theirs["median_rate"]
        ours["steady_ratio"] = warm / theirs["median_net_rate"]


def main() -> None:
    parser = cli.parser(__doc__, runs=3)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--only", action="append",
                        help=f"run only these configurations, in this order; {RESTART!r} times a window-rule change")
    parser.add_argument("--stages", action="store_true",
                        help="start the Spark UI on 127.0.0.1 and print each configuration's stage times")
    parser.add_argument("--name", default="rules",
                        help="the results file (bench/results/NAME.json) and state folder (NAME-state): two "
                             "invocations with different names can run at once")
    parser.add_argument("--flink", action="store_true",
                        help="then run Flink SQL over the same topic with each configuration's mix, and compare")
    args = parser.parse_args()

    state_dir = RESULTS / f"{args.name}-state"
    ui = {"spark.ui.enabled": "true", "spark.ui.port": "0"} if args.stages else {}
    with fresh_stack(state_dir, spark={"extra_conf": ui}) as (base, database):
        settings = base.model_copy(update={"kafka": base.kafka.model_copy(
            update={"event_topic_prefix": "events.bench.", "max_offsets_per_trigger": 25_000})})
        bootstrap = settings.kafka_bootstrap()
        ensure_topics(bootstrap, [TOPIC, EMPTY_TOPIC], 2)
        ensure_topics(bootstrap, ["bench.rules.out"], 2)
        started = time.perf_counter()
        produce(bootstrap, args.events)
        produced_s = time.perf_counter() - started
        from wayline.stack.spark import spark_session

        spark = spark_session(settings)
        results = {}
        for name in args.only or CONFIGS:
            if name == RESTART:
                results[RESTART] = measure_restart(spark, settings, database, args.events, state_dir / "ckpt-restart")
                print(f"{RESTART:>22}: {results[RESTART]}", flush=True)
                continue
            sqls = CONFIGS[name]
            deploy(database, sqls, settings)
            seen = stage_ids(spark) if args.stages else set()
            seen_jobs = job_ids(spark) if args.stages else set()
            # A fresh checkpoint directory per run: a stopped query's thread may still write
            # into its own for a moment, and a reused path then fails the next run's batch 0.
            runs = [run_once(spark, settings, database, args.events, state_dir / f"ckpt-{len(results)}-{run}")
                    for run in range(args.runs)]
            rates = [r["rate"] for r in runs]
            warm_rates = [r["warm_rate"] for r in runs if r["warm_rate"] is not None]
            results[name] = {"median_rate": statistics.median(rates), "rates": rates,
                             "median_warm_rate": statistics.median(warm_rates) if warm_rates else None,
                             "warm_rates": warm_rates, "last": runs[-1]}
            print(f"{name:>22}: median {statistics.median(rates):>9,.0f} events/s  runs "
                  f"{', '.join(f'{r:,.0f}' for r in rates)}  state rows {runs[-1]['state_rows']:,} "
                  f"bytes {runs[-1]['state_bytes']:,}  kafka scans {runs[-1]['kafka_scans']} "
                  f"reused exchanges {runs[-1]['reused_exchanges']}  matches {runs[-1]['matches']:,}  "
                  f"rocksdb bytes {runs[-1]['rocksdb_bytes']:,}  quarantined {runs[-1]['quarantined']}  "
                  f"classes compiled {runs[-1]['compilations']} in {runs[-1]['batches']} batches  "
                  f"per operator {runs[-1]['state_by_operator']}", flush=True)
            print(f"{'':>22}  without each run's first micro-batch: median "
                  f"{results[name]['median_warm_rate'] or 0:,.0f} events/s  runs {', '.join(f'{r:,.0f}' for r in warm_rates)}",
                  flush=True)
            if args.stages:
                print(f"{'':>24}the stateful rules' own evaluation over the run: {runs[-1]['engine_s']:.2f} s",
                      flush=True)
                for (rows, ms), operators in zip(runs[-1]["batch_ms"], runs[-1]["operator_ms"], strict=True):
                    print(f"{'':>24}{rows:7} rows: {ms}", flush=True)
                    for name, updated, updates_ms, removals_ms, commit_ms in operators:
                        print(f"{'':>32}{name}: {updated} rows updated, updates {updates_ms} ms, removals "
                              f"{removals_ms} ms, commit {commit_ms} ms", flush=True)
                print_stages(spark, seen, args.runs)
                print_jobs(spark, seen_jobs)
        spark.stop()
        if args.flink:
            compared = [name for name in results if name in MIXES]
            print_comparison(results, run_flink(settings, compared, args.events, args.runs))
    record_results(args.name, {"events": args.events, "produced_s": produced_s, "command": " ".join(sys.argv),
                               "results": results}, args.out)


if __name__ == "__main__":
    main()
