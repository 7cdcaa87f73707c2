"""`wayline run rules`: every active rule over one read of the event topics.

``RulesJob`` starts the query (``wayline.pipelines.rules_plan``) and runs its driver-side
loop: in each micro-batch it writes the stateful rules' output
(``wayline.pipelines.rules_processor``) and the filters' (``wayline.pipelines.rules_filters``)
to Kafka, counts, and quarantines the rules that failed.

Rules change between micro-batches without a restart:
- stateless (filter) rules are Spark SQL that ``foreachBatch`` applies to the batch's
  events with the rule set it holds; the driver re-reads the registry when the rules
  version changes;
- the stateful processor re-reads the running rules itself, in each task
  (``wayline.pipelines.rules_processor``).
Only a stateful rule with partition-key columns no running rule has needs another branch
of the plan, and a new or changed fixed window rule its place in the aggregation: the job
then restarts the query on its checkpoint (seconds; nothing is lost).

Join rules run as queries of their own, which the job starts and stops as its rule set
moves (``wayline.pipelines.joins``); one that fails is quarantined like any rule.

Isolation: the processor reports a rule that failed (``wayline.rules.engine``); the driver
quarantines it in the registry and drops its output for the micro-batch. A filter reads
``data.*`` with ``try_variant_get`` (a value that does not convert is NULL), but its SQL
can still fail in the JVM (ANSI mode raises on a division by zero): then the micro-batch's
first job fails before anything is written, its reports are taken again without the
filters, each filter is run alone, and the failing ones are quarantined.

A micro-batch is two Spark jobs: one computes the batch, the filters' outputs and every
count the driver needs; the second writes the outputs to Kafka.
"""

from __future__ import annotations

import logging
import time
from functools import reduce
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.pipelines.job import RestartingQuery
from wayline.pipelines.joins import JoinQueries
from wayline.pipelines.micro_batch import concise_failures, interrupted
from wayline.pipelines.rule_sets import load_rule_set, rules_version
from wayline.pipelines.rules_filters import FilterOutputs, filters_output
from wayline.pipelines.rules_plan import SINGLE_WATERMARK, rules_stream
from wayline.pipelines.source import write_to_kafka
from wayline.registry import rule as rule_service
from wayline.registry.db import Database
from wayline.rules.columns import EVENT_COLUMNS
from wayline.rules.counters import EMIT, EVENT, FAILURE, METRICS, JobCounters, Report
from wayline.rules.engine import ActiveRule
from wayline.rules.ruleset import RuleSet
from wayline.rules.shards import LEGACY_SHARDS, ShardLayout, checkpoint_layout

log = logging.getLogger(__name__)

