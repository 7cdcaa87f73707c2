"""Records packed by key before the reconciler's shuffle: one row per (reconciliation, bucket) and input batch,
each bucket's share of the reconciliation's clock among them.

``transformWithStateInPandas`` takes its input row by row: PySpark turns each Arrow
batch into pandas, then walks it with ``itertuples`` to group rows by key and rebuilds a
``DataFrame`` per key (4.3 has no Arrow-batch input for it). Packing each Arrow batch of
the read, column-wise in Arrow, into one row of lists per key hands that path a few
dozen rows per micro-batch instead of every record; :func:`unpacked` undoes it on the
other side. Nothing is judged here, so the reconciler sees exactly the records it saw
unpacked.

The clock is the reconciliation's, not a bucket's: :func:`clocked` gives every bucket of a
reconciliation a heartbeat at the newest time of the reconciliation's records in the input
batch, so each bucket's clock is the newest event time of the whole reconciliation, as if
one reconciler saw every id (``docs/decisions.md``, "Reconciliation watermark").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

KEYS = ("recon_id", "bucket")
VALUES = ("side", "id", "source", "time")
CLOCK_SIDES = pa.array(["expected", "actual", "heartbeat"])


def pack(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Per batch of routed records, one row per key holding its records' columns as aligned lists."""
    for batch in batches:
        if batch.num_rows == 0:
            continue
        # Single-threaded grouping keeps each group's rows in input order in every list,
        # so the lists stay aligned record by record.
        grouped = pa.Table.from_batches([batch]).group_by(list(KEYS), use_threads=False).aggregate(
            [(name, "list") for name in VALUES])
        yield from grouped.select([*KEYS, *(f"{name}_list" for name in VALUES)]).rename_columns(
            [*KEYS, *VALUES]).to_batches()


def clocked(batch: pa.RecordBatch, buckets: int) -> pa.RecordBatch:
    """``batch``'s routed records, and per reconciliation in it one heartbeat for each of its
    ``buckets`` at the newest time of its expected, actual and heartbeat records."""
    timed = batch.filter(pc.is_in(batch.column("side"), value_set=CLOCK_SIDES))
    newest = pa.Table.from_batches([timed]).group_by("recon_id", use_threads=False).aggregate([("time", "max")])
    if newest.num_rows == 0:
        return batch
    each = np.repeat(np.arange(newest.num_rows), buckets)
    count = len(each)
    beats = pa.RecordBatch.from_arrays([
        newest.column("recon_id").combine_chunks().take(each), pa.array(["heartbeat"] * count, pa.string()),
        pa.array([""] * count, pa.string()), pa.array([""] * count, pa.string()),
        newest.column("time_max").combine_chunks().take(each),
        pa.array(np.tile(np.arange(buckets, dtype=np.int32), newest.num_rows)),
    ], names=["recon_id", *VALUES, "bucket"])
    return pa.concat_batches([batch, beats.select(batch.schema.names).cast(batch.schema)])


def unpacked(frames: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """The records of one key's packed rows, one record per row again (columns :data:`VALUES`)."""
    cells: dict[str, list[np.ndarray]] = {name: [] for name in VALUES}
    for frame in frames:
        for name in VALUES:
            cells[name].extend(frame[name])
    return pd.DataFrame({name: np.concatenate(cells[name]) if cells[name] else [] for name in VALUES})


__all__ = ["CLOCK_SIDES", "KEYS", "VALUES", "clocked", "pack", "unpacked"]
