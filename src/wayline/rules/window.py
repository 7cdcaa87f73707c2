"""Windowed aggregation rules: ``GROUP BY <keys>, <window function> [HAVING ...]``.

Three window functions, one per rule (``WindowKind``):

- ``window(event_time, '1 minute')`` is a tumbling window; ``window(event_time, '10 minutes',
  '1 minute')`` a hopping (Spark: sliding) one, each event counted in every window that
  holds it. Windows are aligned to the epoch, half-open ``[start, end)``. A window's row is
  emitted once, when the watermark reaches its end (append mode), if HAVING holds; an event
  older than the watermark for all of its windows is dropped as late and counted. Here
  (``WindowState``) aggregates are folded into partial values per (key, window) as events
  arrive, so the state holds one small list per open window, never the events.
- ``sliding_window(event_time, '10 minutes')``: one row per event, over the key's events
  in the trailing interval ``[t - size, t]`` (``wayline.rules.sliding``).
- ``session_window(event_time, '5 minutes')``: a key's events closer than the gap to the
  one before form a session, emitted once the gap has passed (``wayline.rules.session``).

A compiled rule is a ``WindowSpec`` (``wayline.rules.window_compiler`` checks and compiles
the SQL); ``WindowState`` and its siblings hold one partition key's windows while the rule runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from enum import StrEnum
from typing import Any, Protocol

from wayline.core.errors import GiveUp
from wayline.rules.expression import ColumnPath, Row

Evaluator = Callable[[Row], Any]

WINDOW = "window"  # what SELECT and HAVING call the window: window.start, window.end
START, END = "__window_start", "__window_end"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MICROSECOND = timedelta(microseconds=1)


class WindowKind(StrEnum):
    """The window function in GROUP BY, by its name."""

    FIXED = "window"  # tumbling, or hopping with a slide
    SLIDING = "sliding_window"
    SESSION = "session_window"


@dataclass(frozen=True)
class Aggregate:
    """One aggregate call; its partial value is plain data (a number, None, or [sum, count])."""

    kind: str
    sql: str
    argument: Evaluator | None = field(compare=False)  # None: COUNT(*)

    def empty(self) -> Any:
        return [0, 0] if self.kind == "avg" else (0 if self.kind == "count" else None)

    def fold(self, partial: Any, value: Any) -> Any:
        """The partial value with one more event's ``value`` (its argument) in it."""
        kind = self.kind
        if kind == "count":
            return partial + (1 if self.argument is None or value is not None else 0)
        if value is None:
            return partial
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            if kind in ("sum", "avg"):
                raise GiveUp(f"{self.sql}: {value!r} is not a number")
        try:
            if kind == "sum":
                return value if partial is None else partial + value
            if kind == "avg":
                return [partial[0] + value, partial[1] + 1]
            if kind == "min":
                return value if partial is None or value < partial else partial
            return value if partial is None or value > partial else partial
        except TypeError as exc:
            raise GiveUp(f"{self.sql}: cannot compare {value!r} with {partial!r}") from exc

    def final(self, partial: Any) -> Any:
        if self.kind == "avg":
            return partial[0] / partial[1] if partial[1] else None
        return partial


@dataclass(frozen=True)
class WindowSpec:
    """A compiled window rule. ``size`` is the window's length (a session's gap); ``slide``
    equals it except for a hopping window."""

    size: timedelta
    slide: timedelta
    keys: tuple[ColumnPath, ...]
    aggregates: tuple[Aggregate, ...]
    where: Evaluator | None = field(compare=False)
    having: Evaluator | None = field(compare=False)
    select: tuple[tuple[str, Evaluator], ...] = field(compare=False)
    kind: WindowKind = WindowKind.FIXED

    def windows_of(self, micros: int) -> list[int]:
        """The starts (epoch microseconds) of every window that holds an event at ``micros``."""
        size, slide = self.size // MICROSECOND, self.slide // MICROSECOND
        last = micros - micros % slide
        return list(range(last, micros - size, -slide))[::-1]

    def values(self, row: Row) -> list[Any]:
        """What one event gives each aggregate (its argument; None for COUNT(*))."""
        return [None if a.argument is None else a.argument(row) for a in self.aggregates]

    def empty(self) -> list[Any]:
        return [a.empty() for a in self.aggregates]

    def fold(self, partial: list[Any], values: Sequence[Any]) -> None:
        """Fold one event's ``values`` into ``partial``, in place."""
        for index, aggregate in enumerate(self.aggregates):
            partial[index] = aggregate.fold(partial[index], values[index])

    def output(self, group: dict[str, Any], partial: Sequence[Any]) -> dict[str, Any] | None:
        """The selected columns of a finished window, or None if HAVING rejects it. ``group``
        holds what the expressions read besides the aggregates (keys, window bounds)."""
        for index, aggregate in enumerate(self.aggregates):
            group[f"__agg{index}"] = aggregate.final(partial[index])
        if self.having is not None and self.having(group) is not True:
            return None
        return {name: evaluate(group) for name, evaluate in self.select}


