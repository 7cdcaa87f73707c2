"""Join rules (``wayline.rules.join``): one streaming query per running join rule.

A join cannot join the rules job's query: that query's plan is fixed while it runs (its
stateful operators are in its checkpoint), and a stream-stream join is a stateful operator
of its own. So each join rule runs as its own query over the event topics, with a
checkpoint named by the rule's id and revision: a changed rule starts afresh, a removed one
is stopped, and the rules job starts and stops them as its rule set moves (``JoinQueries``).
A new join rule reads from ``rules.join_starting_offsets`` (the latest offsets, as a rule
deployed into the running job applies from the next micro-batch).

- *Interval join*: Spark's stream-stream join in the JVM, the events aliased twice, with a
  watermark ``rules.allowed_lateness_s`` behind the newest event time on both sides. The
  time bound in ON lets Spark drop an event from its state once the watermark passes its
  interval; a LEFT JOIN emits an unmatched ``a`` event then. Output to Kafka directly.
- *Stream-table join*: each micro-batch (``foreachBatch``) joins its events with the
  reference table as cached in Spark (``ReferenceTables``): loaded from PostgreSQL over
  JDBC, partitioned and sorted by key like the events' side of the join, so only the
  micro-batch is shuffled; reloaded when the table's version moves (polled at most every
  ``rules.version_poll_s``), so a change reaches the running rule without a restart.

Output: one CloudEvent per joined row (``wayline.pipelines.rule_output``), its id from the
rule and the ids of the joined events (an event and its table row: the event's id), so a
replayed micro-batch emits the same ids; ``subject`` the left side's join key, ``time`` and
``tenantid`` the left event's. A query that fails, or that Spark refuses to start, is
reported (``failures``); the rules job quarantines its rule, and the other rules run on.
"""

from __future__ import annotations

import logging
import re
import shutil
import threading
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from sqlalchemy.engine import make_url

from wayline.core.settings import Settings
from wayline.pipelines.envelope import parse_events, valid_events
from wayline.pipelines.micro_batch import interrupted
from wayline.pipelines.rule_output import output_record
from wayline.pipelines.source import read_kafka, write_to_kafka
from wayline.registry import reference
from wayline.registry.db import Database
from wayline.rules.engine import OUTPUT_SOURCE_PREFIX, ActiveRule
from wayline.rules.join import JoinKind, JoinSpec

log = logging.getLogger(__name__)


def jdbc_options(dsn: str) -> dict[str, str]:
    """Spark's JDBC options for the registry's PostgreSQL, from its ``postgresql://`` DSN."""
    url = make_url(dsn)
    options = {"url": f"jdbc:postgresql://{url.host}:{url.port or 5432}/{url.database}", "driver": "org.postgresql.Driver"}
    if url.username:
        options["user"] = url.username
    if url.password:
        options["password"] = url.password
    return options


class ReferenceTables:
    """Each reference table a join rule reads, as a cached DataFrame (``key``, ``data``
    VARIANT) of its version in PostgreSQL; reloaded when the version moves."""

    def __init__(self, spark: SparkSession, settings: Settings, database: Database) -> None:
        self._spark = spark
        self._settings = settings
        self._database = database
        self._lock = threading.Lock()
        self._loaded: dict[str, tuple[int, DataFrame]] = {}
        self._checked: dict[str, float] = {}

    def frame(self, name: str) -> DataFrame:
        with self._lock:
            loaded = self._loaded.get(name)
            now = time.monotonic()
            if loaded is not None and now - self._checked.get(name, 0.0) < self._settings.rules.version_poll_s:
                return loaded[1]
            self._checked[name] = now
            with self._database.transaction() as session:
                version = reference.versions(session, [name]).get(name)
            if version is None:
                raise LookupError(f"reference table {name} was deleted")
            if loaded is not None and loaded[0] == version:
                return loaded[1]
            fresh = self._load(name)
            if loaded is not None:
                loaded[1].unpersist()
            self._loaded[name] = (version, fresh)
            log.info("reference table %s loaded at version %d", name, version)
            return fresh

    def _load(self, name: str) -> DataFrame:
        # ``name`` is an identifier (reference.NAME_PATTERN), so it can stand in the query.
        query = f"SELECT key, data::text AS data FROM reference_rows WHERE table_name = '{name}'"
        frame = (
            self._spark.read.format("jdbc").options(**jdbc_options(self._settings.postgres_dsn()))
            .option("query", query).option("fetchsize", "10000").load()
            .select(F.col("key"), F.parse_json("data").alias("data"))
            # Laid out as the join wants the table (hash-partitioned and sorted by key): each
            # micro-batch shuffles and sorts only its own events.
            .repartition(self._settings.spark.shuffle_partitions, "key").sortWithinPartitions("key")
            .persist()
        )
        frame.count()
        return frame

    def close(self) -> None:
        with self._lock:
            for _, frame in self._loaded.values():
                frame.unpersist()
            self._loaded.clear()


