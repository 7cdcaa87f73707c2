"""Session windows: ``GROUP BY <keys>, session_window(event_time, '<gap>') [HAVING ...]``.

Spark's meaning: a key's events, in event-time order, belong to one session while each
comes less than ``gap`` after the one before; the session is ``[first event, last event +
gap)`` (``window.start``, ``window.end``), and an event at or after its end starts a new
one. A session is emitted once, when the watermark reaches its end — no later event can
extend it then — if HAVING holds; the output event's tenant is the last event's.

Events wait for the watermark and join sessions in event-time order
(``wayline.rules.reorder``); events behind the watermark are dropped and counted. The state
is the waiting events and one open session's partial aggregates, never its events.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wayline.rules.reorder import ReorderedWindows
from wayline.rules.window import END, START, WindowRow, WindowSpec, time_of


@dataclass
class _Session:
    start: int
    last: int
    partial: list[Any]
    tenant: str | None


class SessionWindowState(ReorderedWindows):
    """One session-window rule's state for one partition key (``wayline.rules.window.KeyWindows``)."""

    def __init__(self, spec: WindowSpec, state: Mapping[str, Any] | None = None) -> None:
        super().__init__(spec, state)
        session = (state or {}).get("session")
        self._session = _Session(session[0], session[1], list(session[2]), session[3]) if session else None

    def close(self, watermark: int, key: Mapping[str, Any]) -> list[WindowRow]:
        """Add the events the watermark has passed, in event-time order; emit each session
        that ends at or before the watermark. ``key`` holds the GROUP BY keys' values."""
        spec = self._spec
        out: list[WindowRow] = []
        for time, _, row in self._buffer.release(watermark):
            if self._session is not None and time >= self._session.last + self._span:
                self._emit(key, out)
            if self._session is None:
                self._session = _Session(time, time, spec.empty(), None)
            spec.fold(self._session.partial, spec.values(row))
            self._session.last = time
            self._session.tenant = row.get("tenantid")
        if self._session is not None and watermark >= self._session.last + self._span:
            self._emit(key, out)
        return out

    def _emit(self, key: Mapping[str, Any], out: list[WindowRow]) -> None:
        session = self._session
        assert session is not None
        self._session = None
        end = session.last + self._span
        group = dict(key)
        group[START] = time_of(session.start)
        group[END] = time_of(end)
        data = self._spec.output(group, session.partial)
        if data is not None:
            out.append(WindowRow(session.start, end, data, session.tenant, str(session.start)))

    @property
    def size(self) -> int:
        """Events waiting for the watermark, plus one for an open session."""
        return len(self._buffer) + (self._session is not None)

    @property
    def wake_at(self) -> int | None:
        """The watermark (epoch µs) at which a waiting event joins, or the open session ends."""
        return self._wake(self._session.last + self._span if self._session is not None else None)

    def snapshot(self) -> dict[str, Any]:
        session = self._session
        return {"buffer": self._buffer.snapshot(),
                "session": None if session is None
                else [session.start, session.last, list(session.partial), session.tenant]}


__all__ = ["SessionWindowState"]
