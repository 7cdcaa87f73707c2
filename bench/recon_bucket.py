"""Benchmark: one bucket's reconciler, pairs settled column-wise against every record judged one by one.

The data shape of ``bench/recon.py`` as one bucket sees it: ``--ids`` audited ids over one
hour of event time, one expected and (for all but 0.1 %) one actual a second later per id,
in micro-batches of ``--batch`` records cut in time order, as the job hands them to
:meth:`wayline.recon.state.Bucket.process_sorted` (columns sorted by time, side, id). The
periods are the job benchmark's (``m`` = 2 h, so every id stays held). Both paths get the
same batches in the same process, one after the other, ``--runs`` times; reported: records/s
per path (medians), their ratio, and the ids held at the end. Nothing but the reconciler
runs, so this is the per-record Python cost the job pays inside its stateful operator.

Run: .venv/bin/python bench/recon_bucket.py [--ids 62500] [--batch 12500] [--runs 5]
"""

from __future__ import annotations

import json
import statistics
import time

import numpy as np

from toolkit import cli
from toolkit.results import machine, record_results
from wayline.recon.periods import Periods
from wayline.recon.state import SIDE_ORDER, Bucket

PERIODS = Periods(o=60_000, n=30_000, m=7_200_000, z=3_600_000)


def batches(ids: int, batch: int) -> list[tuple[np.ndarray, ...]]:
    n = np.arange(ids)
    at = 3_600_000 * n // ids
    kept = n % 1000 != 999
    sides = np.r_[np.full(ids, "expected", dtype=object), np.full(int(kept.sum()), "actual", dtype=object)]
    names = np.array([f"e{i}" for i in n], dtype=object)
    records = (sides, np.r_[names, names[kept]], np.r_[np.full(ids, "s", dtype=object),
                                                       np.full(int(kept.sum()), "", dtype=object)],
               np.r_[at, at[kept] + 1000])
    order = np.lexsort((records[1], [SIDE_ORDER[s] for s in records[0]], records[3]))
    records = tuple(column[order] for column in records)
    return [tuple(column[start:start + batch] for column in records) for start in range(0, len(order), batch)]


def once(cut: list[tuple[np.ndarray, ...]], settle: bool) -> tuple[float, int]:
    bucket = Bucket(PERIODS, settle=settle)
    started = time.perf_counter()
    for now, columns in enumerate(cut):
        bucket.process_sorted(*columns, now)
        bucket.take_changed()
    return time.perf_counter() - started, bucket.size


def main() -> None:
    parser = cli.parser(__doc__, runs=5)
    parser.add_argument("--ids", type=int, default=62_500)  # 1,000,000 ids over the job's 16 buckets
    parser.add_argument("--batch", type=int, default=12_500)  # 200,000 records a micro-batch over 16 buckets
    args = parser.parse_args()
    cut = batches(args.ids, args.batch)
    records = sum(len(columns[0]) for columns in cut)
    rates: dict[str, list[float]] = {"per_record": [], "settled": []}
    held = {}
    for _ in range(args.runs):
        for name, settle in (("per_record", False), ("settled", True)):
            seconds, held[name] = once(cut, settle)
            rates[name].append(records / seconds)
    medians = {name: statistics.median(values) for name, values in rates.items()}
    summary = {"ids": args.ids, "records": records, "batches": len(cut), "runs": rates,
               "median_records_per_s": medians, "ratio": medians["settled"] / medians["per_record"],
               "us_per_record": {name: 1e6 / rate for name, rate in medians.items()}, "held": held}
    record_results("recon_bucket", summary, args.out)
    print(json.dumps({**machine(), **summary}, indent=1, default=str))


if __name__ == "__main__":
    main()
