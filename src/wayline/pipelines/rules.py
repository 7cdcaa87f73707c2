"""`wayline run rules`: every active rule over one read of the event topics.

The query, fixed while it runs::

    Kafka (all event topics) -> parse once -> watermark on event_time
      -> one row per event for the stateless rules, plus one per stateful partition key
         (``key_spec``: the partition-key columns of some window or pattern rule)
      -> ONE shuffle by (key_spec, shard)
         |- key_spec = '': the events, passed on untouched
         |- key_spec = '' again: the fixed window rules' streaming aggregation
         |  (``wayline.pipelines.windows``), in the JVM
         '- otherwise: transformWithStateInPandas keyed by (key_spec, shard) -> RulesProcessor
      -> union -> foreachBatch

A shard is ``hash(partition key) % rules.shards``: the operator's keys are few and each
holds many partition keys, because the Python stateful operator pays per key and per state
call (``docs/decisions.md``). Both branches read the same exchange, which Spark reuses, so
Kafka is read and the JSON parsed once per micro-batch — only if the optimizer leaves the
two exchanges identical: see ``rules_stream``.

A Python worker keeps each group's ``GroupEvaluator`` (its live matchers and windows)
between micro-batches. The stored state carries a random token, rewritten with the state:
a worker whose cached evaluator has the stored token uses it; any other worker, or the same
one after a failed or replayed micro-batch, resumes it from the stored blob
(``wayline.rules.engine.GroupState``): per rule, columns over the partition keys, and the
keys' own states in segments decoded only when a key of theirs is visited. It works out
the rows each rule's prefilter admits on the group's whole frame (``wayline.rules.prefilter``),
so a rule's Python code only meets rows it may use.

Rules change between micro-batches without a restart:
- stateless (filter) rules are Spark SQL that ``foreachBatch`` applies to the batch's
  events with the rule set it holds; the driver re-reads the registry when the rules
  version changes;
- the stateful processor loads the running rules from the registry in each task, when the
  rules version has moved (cached per Python worker). Its state is keyed by rule id and
  revision, so a changed rule starts fresh and a removed rule's state is dropped.
Only a stateful rule with partition-key columns no running rule has needs another branch
of the plan, and a new or changed fixed window rule its place in the aggregation: the job
then restarts the query on its checkpoint (seconds; nothing is lost).

Join rules run as queries of their own, which the job starts and stops as its rule set
moves (``wayline.pipelines.joins``); one that fails is quarantined like any rule.

Isolation: the processor reports a rule that failed (``wayline.rules.engine``); the driver
quarantines it in the registry and drops its output for the micro-batch. A filter reads
``data.*`` with ``try_variant_get`` (a value that does not convert is NULL), but its SQL
can still fail in the JVM (ANSI mode raises on a division by zero): then the combined
write of the filters fails, each filter is run alone, and the failing ones are quarantined.
"""

from __future__ import annotations

import gc
import logging
import pickle
import random
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timezone
from functools import reduce
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle, StreamingQuery
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.pipelines.envelope import parse_events, valid_events
from wayline.pipelines.job import RestartingQuery
from wayline.pipelines.joins import JoinQueries
from wayline.pipelines.micro_batch import concise_failures, interrupted
from wayline.pipelines.rule_output import output_record
from wayline.pipelines.source import read_kafka, write_to_kafka
from wayline.pipelines.windows import key_column, key_json, window_outputs
from wayline.registry import rule as rule_service
from wayline.registry.db import Database, make_engine
from wayline.rules.counters import EMIT, EVENT, FAILURE, METRICS, JobCounters, Report
from wayline.rules.engine import OUTPUT_SOURCE_PREFIX, ActiveRule, GroupEvaluator, cloudevent
from wayline.rules.prefilter import Prefilter
from wayline.rules.rule import DATA, EVENT_COLUMNS, parse_key
from wayline.rules.ruleset import RuleSet, RuleSets, rule_set