COUNT = "count"  # the micro-batch's number of events, computed in the driver's first job
OUTPUTS = "outputs"  # a rule's number of output records in the micro-batch, in the same job


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
        self._filter_outputs = FilterOutputs(self._rules.filters)
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
        stream = rules_stream(self._spark, self._settings, specs, self._settings.postgres_dsn(),
                              self._shard_layout(), windows)
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

    def _shard_layout(self) -> ShardLayout:
        """The checkpoint's layout of the stateful groups (``wayline.rules.shards``)."""
        rules, partitions = self._settings.rules, self._settings.spark.shuffle_partitions
        legacy = ShardLayout(rules.shards if "shards" in rules.model_fields_set else LEGACY_SHARDS, partitions,
                             balanced=False)
        return checkpoint_layout(self._checkpoint, ShardLayout(rules.shards, partitions), legacy)

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
        filters = rules.filters
        batch = batch.persist()
        combined: DataFrame | None = None
        separate: dict[str, tuple[int, DataFrame]] = {}  # the filters run one by one, if they were
        failed: dict[str, str] = {}
        try:
            events = batch.where(F.col("out_kind") == F.lit(EVENT)).select(*EVENT_COLUMNS)
            emitted = batch.where(F.col("out_kind") == F.lit(EMIT)).select(
                F.col("out_topic").alias("topic"), F.col("out_rule").alias("rule"),
                F.col("out_key").cast("binary").alias("key"), F.col("out_value").cast("binary").alias("value"))
            combined = _persisted([emitted, self._filter_outputs.of(events)] if filters else [emitted],
                                  self._settings.spark.shuffle_partitions)
            try:
                small = _reports(batch, combined).collect()
            except Exception as exc:  # noqa: BLE001 - find the filter that broke it, run the rest
                if interrupted(exc) or not filters:
                    raise
                log.warning("the filters' combined output failed (%s); running them one by one", exc)
                combined.unpersist()
                combined = _persisted([emitted], self._settings.spark.shuffle_partitions)
                small = _reports(batch, combined).collect()
                separate = self._filters_one_by_one(events, filters, failed)
            count = next(row.out_count for row in small if row.out_kind == COUNT)
            failed.update({row.out_rule: row.out_value for row in small if row.out_kind == FAILURE})
            # Window rules removed since the query started still close their windows in it.
            dropped = set(failed) | (self._query_windows - by_key.keys())
            per_rule = {row.out_rule: row.out_count for row in small
                        if row.out_kind == OUTPUTS and row.out_rule not in dropped}
            per_rule.update({state_key: outputs for state_key, (outputs, _) in separate.items()})
            kept = combined.where(~F.col("rule").isin(sorted(dropped))) if dropped else combined
            for frame in (kept, *(frame for _, frame in separate.values())):
                write_to_kafka(frame.select("topic", "key", "value"), self._settings)
            self.counters.account(count, per_rule, [Report(*row) for row in small if row.out_kind != OUTPUTS],
                                  failed, by_key)
        finally:
            for frame in (combined, *(frame for _, frame in separate.values())):
                if frame is not None:
                    frame.unpersist()
            batch.unpersist()
        self._quarantine(failed, by_key)

    @staticmethod
    def _filters_one_by_one(events: DataFrame, filters: list[ActiveRule],
                            failed: dict[str, str]) -> dict[str, tuple[int, DataFrame]]:
        """Each filter's count of outputs and its output alone, persisted, for those that
        compute; the others go in ``failed``."""
        good = {}
        for rule in filters:
            frame = filters_output(events, [rule]).persist()
            try:
                good[rule.state_key] = (frame.count(), frame)
            except Exception as exc:  # noqa: BLE001 - this rule is quarantined, the others go on
                frame.unpersist()
                if interrupted(exc):
                    raise
                failed[rule.state_key] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        return good

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
        if rules_version(self._database) == self._rules.version:
            return
        self._rules = load_rule_set(self._database)
        self._filter_outputs = FilterOutputs(self._rules.filters)
        self.counters.reloaded()
        ensure_topics(self._settings.kafka_bootstrap(), {r.output_topic for r in self._rules.rules},
                      self._settings.rules.output_partitions)
        self._joins.sync(self._rules.joins)
        if not set(self._rules.key_specs) <= set(self._query_specs) \
                or not {rule.state_key for rule in self._rules.windows} <= self._query_windows:
            # A new partition key needs a new branch of the plan, a new or changed window
            # rule its place in the aggregation: restart on the checkpoint.
            self._running.restart()


def _persisted(outputs: list[DataFrame], partitions: int) -> DataFrame:
    """The outputs as one frame, persisted: counted by the first job, written by the second.

    The union has a partition per partition of the batch and per filter projection (12 at
    10 rules, 42 at 100), nearly all of them empty or a few rows: as many tasks in each job
    over it, each a fixed cost (docs/benchmarks.md, issue 27, 2026-11-28). A coalesce keeps
    the work, not the tasks."""
    return reduce(DataFrame.unionByName, outputs).coalesce(partitions).persist()


def _reports(batch: DataFrame, combined: DataFrame) -> DataFrame:
    """One job's worth of small rows: the processor's failures and metrics, the events'
    count and each rule's number of outputs. The stateful side and every filter run in it, so
    a micro-batch is two Spark jobs (this, then the write), and a filter that fails does so
    before anything is written."""
    nothing = F.lit(None).cast("string")
    counted = batch.where(F.col("out_kind") == F.lit(EVENT)).agg(
        F.lit(COUNT).alias("out_kind"), nothing.alias("out_rule"), nothing.alias("out_value"),
        F.count(F.lit(1)).alias("out_count"))
    per_rule = combined.groupBy("rule").agg(
        F.lit(OUTPUTS).alias("out_kind"), F.col("rule").alias("out_rule"), nothing.alias("out_value"),
        F.count(F.lit(1)).alias("out_count")).drop("rule")
    return batch.where(F.col("out_kind").isin(FAILURE, METRICS)).select(
        "out_kind", "out_rule", "out_value", "out_count").unionByName(counted).unionByName(per_rule)


__all__ = ["RulesJob"]
