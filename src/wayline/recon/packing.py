"""Records packed by key before the reconciler's shuffle: one row per (reconciliation, bucket) and input batch.

``transformWithStateInPandas`` takes its input row by row: PySpark turns each Arrow
batch into pandas, then walks it with ``itertuples`` to group rows by key and rebuilds a
``DataFrame`` per key (4.3 has no Arrow-batch input for it). Packing each Arrow batch of
the read, column-wise in Arrow, into one row of lists per key hands that path a few
dozen rows per micro-batch instead of every record; :func:`unpacked` undoes it on the
other side. Nothing is judged here, so the reconciler sees exactly the records it saw
unpacked.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

KEYS = ("recon_id", "bucket")
VALUES = ("side", "id", "source", "time")


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


def unpacked(frames: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """The records of one key's packed rows, one record per row again (columns :data:`VALUES`)."""
    cells: dict[str, list[np.ndarray]] = {name: [] for name in VALUES}
    for frame in frames:
        for name in VALUES:
            cells[name].extend(frame[name])
    return pd.DataFrame({name: np.concatenate(cells[name]) if cells[name] else [] for name in VALUES})


__all__ = ["KEYS", "VALUES", "pack", "unpacked"]
