"""Waiting in a benchmark: on a condition with a deadline, on arrivals for as long as they
keep coming, on a streaming query to start."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


def holds_within(condition: Callable[[], object], timeout_s: float, every_s: float = 0.5) -> bool:
    """Whether ``condition()`` came to hold within ``timeout_s``, asked every ``every_s``
    (it may raise, to stop the wait on a failure)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(every_s)
    return True


def wait_until(condition: Callable[[], object], what: str, timeout_s: float, every_s: float = 0.5) -> None:
    """Return as soon as ``condition()`` holds; a TimeoutError naming ``what`` after ``timeout_s``."""
    if not holds_within(condition, timeout_s, every_s):
        raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")


def while_arriving(read: Callable[[], T], count: Callable[[T], int], expected: int, *, stall_s: float,
                   first_s: float | None = None, every_s: float = 0.5,
                   alive: Callable[[], bool] = lambda: True) -> T:
    """``read()`` every ``every_s`` until its ``count`` reaches ``expected``, or it has not
    grown for ``stall_s`` (``first_s`` before anything came: a job's start may take
    longer), or ``alive()`` says no (it may raise); the last reading, which the caller
    judges when it falls short."""
    seen, moved_at = 0, time.monotonic()
    while True:
        reading = read()
        got = count(reading)
        if got >= expected:
            return reading
        if got > seen:
            seen, moved_at = got, time.monotonic()
        patience = stall_s if seen or first_s is None else first_s
        if time.monotonic() - moved_at > patience or not alive():
            return reading
        time.sleep(every_s)


def wait_planned(queries: Callable[[], Iterable[Any]], failure: Callable[[], BaseException | None],
                 timeout_s: float) -> None:
    """Until one of ``queries()`` has planned its first batch (in real-time mode: has
    launched its long-running tasks, which start just after that plan); ``failure()``, if
    any, raised meanwhile."""
    def planned() -> bool:
        if (failed := failure()) is not None:
            raise failed
        return any(q.lastProgress is not None or q.status.get("isTriggerActive") for q in queries())

    wait_until(planned, "the query to start", timeout_s)
    time.sleep(3)
