"""A foreachBatch step's failure: logged in full, re-raised short; a stop is not a failure to log."""

import logging

import pytest

from wayline.core.errors import WaylineError
from wayline.pipelines.micro_batch import MAX_FAILURE_CHARS, concise_failures, interrupted


def failing_with(message: str):
    def step(_batch, _batch_id: int) -> None:
        raise RuntimeError(message)
    return step


def test_a_failure_is_logged_in_full_and_re_raised_short(caplog: pytest.LogCaptureFixture) -> None:
    huge = "plan " * 10_000
    with caplog.at_level(logging.ERROR), pytest.raises(WaylineError) as raised:
        concise_failures("wayline-test", failing_with(huge))(None, 7)
    message = str(raised.value)
    assert message.startswith("wayline-test: micro-batch 7 failed: RuntimeError: plan ")
    assert len(message) < MAX_FAILURE_CHARS + 100
    assert caplog.records and huge in caplog.text, "the whole error is in the log"


def test_a_stop_is_re_raised_without_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    stop = "An error occurred while calling o41.collectToPython.\n: java.lang.InterruptedException"
    cancelled = ("An error occurred while calling o39912.collectToPython.\n: org.apache.spark.SparkException: "
                 "[SPARK_JOB_CANCELLED] Job 506 cancelled as part of cancellation of all jobs SQLSTATE: XXKDA")
    assert interrupted(RuntimeError(stop)) and interrupted(RuntimeError(cancelled))
    assert not interrupted(RuntimeError("division by zero"))
    with caplog.at_level(logging.ERROR), pytest.raises(WaylineError, match="InterruptedException"):
        concise_failures("wayline-test", failing_with(stop))(None, 8)
    assert not caplog.records
