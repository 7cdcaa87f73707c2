"""Waiting on a condition instead of sleeping a guessed time: what the tests poll with.

- ``wait_for``: until something that must happen has happened;
- ``holds_for``: a bounded look at something that must not happen (nothing more arrives),
  which fails as soon as it does.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], bool], what: str | Callable[[], str], timeout_s: float = 120,
             every_s: float = 0.2) -> None:
    """Return as soon as ``condition()`` holds; fail naming ``what`` after ``timeout_s``
    (``what`` may be a function, to describe what was seen by then)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")
        time.sleep(every_s)


def holds_for(condition: Callable[[], bool], what: str, seconds: float, every_s: float = 0.2) -> None:
    """Watch ``condition()`` for ``seconds``, failing naming ``what`` as soon as it does not hold."""
    deadline = time.monotonic() + seconds
    while True:
        if not condition():
            raise AssertionError(f"no longer {what}")
        if time.monotonic() >= deadline:
            return
        time.sleep(every_s)


__all__ = ["holds_for", "wait_for"]
