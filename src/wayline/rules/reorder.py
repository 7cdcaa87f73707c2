"""Rows that wait for the watermark, then leave in event-time order: ``ReorderBuffer``.

Events reach a micro-batch in any order. A window that needs them in event-time order
(sliding and session windows) holds each event here until the watermark passes it — until
no earlier event can still arrive — and takes it out then, in order of ``event_time``
(ties in arrival order). The pattern matcher does the same with ``reorder=True``.

An event older than the watermark, or than what the buffer has already let out, is late:
it is dropped and counted, as Flink drops late rows. An event at exactly the watermark is
on time, as in the pattern matcher (Flink, and Spark's own stateful operators, count it
late). An event without a timestamp is skipped.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from wayline.rules.expression import Row
from wayline.rules.window import WindowSpec, micros_of

# (event time in epoch µs, arrival number, row): the arrival number orders ties and keeps
# rows from ever being compared.
Waiting = tuple[int, int, Row]


class ReorderBuffer:
    """``add`` rows as they come, ``release`` them as the watermark passes them.

    Plain data (``snapshot()`` / ``ReorderBuffer(state)``) so a stateful operator can store it.
    """

    def __init__(self, state: Mapping[str, Any] | None = None) -> None:
        state = state or {}
        # A heap stored as a list stays a heap.
        self._waiting: list[Waiting] = [tuple(entry) for entry in state.get("waiting", ())]  # type: ignore[misc]
        self._arrivals: int = state.get("arrivals", 0)
        self._released: int | None = state.get("released")
        self.late: int = state.get("late", 0)

    def add(self, rows: Iterable[Row], watermark: int | None) -> None:
        """Hold ``rows``; those behind ``watermark`` (epoch µs) or behind what was released are late."""
        bound = max((m for m in (watermark, self._released) if m is not None), default=None)
        for row in rows:
            time = row.get("event_time")
            if not isinstance(time, datetime):
                continue
            micros = micros_of(time)
            if bound is not None and micros < bound:
                self.late += 1
                continue
            heapq.heappush(self._waiting, (micros, self._arrivals, row))
            self._arrivals += 1

    def release(self, watermark: int) -> list[Waiting]:
        """The rows the watermark has passed (event time below it), in event-time order."""
        if self._released is None or watermark > self._released:
            self._released = watermark
        out = []
        while self._waiting and self._waiting[0][0] < watermark:
            out.append(heapq.heappop(self._waiting))
        return out

    @property
    def first(self) -> int | None:
        """The earliest waiting event time (epoch µs); None when nothing waits."""
        return self._waiting[0][0] if self._waiting else None

    def __len__(self) -> int:
        return len(self._waiting)

    def snapshot(self) -> dict[str, Any]:
        return {"waiting": [list(entry) for entry in self._waiting], "arrivals": self._arrivals,
                "released": self._released, "late": self.late}


class ReorderedWindows:
    """What the window states fed through a ``ReorderBuffer`` share (sliding and session
    windows): ``add`` and ``late``, and the wake time of the first waiting event. Their
    snapshots keep the buffer's under ``"buffer"``."""

    def __init__(self, spec: WindowSpec, state: Mapping[str, Any] | None) -> None:
        self._spec = spec
        self._span = spec.size // timedelta(microseconds=1)  # the window's size or the session gap, in µs
        self._buffer = ReorderBuffer((state or {}).get("buffer"))

    @property
    def late(self) -> int:
        return self._buffer.late

    def add(self, rows: Iterable[Row], watermark: int | None) -> None:
        """Hold rows that passed the rule's WHERE until the watermark passes them."""
        self._buffer.add(rows, watermark)

    def _wake(self, other: int | None) -> int | None:
        """The earlier of ``other`` and the watermark that lets the first waiting event out."""
        first = self._buffer.first
        candidates = [time for time in (None if first is None else first + 1, other) if time is not None]
        return min(candidates, default=None)


__all__ = ["ReorderBuffer", "ReorderedWindows", "Waiting"]