@dataclass(frozen=True, slots=True)
class WindowRow:
    """One emitted window: bounds in epoch microseconds, the selected columns, the tenant of
    the output event, and what tells it from the rule's other rows for the same key (the
    output event's id is derived from it)."""

    start: int
    end: int
    data: dict[str, Any]
    tenantid: str | None
    ident: str


class KeyWindows(Protocol):
    """One window rule's state for one partition key, as the rules engine drives it."""

    @property
    def late(self) -> int:
        """Events dropped so far because they came behind the watermark."""

    def add(self, rows: Iterable[Row], watermark: int | None) -> None: ...

    def close(self, watermark: int, key: Mapping[str, Any]) -> list[WindowRow]: ...

    @property
    def size(self) -> int: ...

    @property
    def wake_at(self) -> int | None: ...

    def snapshot(self) -> dict[str, Any]: ...



def micros_of(value: datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return (value - _EPOCH) // MICROSECOND


def time_of(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


class WindowState:
    """The open windows of one window rule for one partition key: window start → partials.

    Plain data (``snapshot()`` / ``WindowState(spec, state)``) so the stateful operator can
    store it. ``late`` counts events dropped because every window they fall in had closed;
    ``tenant`` is the tenant of the last event added (the output event's ``tenantid``).
    """

    def __init__(self, spec: WindowSpec, state: Mapping[str, Any] | None = None) -> None:
        self._spec = spec
        state = state or {}
        self.open: dict[int, list[Any]] = {int(k): list(v) for k, v in state.get("open", {}).items()}
        self.late: int = state.get("late", 0)
        self.tenant: str | None = state.get("tenant")

    def add(self, rows: Iterable[Row], watermark: int | None) -> None:
        """Fold rows that passed the rule's WHERE (the caller filters, so that a key none of
        whose rows pass is never built)."""
        spec = self._spec
        for row in rows:
            self.tenant = row.get("tenantid")
            time = row.get("event_time")
            if not isinstance(time, datetime):
                continue
            micros = micros_of(time)
            starts = [s for s in spec.windows_of(micros)
                      if watermark is None or s + spec.size // MICROSECOND > watermark]
            if not starts:
                self.late += 1
                continue
            values = spec.values(row)
            for start in starts:
                partial = self.open.get(start)
                if partial is None:
                    partial = self.open[start] = spec.empty()
                spec.fold(partial, values)

    def close(self, watermark: int, key: Mapping[str, Any]) -> list[WindowRow]:
        """Emit (and forget) every window that ends at or before the watermark, in time order;
        ``key`` holds the GROUP BY keys' values, nested as in a row."""
        spec = self._spec
        size = spec.size // MICROSECOND
        out = []
        for start in sorted(s for s in self.open if s + size <= watermark):
            partial = self.open.pop(start)
            group = dict(key)
            group[START] = time_of(start)
            group[END] = time_of(start + size)
            data = spec.output(group, partial)
            if data is not None:
                out.append(WindowRow(start, start + size, data, self.tenant, str(start)))
        return out

    @property
    def size(self) -> int:
        return len(self.open)

    @property
    def wake_at(self) -> int | None:
        """The watermark (epoch µs) at which the first open window closes."""
        return min(self.open) + self._spec.size // MICROSECOND if self.open else None

    def snapshot(self) -> dict[str, Any]:
        return {"open": {str(k): v for k, v in self.open.items()}, "late": self.late, "tenant": self.tenant}


__all__ = [
    "END", "MICROSECOND", "START", "WINDOW", "Aggregate", "Evaluator", "KeyWindows", "WindowKind", "WindowRow",
    "WindowSpec", "WindowState", "micros_of", "time_of",
]