def _pinned(frame: DataFrame, condition: str | None) -> DataFrame:
    """``frame`` where ``condition`` holds, the filter kept where it is written. Spark moves a
    deterministic filter below the watermark of a stream; a side's watermark would then
    follow only the events that side keeps (the orders, not the clock events or payments),
    and a LEFT JOIN's unmatched events would wait for more of that side's events. Wrapped
    in a non-deterministic expression (always true as a guard), the optimizer leaves it."""
    if not condition:
        return frame
    return frame.where(F.when(F.spark_partition_id() >= F.lit(0), F.expr(condition)))


# A LEFT JOIN's conditions on the left side alone (``JoinSpec.left_on``), as a column.
_MAY_MATCH = "_wayline_may_match"


def _joined(left: DataFrame, right: DataFrame, spec: JoinSpec) -> DataFrame:
    """The two sides joined as ``spec`` says. A LEFT JOIN's left-only ON conditions become a
    boolean column of the left side, and the join condition reads that column: a stream-stream
    join takes a comparison of one side's column with a constant in its condition (``v > 5``)
    for a bound on that side's event time, and never drops, so never emits, its rows."""
    condition = F.expr(spec.condition)
    left = _pinned(left.alias(spec.left), spec.left_where)
    if spec.left_on:
        left = left.withColumn(_MAY_MATCH, F.expr(spec.left_on))
        condition = condition & F.col(_MAY_MATCH)
    return left.join(_pinned(right.alias(spec.right), spec.right_where), condition, _how(spec))


def _records(joined: DataFrame, rule: ActiveRule, spec: JoinSpec) -> DataFrame:
    joined = _pinned(joined, spec.where)
    left, right = F.col(f"{spec.left}.id"), F.col(f"{spec.right}.id") if spec.kind is JoinKind.INTERVAL else None
    origin = F.concat_ws("\x1f", left, F.coalesce(right, F.lit(""))) if right is not None else left
    record = output_record(rule, spec.select, origin, F.coalesce(F.expr(spec.key), F.lit("")),
                           F.col(f"{spec.left}.event_time"), F.col(f"{spec.left}.tenantid"))
    return joined.select(record.alias("r")).select("r.topic", "r.key", "r.value")


def _how(spec: JoinSpec) -> str:
    return "left_outer" if spec.outer else "inner"


