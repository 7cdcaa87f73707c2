"""What a Python worker keeps between micro-batches for the stateful operators' groups.

The rules and recon processors each keep every group's live object (an evaluator, a
bucket) in their Python worker, as decoding it from the stored state on every micro-batch
was most of their time. The stored state carries a random token, rewritten with it: a
worker whose cached object has the stored token uses it; any other worker, or the same one
after a replayed micro-batch (whose state the store rolled back), resumes from the stored
state instead.
"""

from __future__ import annotations

import gc
import random
from typing import Generic, TypeVar

Live = TypeVar("Live")

# A Python worker keeps every group's evaluator it ran (matchers, windows, the rows they
# hold): a large heap that lives long. At the interpreter's default thresholds (700, 10, 10)
# the allocations of one group's evaluation (decoding its state, the batch's rows) set off
# collections that traverse that whole heap, so a group paid for every key the worker held:
# most of the time a cache miss cost (bench/rules_state.py, docs/benchmarks.md). Objects are
# freed by reference counting as before; reference cycles are collected, only less often.
GC_THRESHOLDS = (100_000, 50, 100)


def tune_collector() -> None:
    """Set this worker's collector to ``GC_THRESHOLDS`` (once: a worker runs many tasks)."""
    if gc.get_threshold() != GC_THRESHOLDS:
        gc.set_threshold(*GC_THRESHOLDS)


class WorkerCache(Generic[Live]):
    """Each group's live object, under the token of the state it was last written as.

    One per processor class, shared by the tasks its Python worker runs one after another.
    """

    def __init__(self) -> None:
        self._live: dict[tuple[str, int], tuple[int, Live]] = {}

    def cached(self, group: tuple[str, int], token: int | None) -> Live | None:
        """The group's object if it was kept under ``token``, the stored state's token."""
        kept = self._live.get(group)
        return kept[1] if token is not None and kept is not None and kept[0] == token else None

    def keep(self, group: tuple[str, int], live: Live) -> int:
        """Keep ``live`` for the group; returns the new token to store with its state."""
        token = random.getrandbits(63)
        self._live[group] = (token, live)
        return token

    def drop(self, group: tuple[str, int]) -> None:
        self._live.pop(group, None)


__all__ = ["GC_THRESHOLDS", "WorkerCache", "tune_collector"]
