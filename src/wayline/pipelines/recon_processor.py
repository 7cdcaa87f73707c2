"""The recon job's stateful operator: ``ReconProcessor``, keyed by (reconciliation, bucket).

Its output rows (``OUTPUT_SCHEMA``) are of four kinds: an id ``missing`` or ``found``, a
``change`` of a window's counts, and a bucket's ``mark`` (its watermark), which the job's
driver turns into events and PostgreSQL rows (``wayline.pipelines.recon_job``).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence
from typing import Any

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from wayline.pipelines.worker_cache import WorkerCache
from wayline.recon import packing
from wayline.recon.figures import COUNT_NAMES
from wayline.recon.periods import Periods
from wayline.recon.state import SIDE_ORDER, UNREADABLE, Bucket, Step

MISSING, FOUND, CHANGE, MARK = "missing", "found", "change", "mark"
OUTPUT_SCHEMA = StructType([
    StructField("kind", StringType()),
    StructField("recon_id", StringType()),
    StructField("id", StringType()),
    StructField("source", StringType()),
    StructField("window_start", LongType()),
    StructField("expected_time", LongType()),
    StructField("actual_time", LongType()),
    StructField("watermark", LongType()),
    *(StructField(name, LongType()) for name in COUNT_NAMES),
])
# The stored bucket: its clock and the timer registered for it (with the token of the
# chunks as last written), and its ids by chunk of event time.
_META_SCHEMA = StructType([StructField("token", LongType()), StructField("clock", LongType()),
                           StructField("moved_at", LongType()), StructField("timer", LongType())])
_CHUNK_KEY_SCHEMA = StructType([StructField("chunk", LongType())])
_CHUNK_SCHEMA = StructType([StructField("blob", BinaryType())])


class ReconProcessor(StatefulProcessor):
    """One key is (reconciliation, bucket); its state is a :class:`Bucket` stored by chunk of event time.

    A Python worker keeps each key's bucket live between micro-batches, as the rules engine
    keeps its evaluators (``wayline.pipelines.worker_cache``): the stored meta carries a
    random token, rewritten with the state; a worker whose cached bucket has the stored token
    uses it, any other worker (or the same one after a failed or replayed micro-batch, whose
    state the store rolled back) rebuilds it from the stored chunks. Only the chunks a
    micro-batch changed are written back.
    """

    _live: WorkerCache[Bucket] = WorkerCache()

    def __init__(self, periods: dict[str, Periods]) -> None:
        self._periods = periods

    def init(self, handle: StatefulProcessorHandle) -> None:
        self._handle = handle
        self._meta = handle.getValueState("meta", _META_SCHEMA)
        self._chunks = handle.getMapState("chunks", _CHUNK_KEY_SCHEMA, _CHUNK_SCHEMA)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        frame = packing.unpacked(rows)
        unreadable = (frame["side"] == UNREADABLE).to_numpy()
        counted = None
        if unreadable.any():
            counted = (frame["source"].to_numpy()[unreadable], frame["time"].to_numpy()[unreadable])
            frame = frame[~unreadable]
        # The reconciler takes records in (time, side, id) order: sorted here, column-wise.
        frame = frame.assign(order=frame["side"].map(SIDE_ORDER)).sort_values(["time", "order", "id"])
        yield self._step((key[0], int(key[1])), (frame["side"].to_numpy(), frame["id"].to_numpy(),
                                                 frame["source"].to_numpy(), frame["time"].to_numpy()),
                         timerValues.getCurrentProcessingTimeInMs(), unreadable=counted)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:
        yield self._step((key[0], int(key[1])), ([], [], [], []), timerValues.getCurrentProcessingTimeInMs(),
                         fired=True)

    def close(self) -> None:
        pass

    def _bucket(self, group: tuple[str, int], meta: tuple | None, periods: Periods) -> Bucket:
        cached = self._live.cached(group, meta[0] if meta is not None else None)
        # Taken out while in use: a task that fails half-way leaves no half-changed bucket behind.
        self._live.drop(group)
        if cached is not None:
            cached.periods = periods
            return cached
        if meta is None:
            return Bucket(periods)
        return Bucket.restore(periods, meta[1], meta[2], (pickle.loads(value[0]) for value in self._chunks.values()))

    def _step(self, group: tuple[str, int], columns: tuple[Sequence, Sequence, Sequence, Sequence], now: int,
              fired: bool = False, unreadable: tuple[Sequence, Sequence] | None = None) -> pd.DataFrame:
        """``columns``: the records (side, id, source, time) in order; ``unreadable``: the
        (source, time) of the records the reconciliation could not read."""
        recon_id = group[0]
        meta = self._meta.get()
        timer = None if fired or meta is None else meta[3]  # Spark removed a timer that fired
        periods = self._periods.get(recon_id)
        if periods is None:  # the reconciliation was removed or disabled: so is its state
            if timer is not None:
                self._handle.deleteTimer(timer)
            self._meta.clear()
            self._chunks.clear()
            self._live.drop(group)
            return _frame([])
        bucket = self._bucket(group, meta, periods)
        step = bucket.process_sorted(*columns, now)
        if unreadable is not None:
            bucket.count_unreadable(*unreadable, step)
        for number, chunk in bucket.take_changed().items():
            if chunk is None:
                self._chunks.removeKey((number,))
            else:
                self._chunks.updateValue((number,), (pickle.dumps(chunk, protocol=pickle.HIGHEST_PROTOCOL),))
        wake = bucket.wake_at
        if wake != timer:
            if timer is not None:
                self._handle.deleteTimer(timer)
            if wake is not None:
                self._handle.registerTimer(wake)
        if bucket.size or bucket.clock is not None:
            token = self._live.keep(group, bucket)
            self._meta.update((token, bucket.clock, bucket.moved_at, wake))
        return _frame(_rows(recon_id, step))


def _rows(recon_id: str, step: Step) -> list[tuple[Any, ...]]:
    none_counts = (None,) * len(COUNT_NAMES)
    out: list[tuple[Any, ...]] = [
        (e.kind, recon_id, e.id, e.source, None, e.expected_time, e.actual_time, e.watermark, *none_counts)
        for e in step.emitted
    ]
    for (source, window), counts in step.counts.items():
        if counts:
            out.append((CHANGE, recon_id, None, source, window, None, None, None,
                        *(getattr(counts, name) for name in COUNT_NAMES)))
    if step.watermark is not None:
        out.append((MARK, recon_id, None, None, None, None, None, step.watermark, *none_counts))
    return out


def _frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=[f.name for f in OUTPUT_SCHEMA.fields])


__all__ = ["CHANGE", "FOUND", "MARK", "MISSING", "OUTPUT_SCHEMA", "ReconProcessor"]
