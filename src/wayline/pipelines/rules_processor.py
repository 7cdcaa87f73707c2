"""The rules job's stateful operator: ``RulesProcessor``, keyed by (key_spec, shard).

A Python worker keeps each group's ``GroupEvaluator`` (its live matchers and windows)
between micro-batches (``wayline.pipelines.worker_cache``). The stored state carries a
random token, rewritten with the state: a worker whose cached evaluator has the stored
token uses it; any other worker, or the same one after a replayed micro-batch, resumes it
from the stored blob (``wayline.rules.group_state.GroupState``): per rule, columns over the
partition keys, and the keys' own states in segments decoded only when a key of theirs is
visited. It works out the rows each rule's prefilter admits on the group's whole frame
(``wayline.rules.prefilter``), so a rule's Python code only meets rows it may use.

The processor loads the running rules from the registry in each task, when the rules
version has moved (cached per Python worker, ``wayline.pipelines.rule_sets``). Its state is
keyed by rule id and revision, so a changed rule starts fresh and a removed rule's state is
dropped. A rule that fails is reported in the output (``wayline.rules.engine``), for the
driver to quarantine.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from typing import Any

import numpy as np
import orjson
import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from wayline.pipelines.rule_sets import WorkerRules
from wayline.pipelines.worker_cache import WorkerCache, tune_collector
from wayline.rules.columns import DATA, EVENT_COLUMNS
from wayline.rules.counters import EMIT, FAILURE, METRICS
from wayline.rules.engine import GroupEvaluator, cloudevent
from wayline.rules.prefilter import Prefilter
from wayline.rules.ruleset import RuleSet

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
ROW_COLUMNS = tuple(name for name in EVENT_COLUMNS if name != DATA)
_TIME_COLUMNS = ("time", "event_time")


class RulesProcessor(StatefulProcessor):
    """One key is (key_spec, shard); its state is one blob: every rule's state for its keys."""

    _live: WorkerCache[GroupEvaluator] = WorkerCache()

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn

    def init(self, handle: StatefulProcessorHandle) -> None:
        tune_collector()
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
            self._rules = WorkerRules.current(self._dsn)
        rules = [rule for rule in self._rules.rules if rule.compiled.in_processor and rule.key_spec == group[0]]
        cached = self._live.cached(group, token)
        if cached is not None:
            cached.use(rules, self._spent)
            return cached
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
            token = self._live.keep(group, evaluator)
            self._state.update((pickle.dumps((evaluator.watermark, snapshot), protocol=pickle.HIGHEST_PROTOCOL),))
            self._meta.update((token, wake))
        else:
            self._state.clear()
            self._meta.clear()
            self._live.drop(group)
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
               for name in ROW_COLUMNS]
    datas = [orjson.loads(text) if text is not None else None for text in frame["data_json"].tolist()]
    out = []
    for key, data, *values in zip(frame["key_value"].tolist(), datas, *columns, strict=True):
        row = dict(zip(ROW_COLUMNS, values, strict=True))
        row[DATA] = data
        out.append((key, row))
    return out


def _datetimes(column: pd.Series) -> list[datetime | None]:
    """UTC-aware datetimes (None for null) from Arrow's naive UTC timestamps, without pandas' per-value objects."""
    naive = column.to_numpy(dtype="datetime64[us]").astype(object)
    return [None if value is None else value.replace(tzinfo=timezone.utc) for value in naive]


__all__ = ["OUTPUT_SCHEMA", "ROW_COLUMNS", "RulesProcessor"]