log = logging.getLogger(__name__)

PASS = ""  # the key_spec of the events passed to the stateless rules
COUNT = "count"  # the micro-batch's number of events, computed in the driver's first job
OUTPUT_SCHEMA = StructType([
    StructField("out_kind", StringType()),
    StructField("out_rule", StringType()),
    StructField("out_topic", StringType()),
    StructField("out_key", StringType()),
    StructField("out_value", StringType()),
    StructField("out_count", LongType()),
])
_STATE_SCHEMA = StructType([StructField("blob", BinaryType())])
# The token of the stored blob, and the event-time timer registered for the group (ms).
_META_SCHEMA = StructType([StructField("token", LongType()), StructField("timer", LongType())])
# The stateful rows' columns besides key_spec, shard, key_value and data_json: the whole envelope.
_ROW_COLUMNS = tuple(name for name in EVENT_COLUMNS if name != DATA)
_TIME_COLUMNS = ("time", "event_time")
# Both stateful operators (the Python processor and the window aggregation) take the
# query's one watermark. With Spark's default (a watermark per operator, from the
# EventTimeWatermark in its own subtree) the operator behind the ReusedExchange found
# none: it never closed a window, never fired a timer.
SINGLE_WATERMARK = ("spark.sql.streaming.statefulOperator.allowMultiple", "false")


# -- rule sets ---------------------------------------------------------------------------------


def load_rule_set(database: Database) -> RuleSet:
    with database.transaction() as session:
        return rule_set(rule_service.rules_version(session), rule_service.running(session))


class _WorkerRules:
    """The rule set a Python worker's stateful tasks use, re-read when the version moves."""

    _lock = threading.Lock()
    _databases: dict[str, Database] = {}
    _sets = RuleSets()

    @classmethod
    def current(cls, dsn: str) -> RuleSet:
        with cls._lock:
            database = cls._databases.get(dsn)
            if database is None:
                database = cls._databases[dsn] = Database(make_engine(dsn))
        return cls._sets.current(dsn, lambda: _rules_version(database), lambda: load_rule_set(database))


def _rules_version(database: Database) -> int:
    with database.transaction() as session:
        return rule_service.rules_version(session)


# -- the stateful processor -------------------------------------------------------------------

# A Python worker keeps every group's evaluator it ran (matchers, windows, the rows they
# hold): a large heap that lives long. At the interpreter's default thresholds (700, 10, 10)
# the allocations of one group's evaluation (decoding its state, the batch's rows) set off
# collections that traverse that whole heap, so a group paid for every key the worker held:
# most of the time a cache miss cost (bench/rules_state.py, docs/benchmarks.md). Objects are
# freed by reference counting as before; reference cycles are collected, only less often.
GC_THRESHOLDS = (100_000, 50, 100)


