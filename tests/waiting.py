"""Waiting on a condition instead of sleeping a guessed time: what the tests poll with."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 120, every_s: float = 0.2) -> None:
    """Return as soon as ``condition()`` holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every_s)


__all__ = ["wait_for"]
