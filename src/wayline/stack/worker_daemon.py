"""The Python workers' daemon (``spark.python.daemon.module``): PySpark's own, with Wayline's
worker-side modules imported once, before it forks the workers.

PySpark's daemon forks a worker per task slot; the worker imports ``pyspark.worker`` after
the fork and then, unpickling the task's function, the module that defines it: for the
rules job's stateful processor that is ``wayline.pipelines.rules_processor`` and, through
it, pandas, pyarrow, SQLAlchemy, pydantic and the rules engine. Every worker that Spark starts (a fresh
query, a worker it did not keep) paid those imports again, the largest item of the Python
workers' profile (see docs/benchmarks.md#where-an-events-time-goes-profile-10-and-100-rules).
Imported here, they are in every forked worker already.

A module that fails to import here costs only the time it would have saved: the worker
imports it again, and reports the error then, in the task that needs it.
"""

from __future__ import annotations

import importlib
import sys
import traceback

# What the workers' tasks import: PySpark's worker loop and Arrow serializers, and the
# modules that define Wayline's Python-side operators: the stateful processors, and the
# recon query's packing step.
PRELOADED = (
    "pyspark.worker",
    "pyspark.sql.pandas.serializers",
    "pyspark.sql.streaming.stateful_processor",
    "wayline.pipelines.rules_processor",
    "wayline.pipelines.batching",
    "wayline.pipelines.recon_processor",
    "wayline.pipelines.recon_packing",
)


def preload() -> None:
    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a worker imports it itself, and fails there if it must
            print(f"wayline worker daemon: could not preload {name}", file=sys.stderr)
            traceback.print_exc()


__all__ = ["PRELOADED", "preload"]


if __name__ == "__main__":
    preload()
    from pyspark.daemon import manager

    manager()