class RulesProcessor(StatefulProcessor):
    """One key is (key_spec, shard); its state is one blob: every rule's state for its keys."""

    # (key_spec, shard) -> (token of the state it was last written as, its evaluator); one
    # per Python worker, shared by the tasks the worker runs one after another.
    _live: dict[tuple[str, int], tuple[int, GroupEvaluator]] = {}

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn

    def init(self, handle: StatefulProcessorHandle) -> None:
        if gc.get_threshold() != GC_THRESHOLDS:
            gc.set_threshold(*GC_THRESHOLDS)
        self._handle = handle
        self._state = handle.getValueState("rules", _STATE_SCHEMA)
        self._meta = handle.getValueState("meta", _META_SCHEMA)
        self._rules: RuleSet | None = None
        self._spent: dict[str, float] = {}

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        frame = pd.concat(list(rows), ignore_index=True)
        yield self._evaluate((key[0], int(key[1])), _rows_of(frame), timerValues, frame)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:
        yield self._evaluate((key[0], int(key[1])), [], timerValues, None)

    def close(self) -> None:
        pass

    def _evaluator(self, group: tuple[str, int], token: int | None) -> GroupEvaluator:
        if self._rules is None:
            self._rules = _WorkerRules.current(self._dsn)
        rules = [rule for rule in self._rules.rules if rule.compiled.in_processor and rule.key_spec == group[0]]
        cached = self._live.get(group)
        if token is not None and cached is not None and cached[0] == token:
            cached[1].use(rules, self._spent)
            return cached[1]
        blob = self._state.get() if token is not None else None
        watermark, state = pickle.loads(blob[0]) if blob is not None else (None, None)
        return GroupEvaluator(rules, state, spent=self._spent, watermark=watermark)

    def _evaluate(self, group: tuple[str, int], rows: list[tuple[str, dict[str, Any]]], timer_values: Any,
                  frame: pd.DataFrame | None) -> pd.DataFrame:
        meta = self._meta.get()
        token, timer = (meta[0], meta[1]) if meta is not None else (None, None)
        evaluator = self._evaluator(group, token)
        mark = timer_values.getCurrentWatermarkInMs()
        watermark = datetime.fromtimestamp(mark / 1000, timezone.utc) if mark and mark > 0 else None
        admitted = _admitted(frame, evaluator.prefilters) if frame is not None else None
        result = evaluator.process(rows, watermark, admitted)
        snapshot = evaluator.snapshot()
        # Event-time timers fire once the watermark passes them; wake_at is in µs.
        wake = -(-result.wake_at // 1000) if result.wake_at is not None else None
        if wake != timer:
            if timer is not None:
                self._handle.deleteTimer(timer)
            if wake is not None:
                self._handle.registerTimer(wake)
        if snapshot.rules:
            token = random.getrandbits(63)
            self._state.update((pickle.dumps((evaluator.watermark, snapshot), protocol=pickle.HIGHEST_PROTOCOL),))
            self._meta.update((token, wake))
            self._live[group] = (token, evaluator)
        else:
            self._state.clear()
            self._meta.clear()
            self._live.pop(group, None)
        out: list[tuple[str, str, str | None, str | None, str | None, int]] = []
        for emitted in result.emitted:
            out.append((EMIT, emitted.rule.state_key, emitted.rule.output_topic, emitted.subject,
                        orjson.dumps(cloudevent(emitted), default=str).decode(), 1))
        for failure in result.failures:
            out.append((FAILURE, failure.rule.state_key, None, None, failure.error, 1))
        for state_key, metrics in result.metrics.items():
            out.append((METRICS, state_key, None, None,
                        orjson.dumps({"rows": metrics.rows, "micros": metrics.micros, "state": metrics.state,
                                      "late": metrics.late}).decode(), metrics.emitted))
        return pd.DataFrame(out, columns=[field.name for field in OUTPUT_SCHEMA.fields])


def _admitted(frame: pd.DataFrame, prefilters: Iterable[Prefilter]) -> dict[Prefilter, list[int]]:
    """The rows each prefilter admits, worked out on the whole frame at once."""
    out = {}
    for prefilter in prefilters:
        admits = np.zeros(len(frame), dtype=bool)
        for conjuncts in prefilter.alternatives:
            every = np.ones(len(frame), dtype=bool)
            for column, values in conjuncts:
                every &= frame[column].isin(values).to_numpy()
            admits |= every
        out[prefilter] = np.flatnonzero(admits).tolist()
    return out


def _rows_of(frame: pd.DataFrame) -> list[tuple[str, dict[str, Any]]]:
    """The group's rows as the rules read them: envelope columns, ``data`` as JSON values."""
    columns = [frame[name].tolist() if name not in _TIME_COLUMNS else _datetimes(frame[name])
               for name in _ROW_COLUMNS]
    datas = [orjson.loads(text) if text is not None else None for text in frame["data_json"].tolist()]
    out = []
    for key, data, *values in zip(frame["key_value"].tolist(), datas, *columns, strict=True):
        row = dict(zip(_ROW_COLUMNS, values))
        row[DATA] = data
        out.append((key, row))
    return out


def _datetimes(column: pd.Series) -> list[datetime | None]:
    """UTC-aware datetimes (None for null) from Arrow's naive UTC timestamps, without pandas' per-value objects."""
    naive = column.to_numpy(dtype="datetime64[us]").astype(object)
    return [None if value is None else value.replace(tzinfo=timezone.utc) for value in naive]


# -- the query ---------------------------------------------------------------------------------


def routed_events(events: DataFrame, key_specs: Sequence[str], shards: int, partitions: int) -> DataFrame:
    """Each event once for the filters and once per stateful key spec, behind one shuffle."""
    routes = [F.struct(F.lit(PASS).alias("spec"), F.lit(None).cast("string").alias("key"))]
    for spec in key_specs:
        paths = [parse_key(text) for text in spec.split(",")]
        routes.append(F.struct(F.lit(spec).alias("spec"), key_json(paths).alias("key")))
    exploded = events.select("*", F.explode(F.array(*routes)).alias("_route"))
    spec, key = F.col("_route.spec"), F.col("_route.key")
    # Passed-on events spread by id; keyed copies by their partition key, so one key's
    # events meet in one group.
    shard = F.pmod(F.xxhash64(F.when(spec == F.lit(PASS), F.col("id")).otherwise(key)), F.lit(shards))
    return exploded.select(
        *events.columns, spec.alias("key_spec"), key.alias("key_value"), shard.cast("int").alias("shard"),
    ).repartition(partitions, "key_spec", "shard")


def _branch(routed: DataFrame, stateful: bool) -> DataFrame:
    """One side of the exchange: the passed events, or the rows for the stateful operator.

    Spark reuses an exchange only when both readers' plans below it are identical. Left to
    itself the optimizer pushes each side's filter on ``key_spec`` and its own column
    pruning below the shuffle, which makes two different exchanges, each with its own
    Kafka scan and JSON parse. So the condition is wrapped in a non-deterministic
    expression, which the optimizer never moves (it is still true on every row), and both
    sides keep every routed column.
    """
    condition = F.col("key_spec") != F.lit(PASS) if stateful else F.col("key_spec") == F.lit(PASS)
    pinned = F.when(F.spark_partition_id() >= F.lit(0), condition)
    return routed.where(pinned)


def _reading_every_column(branch: DataFrame) -> DataFrame:
    """The branch with a ``tenantid`` that reads every routed column (in a branch never taken).

    The window aggregation uses a few columns; the optimizer pruned the others below the
    shuffle, which made an exchange of its own for this branch and a second read of Kafka
    per micro-batch (the input rows counted twice in the query's progress)."""
    never = F.to_json(F.struct(*branch.columns))
    return branch.withColumn("tenantid", F.when(F.spark_partition_id() >= F.lit(0), F.col("tenantid")).otherwise(never))


def rules_stream(spark: SparkSession, settings: Settings, key_specs: Sequence[str], dsn: str,
                 windows: Sequence[ActiveRule] = ()) -> DataFrame:
    events = valid_events(parse_events(read_kafka(spark, settings), settings.envelope))
    # The rules' own output is an event stream too; reading it back could loop forever.
    events = events.where(~F.startswith(F.col("source"), F.lit(OUTPUT_SOURCE_PREFIX)))
    lateness_ms = int(settings.rules.allowed_lateness_s * 1000)
    events = events.withWatermark("event_time", f"{lateness_ms} milliseconds")
    events = events.select(*EVENT_COLUMNS)
    routed = routed_events(events, key_specs, settings.rules.shards, settings.spark.shuffle_partitions)
    # The passed side carries the route's key columns too (unused downstream), so that both
    # sides read the same columns from the exchange.
    passed = _branch(routed, stateful=False).select(
        F.lit(EVENT).alias("out_kind"), *EVENT_COLUMNS, "key_spec", "key_value", "shard",
    )
    # The stateful branch is there even before any stateful rule: a restart may then add
    # routes (a stateless change) but never a stateful operator the checkpoint lacks.
    stateful = _branch(routed, stateful=True).select(
        "key_spec", "shard", "key_value", F.to_json("data").alias("data_json"), *_ROW_COLUMNS,
    ).groupBy("key_spec", "shard").transformWithStateInPandas(
        statefulProcessor=RulesProcessor(dsn),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Append",
        timeMode="EventTime",
    )
    # The fixed window rules aggregate the passed side's events in the JVM
    # (wayline.pipelines.windows), behind a ReusedExchange: see SINGLE_WATERMARK.
    windowed = window_outputs(_reading_every_column(_branch(routed, stateful=False)), windows, lateness_ms)
    # Stateful side first: Spark keeps the exchange where it first meets it and makes the
    # other reader a ReusedExchange. The stateful operator learns its watermark from the
    # EventTimeWatermark below it in its own subtree; behind a ReusedExchange it found
    # none, and its timers never fired.
    return stateful.unionByName(passed, allowMissingColumns=True).unionByName(windowed, allowMissingColumns=True)


# -- stateless rules in the JVM ------------------------------------------------------------------


def _record(rule: ActiveRule) -> Column:
    """One filter rule's output record for the current event, NULL where it does not pass."""
    spec = rule.compiled.filter
    assert spec is not None
    key_parts = rule.compiled.partition_key
    subject = F.concat_ws("/", *(F.coalesce(key_column(p), F.lit("")) for p in key_parts)) if key_parts else F.col("subject")
    record = output_record(rule, spec.select, F.col("id"), subject, F.col("event_time"), F.col("tenantid"))
    return F.when(F.expr(spec.where), record) if spec.where else record


# Filters per projection. The code Spark generates for one projection of every filter's
# record outgrew the JVM's 64 KB method limit (70 filters, bench/rules.py): Spark then gave
# up whole-stage code generation for the plan, after trying to compile it again in every
# micro-batch, and ran it interpreted. A dozen filters stay well under the limit.
FILTERS_PER_PROJECTION = 12


def filters_output(events: DataFrame, rules: Sequence[ActiveRule]) -> DataFrame:
    """Every filter's output as Kafka records (topic, rule, key, value), in the JVM.

    One projection per dozen filters, unioned: not one plan per filter, since a union of 70
    plans overflowed the analyzer's stack (bench/rules.py, 100 rules).
    """
    outputs = []
    for start in range(0, len(rules), FILTERS_PER_PROJECTION):
        chunk = rules[start:start + FILTERS_PER_PROJECTION]
        passing = events
        wheres = [rule.compiled.filter.where for rule in chunk]  # type: ignore[union-attr]
        if all(wheres):
            # Most events pass no filter: drop them before the array of every filter's
            # record is built and exploded, which cost far more than the conditions.
            passing = events.where(reduce(Column.__or__, (F.expr(where) for where in wheres)))
        # NULLs are dropped after the explode, not by ``filter(array, x -> x IS NOT NULL)``,
        # whose lambda Spark does not compile.
        records = passing.select(F.explode(F.array(*map(_record, chunk))).alias("r")).where(F.col("r").isNotNull())
        outputs.append(records.select("r.topic", "r.rule", "r.key", "r.value"))
    return reduce(DataFrame.unionByName, outputs)


# -- the job ----------------------------------------------------------------------------------


class RulesJob:
    """The rules query and its driver-side loop: registry polling, quarantine, restarts.

    A :class:`~wayline.pipelines.job.Job`: watched like a single query, though it restarts
    its query when a new partition key needs a new branch of the plan."""

    def __init__(self, spark: SparkSession, settings: Settings, database: Database, checkpoint: Path,
                 control: Any | None = None) -> None:
        self._spark = spark
        self._settings = settings
        self._database = database
        self._checkpoint = checkpoint
        self._control = control
        self.counters = JobCounters()
        self._rules = load_rule_set(database)
        self._checked_at = time.monotonic()
        self._running = RestartingQuery("rules", self._start_query, self.counters.restarted)
        self._joins = JoinQueries(spark, settings, database, checkpoint.with_name(checkpoint.name + "-joins"))

    @property
    def rule_set(self) -> RuleSet:
        return self._rules

    @property
    def query(self) -> StreamingQuery | None:
        return self._running.query

    @property
    def joins(self) -> JoinQueries:
        return self._joins

    def start(self) -> RulesJob:
        self._running.begin()
        self._joins.sync(self._rules.joins)
        return self

    def stop(self) -> None:
        self._joins.stop()
        self._running.stop()

    def rereads_registry(self) -> bool:
        """Whether the next micro-batch reads the rules version again before its events (the
        registry is read at most every ``rules.version_poll_s``, and only when a batch runs):
        a rule change made before then applies to the events of that batch."""
        return time.monotonic() - self._checked_at >= self._settings.rules.version_poll_s

    @property
    def isActive(self) -> bool:  # noqa: N802 - reads like StreamingQuery's
        return self._running.isActive

    def exception(self) -> BaseException | None:
        return self._running.exception()

    def raise_if_failed(self) -> None:
        failure = self.exception()
        if failure is not None:
            raise failure

    def _start_query(self) -> StreamingQuery:
        specs = self._rules.key_specs
        ensure_topics(self._settings.kafka_bootstrap(), {r.output_topic for r in self._rules.rules},
                      self._settings.rules.output_partitions)
        windows = self._rules.windows
        stream = rules_stream(self._spark, self._settings, specs, self._settings.postgres_dsn(), windows)
        self._query_specs = specs
        self._query_windows = {rule.state_key for rule in windows}
        previous = self._spark.conf.get(SINGLE_WATERMARK[0], None)
        # A query takes its own copy of the session's settings when it is created.
        self._spark.conf.set(*SINGLE_WATERMARK)
        try:
            return self._start_writing(stream)
        finally:
            if previous is None:
                self._spark.conf.unset(SINGLE_WATERMARK[0])
            else:
                self._spark.conf.set(SINGLE_WATERMARK[0], previous)

    def _start_writing(self, stream: DataFrame) -> StreamingQuery:
        return (
            stream.writeStream.queryName("wayline-rules")
            .option("checkpointLocation", str(self._checkpoint))
            .trigger(processingTime=f"{int(self._settings.rules.trigger_interval_s * 1000)} milliseconds")
            .foreachBatch(concise_failures("wayline-rules", self._batch))
            .start()
        )

    # -- one micro-batch --------------------------------------------------------------------

    def _batch(self, batch: DataFrame, batch_id: int) -> None:
        # Before the batch, not after: a change made while no data came must apply to the
        # next events, not to the batch after them.
        self._poll()
        rules = self._rules
        by_key = rules.by_state_key()
        batch = batch.persist()
        try:
            events = batch.where(F.col("out_kind") == F.lit(EVENT)).select(*EVENT_COLUMNS)
            # The events' count rides on the same job as the processor's reports: one Spark
            # job fewer per micro-batch.
            counted = batch.where(F.col("out_kind") == F.lit(EVENT)).agg(
                F.lit(COUNT).alias("out_kind"), F.lit(None).cast("string").alias("out_rule"),
                F.lit(None).cast("string").alias("out_value"), F.count(F.lit(1)).alias("out_count"))
            small = batch.where(F.col("out_kind").isin(FAILURE, METRICS)).select(
                "out_kind", "out_rule", "out_value", "out_count").unionByName(counted).collect()
            count = next(row.out_count for row in small if row.out_kind == COUNT)
            failed = {row.out_rule: row.out_value for row in small if row.out_kind == FAILURE}
            emitted = batch.where(F.col("out_kind") == F.lit(EMIT))
            # Window rules removed since the query started still close their windows in it.
            dropped = set(failed) | (self._query_windows - by_key.keys())
            if dropped:
                emitted = emitted.where(~F.col("out_rule").isin(sorted(dropped)))
            outputs: list[DataFrame] = [emitted.select(
                F.col("out_topic").alias("topic"), F.col("out_rule").alias("rule"),
                F.col("out_key").cast("binary").alias("key"), F.col("out_value").cast("binary").alias("value"),
            )]
            filters = rules.filters
            if filters:
                outputs.append(filters_output(events, filters))
            per_rule = self._write(outputs, events, filters, failed)
            self.counters.account(count, per_rule, [Report(*row) for row in small], failed, by_key)
        finally:
            batch.unpersist()
        self._quarantine(failed, by_key)

    def _write(self, outputs: list[DataFrame], events: DataFrame, filters: list[ActiveRule],
               failed: dict[str, str]) -> dict[str, int]:
        if not outputs:
            return {}
        combined = outputs[0]
        for frame in outputs[1:]:
            combined = combined.unionByName(frame)
        combined = combined.persist()
        try:
            try:
                per_rule = {row.rule: row["count"] for row in combined.groupBy("rule").count().collect()}
            except Exception as exc:  # noqa: BLE001 - find the filter that broke it, run the rest
                if interrupted(exc):
                    raise
                log.warning("the filters' combined output failed (%s); running them one by one", exc)
                combined.unpersist()
                return self._write_one_by_one(outputs[:1], events, filters, failed)
            write_to_kafka(combined.select("topic", "key", "value"), self._settings)
            return per_rule
        finally:
            combined.unpersist()

    def _write_one_by_one(self, stateful: list[DataFrame], events: DataFrame, filters: list[ActiveRule],
                          failed: dict[str, str]) -> dict[str, int]:
        per_rule: dict[str, int] = {}
        good = list(stateful)
        for rule in filters:
            frame = filters_output(events, [rule]).persist()
            try:
                per_rule[rule.state_key] = frame.count()
                good.append(frame)
            except Exception as exc:  # noqa: BLE001 - this rule is quarantined, the others go on
                frame.unpersist()
                if interrupted(exc):
                    raise
                failed[rule.state_key] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        for frame in good:
            write_to_kafka(frame.select("topic", "key", "value"), self._settings)
            frame.unpersist()
        return per_rule

    def _quarantine(self, failed: dict[str, str], by_key: dict[str, ActiveRule]) -> None:
        if not failed:
            return
        with self._database.transaction() as session:
            for state_key, error in failed.items():
                rule = by_key.get(state_key)
                if rule is None:
                    continue
                if rule_service.quarantine(session, rule.id, rule.revision, error):
                    log.warning("rule %s quarantined: %s", rule.name, error)
                    self.counters.quarantine(rule, error)
        self._checked_at = 0.0  # reload now: the quarantined rules must stop at once

    def _poll(self) -> None:
        if self._control is not None:
            self._control.apply_pending(self._database)
        failed = self._joins.failures()
        if failed:
            self._quarantine(failed, self._rules.by_state_key())
        now = time.monotonic()
        if now - self._checked_at < self._settings.rules.version_poll_s:
            return
        self._checked_at = now
        if _rules_version(self._database) == self._rules.version:
            return
        self._rules = load_rule_set(self._database)
        self.counters.reloaded()
        ensure_topics(self._settings.kafka_bootstrap(), {r.output_topic for r in self._rules.rules},
                      self._settings.rules.output_partitions)
        self._joins.sync(self._rules.joins)
        if not set(self._rules.key_specs) <= set(self._query_specs) \
                or not {rule.state_key for rule in self._rules.windows} <= self._query_windows:
            # A new partition key needs a new branch of the plan, a new or changed window
            # rule its place in the aggregation: restart on the checkpoint.
            self._running.restart()


__all__ = [
    "OUTPUT_SCHEMA", "RulesJob", "RulesProcessor", "filters_output", "load_rule_set", "routed_events", "rules_stream",
]
