"""Sliding windows: ``GROUP BY <keys>, sliding_window(event_time, '<size>') [HAVING ...]``.

A sliding window belongs to an event: for an event at time ``t`` it holds the key's events
(those that pass WHERE) in the trailing interval ``[t - size, t]``, both ends included, so
the rule emits at most one row per event — "5 failed logins by one user within any 10
minutes" fires on the fifth failure, not at a tumbling boundary. This is Flink's
``OVER (PARTITION BY <keys> ORDER BY <time> RANGE BETWEEN <size> PRECEDING AND CURRENT
ROW)`` with HAVING as the filter over it, and what Kafka Streams computes for the window
that ends at each record. Events with the same time are peers: each one's window holds all
of them, so they see the same aggregates (SQL's RANGE, as in Flink).

``window.start`` is ``t - size``, ``window.end`` is ``t``; SELECT and HAVING may also read
the event's own columns (``id``, ``data.*``), as an OVER aggregation reads the current row.

Time. An event is evaluated once the watermark passes it, when no earlier event of its
window can still arrive (``wayline.rules.reorder``), so out-of-order events within the
allowed lateness are counted as if they had come in order; later ones are dropped and
counted. State: the events waiting for the watermark and, for the windows still to come,
each evaluated event's time and aggregate arguments (not the rows) back to
``watermark - size``; a key whose events have all aged out is forgotten.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from typing import Any

from wayline.rules.reorder import ReorderedWindows
from wayline.rules.window import END, START, WindowRow, WindowSpec, time_of


class SlidingWindowState(ReorderedWindows):
    """One sliding-window rule's state for one partition key (``wayline.rules.window.KeyWindows``)."""

    def __init__(self, spec: WindowSpec, state: Mapping[str, Any] | None = None) -> None:
        super().__init__(spec, state)
        state = state or {}
        # The evaluated events still inside some future window: times ascending, and each
        # one's aggregate arguments.
        self._times: list[int] = list(state.get("times", ()))
        self._values: list[list[Any]] = [list(v) for v in state.get("values", ())]

    def close(self, watermark: int, key: Mapping[str, Any]) -> list[WindowRow]:
        """Evaluate, in event-time order, every event the watermark has passed; one row for
        each whose trailing window passes HAVING. (``key`` is unused: the event has the keys.)"""
        spec = self._spec
        released = self._buffer.release(watermark)
        out: list[WindowRow] = []
        first = 0
        while first < len(released):
            time = released[first][0]
            peers = first
            while peers < len(released) and released[peers][0] == time:
                self._times.append(time)
                self._values.append(spec.values(released[peers][2]))
                peers += 1
            partial = spec.empty()
            for values in self._values[bisect_left(self._times, time - self._span):]:
                spec.fold(partial, values)
            for _, _, row in released[first:peers]:
                group = dict(row)
                group[START] = time_of(time - self._span)
                group[END] = time_of(time)
                data = spec.output(group, partial)
                if data is not None:
                    # The event's own id tells it from its peers: arrival order is not
                    # the same when a micro-batch is replayed or split differently.
                    out.append(WindowRow(time - self._span, time, data, row.get("tenantid"), f"{time}/{row.get('id')}"))
            first = peers
        # Every event still to come is at or after the watermark: older ones are in no window.
        expired = bisect_left(self._times, watermark - self._span)
        del self._times[:expired]
        del self._values[:expired]
        return out

    @property
    def size(self) -> int:
        """Events kept: waiting for the watermark, and evaluated but inside a later window."""
        return len(self._buffer) + len(self._times)

    @property
    def wake_at(self) -> int | None:
        """The watermark (epoch µs) at which a waiting event can be evaluated or, with none
        waiting, at which every kept event has aged out (the key is then forgotten)."""
        return self._wake(self._times[-1] + self._span + 1 if self._times else None)

    def snapshot(self) -> dict[str, Any]:
        return {"buffer": self._buffer.snapshot(), "times": list(self._times),
                "values": [list(v) for v in self._values]}


__all__ = ["SlidingWindowState"]
