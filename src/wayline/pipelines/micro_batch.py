"""What every job's ``foreachBatch`` step shares: failures Spark can survive reporting, and
telling a stop from a failure."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from pyspark.sql import DataFrame

from wayline.core.errors import WaylineError

_log = logging.getLogger(__name__)

# Spark matches a failed foreachBatch's message against a regex to tell a stop from a
# failure; a message of many kilobytes (SQL with thousands of parameters, a large plan)
# overflows the query thread's stack, and the query then dies without recording why.
MAX_FAILURE_CHARS = 2000
MicroBatchStep = Callable[[DataFrame, int], None]


# How Spark words a stop: the query's own, or Ctrl-C in a command (PySpark's SIGINT
# handler cancels every running job, another job's micro-batch among them).
_STOPPED = ("java.lang.InterruptedException", "SPARK_JOB_CANCELLED")


def interrupted(exc: BaseException) -> bool:
    """Did a stop interrupt this micro-batch's Spark jobs? (Spark tells by the text.)"""
    text = str(exc)
    return any(sign in text for sign in _STOPPED)


def concise_failures(query: str, step: MicroBatchStep) -> MicroBatchStep:
    """``step`` with its failures logged in full and re-raised with a short message."""

    @functools.wraps(step)
    def run(batch: DataFrame, batch_id: int) -> None:
        try:
            step(batch, batch_id)
        except Exception as exc:
            # Expected on a stop, and not worth a traceback.
            if not interrupted(exc):
                _log.exception("%s: micro-batch %d failed", query, batch_id)
            raise WaylineError(
                f"{query}: micro-batch {batch_id} failed: {type(exc).__name__}: {str(exc)[:MAX_FAILURE_CHARS]}"
            ) from None

    return run


__all__ = ["MAX_FAILURE_CHARS", "MicroBatchStep", "concise_failures", "interrupted"]