def start_join(spark: SparkSession, settings: Settings, rule: ActiveRule, checkpoint: Path,
               tables: ReferenceTables) -> StreamingQuery:
    """Start one join rule's query."""
    spec = rule.compiled.join
    assert spec is not None
    events = valid_events(parse_events(read_kafka(spark, settings, starting_offsets=settings.rules.join_starting_offsets),
                                       settings.envelope))
    events = events.where(~F.startswith(F.col("source"), F.lit(OUTPUT_SOURCE_PREFIX)))
    writer_name = f"wayline-join-{rule.name}"
    trigger = f"{int(settings.rules.trigger_interval_s * 1000)} milliseconds"
    if spec.kind is JoinKind.INTERVAL:
        events = events.withWatermark("event_time", f"{int(settings.rules.allowed_lateness_s * 1000)} milliseconds")
        return (
            _records(_joined(events, events, spec), rule, spec).writeStream.queryName(writer_name).format("kafka")
            .option("kafka.bootstrap.servers", settings.kafka_bootstrap())
            .option("checkpointLocation", str(checkpoint)).trigger(processingTime=trigger).start()
        )

    def enrich(batch: DataFrame, _batch_id: int) -> None:
        assert spec.table is not None
        write_to_kafka(_records(_joined(batch, tables.frame(spec.table), spec), rule, spec), settings)

    return (
        events.writeStream.queryName(writer_name).foreachBatch(enrich)
        .option("checkpointLocation", str(checkpoint)).trigger(processingTime=trigger).start()
    )


def _cause(error: str) -> str:
    """The line of a query's error that names its cause: the innermost Spark error class
    (the outer ones say only that a query or a foreachBatch failed), else the first line."""
    lines = [line.strip() for line in error.splitlines() if _ERROR_CLASS.search(line)]
    # A parse error's text starts with an empty line.
    return lines[-1] if lines else next((line.strip() for line in error.splitlines() if line.strip()), error)


_ERROR_CLASS = re.compile(r"\[[A-Z][A-Z0-9_]+\]")


class JoinQueries:
    """The running join rules' queries, kept in step with the rule set (``sync``)."""

    def __init__(self, spark: SparkSession, settings: Settings, database: Database, checkpoints: Path) -> None:
        self._spark = spark
        self._settings = settings
        self._checkpoints = checkpoints
        self._tables = ReferenceTables(spark, settings, database)
        self._queries: dict[str, tuple[ActiveRule, StreamingQuery]] = {}
        self._refused: dict[str, str] = {}  # rules whose query Spark would not start

    def sync(self, rules: list[ActiveRule]) -> None:
        wanted = {rule.state_key: rule for rule in rules}
        for state_key in list(self._queries):
            if state_key not in wanted:
                rule, query = self._queries.pop(state_key)
                query.stop()
                # A revision's checkpoint is never used again: a changed rule gets a new one.
                shutil.rmtree(self._checkpoint(rule), ignore_errors=True)
        for state_key, rule in wanted.items():
            if state_key in self._queries:
                continue
            try:
                query = start_join(self._spark, self._settings, rule, self._checkpoint(rule), self._tables)
            except Exception as exc:  # noqa: BLE001 - this rule is quarantined, the others go on
                if interrupted(exc):
                    raise
                log.warning("join rule %s could not start: %s", rule.name, exc)
                self._refused[state_key] = _cause(str(exc))
                shutil.rmtree(self._checkpoint(rule), ignore_errors=True)
                continue
            self._queries[state_key] = (rule, query)

    def failures(self) -> dict[str, str]:
        """The rules whose query stopped with an error, or would not start (state key ->
        error); they are forgotten here, so the next ``sync`` restarts them unless they are
        quarantined."""
        failed, self._refused = self._refused, {}
        for state_key, (_, query) in list(self._queries.items()):
            if not query.isActive:
                error = query.exception()
                failed[state_key] = _cause(str(error)) if error is not None else "the join query stopped"
                del self._queries[state_key]
        return failed

    @property
    def queries(self) -> dict[str, StreamingQuery]:
        return {state_key: query for state_key, (_, query) in self._queries.items()}

    def stop(self) -> None:
        for _, query in self._queries.values():
            query.stop()
        self._queries.clear()
        self._tables.close()

    def _checkpoint(self, rule: ActiveRule) -> Path:
        return self._checkpoints / f"{rule.id}-{rule.revision}"


__all__ = ["JoinQueries", "ReferenceTables", "jdbc_options", "start_join"]
