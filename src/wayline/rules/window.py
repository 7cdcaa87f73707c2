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

The SELECT list and HAVING may use the GROUP BY keys, ``window.start``, ``window.end`` and
the aggregates ``COUNT(*)``, ``COUNT(x)``, ``SUM``, ``AVG``, ``MIN``, ``MAX`` of row
expressions, combined with the operators ``wayline.rules.expression`` supports; a sliding
window's may also read the columns of the event it is computed for. WHERE is a row
expression.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from enum import StrEnum
from typing import Any, Protocol

from sqlglot import exp

from wayline.core.errors import GiveUp, RejectedInput
from wayline.rules.expression import DIALECT, ColumnPath, DefineFrame, Row, compile_defines, interval

Evaluator = Callable[[Row], Any]

WINDOW = "window"  # what SELECT and HAVING call the window: window.start, window.end
START, END = "__window_start", "__window_end"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)
_KINDS: dict[type[exp.Expression], str] = {
    exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max",
}


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
        size, slide = self.size // _MICROSECOND, self.slide // _MICROSECOND
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


def compile_window(statement: exp.Select, check_column: Callable[[ColumnPath, str], None]) -> WindowSpec:
    extra = sorted(key for key, value in statement.args.items()
                   if value and key not in ("expressions", "from_", "where", "group", "having"))
    if extra:
        raise RejectedInput(f"{', '.join(k.upper().rstrip('_') for k in extra)} is not supported in a window rule")
    group = statement.args.get("group")
    calls = [node for node in (group.expressions if group else []) if _window_kind(node) is not None]
    if not calls:
        raise RejectedInput(
            "an aggregation rule needs a time bound: GROUP BY window(event_time, '<size>'[, '<slide>']), "
            "sliding_window(event_time, '<size>') or session_window(event_time, '<gap>'), "
            "or its groups would be kept forever"
        )
    if len(calls) > 1:
        raise RejectedInput("GROUP BY: one window(...), sliding_window(...) or session_window(...) per rule")
    kind = _window_kind(calls[0])
    assert kind is not None
    size, slide = _window_arguments(kind, calls[0])
    keys: list[ColumnPath] = []
    for node in group.expressions:
        if node is calls[0]:
            continue
        if not isinstance(node, (exp.Column, exp.Dot)):
            raise RejectedInput(f"GROUP BY {node.sql(dialect=DIALECT)}: group by columns and one {kind}(...)")
        path = _path(node)
        check_column(path, "GROUP BY")
        keys.append(path)

    aggregates: list[Aggregate] = []

    def aggregate_slot(node: exp.Expression) -> exp.Expression:
        kind = _KINDS.get(type(node))
        if kind is None:
            what = node.sql_name() if isinstance(node, exp.Func) else node.sql(dialect=DIALECT)
            raise RejectedInput(f"aggregate {what} is not supported; use COUNT, SUM, AVG, MIN or MAX")
        if node.args.get("distinct") or isinstance(node.this, exp.Distinct):
            raise RejectedInput(f"{node.sql(dialect=DIALECT)}: DISTINCT aggregates are not supported")
        sql = node.sql(dialect=DIALECT)
        for index, known in enumerate(aggregates):
            if known.sql == sql:
                return exp.column(f"__agg{index}")
        argument = None if isinstance(node.this, exp.Star) else _row_expression(node.this, f"{sql}", check_column)
        aggregates.append(Aggregate(kind, sql, argument))
        return exp.column(f"__agg{len(aggregates) - 1}")

    def over_groups(node: exp.Expression, clause: str) -> Evaluator:
        """An expression over a finished group: aggregates, keys and window bounds (and for a
        sliding window, the columns of the event the window ends at)."""
        tree = node.copy()
        for found in list(tree.find_all(exp.AggFunc)):
            if found.find_ancestor(exp.AggFunc) is None:
                replacement = aggregate_slot(found)
                if found is tree:
                    tree = replacement
                else:
                    found.replace(replacement)
        for column in list(tree.find_all(exp.Column)):
            path = _path(column)
            if path[:1] == (WINDOW,) and path[1:] in (("start",), ("end",)):
                bound = exp.column(START if path[1] == "start" else END)
                if column is tree:
                    tree = bound
                else:
                    column.replace(bound)
            elif kind is WindowKind.SLIDING and not path[0].startswith("__agg"):
                check_column(path, clause)
            elif not path[0].startswith("__agg") and path not in keys:
                raise RejectedInput(
                    f"{clause}: {'.'.join(path)} is neither a GROUP BY key, window.start/window.end, "
                    "nor inside an aggregate"
                )
        return _row_expression(tree, clause, None)

    select = []
    for item in statement.expressions:
        if isinstance(item, exp.Star):
            raise RejectedInput("SELECT * is not supported in a window rule; name the keys and aggregates")
        target = item.this if isinstance(item, exp.Alias) else item
        if isinstance(item, exp.Alias):
            name = item.alias
        elif isinstance(item, (exp.Column, exp.Dot)):
            name = _path(item)[-1]
        else:
            raise RejectedInput(f"SELECT {item.sql(dialect=DIALECT)}: an expression needs a name (AS name)")
        if name in (n for n, _ in select):
            raise RejectedInput(f"SELECT: two output columns are named {name}; rename one with AS")
        select.append((name, over_groups(target, f"SELECT {name}")))
    where = statement.args.get("where")
    having = statement.args.get("having")
    # Before the aggregates are taken: HAVING may add its own (HAVING COUNT(*) = 1 alone).
    having_test = over_groups(having.this, "HAVING") if having is not None else None
    return WindowSpec(
        size=size, slide=slide, keys=tuple(keys), aggregates=tuple(aggregates),
        where=_row_expression(where.this, "WHERE", check_column) if where is not None else None,
        having=having_test,
        select=tuple(select),
        kind=kind,
    )


def _window_kind(node: exp.Expression) -> WindowKind | None:
    if not isinstance(node, exp.Anonymous):
        return None
    name = node.this
    text = (name.name if isinstance(name, exp.Identifier) else str(name)).lower()
    return next((kind for kind in WindowKind if kind.value == text), None)


_SIGNATURES = {
    WindowKind.FIXED: "window(event_time, '<size>'[, '<slide>'])",
    WindowKind.SLIDING: "sliding_window(event_time, '<size>')",
    WindowKind.SESSION: "session_window(event_time, '<gap>')",
}


def _window_arguments(kind: WindowKind, call: exp.Anonymous) -> tuple[timedelta, timedelta]:
    arguments = call.expressions
    most = 3 if kind is WindowKind.FIXED else 2
    if arguments and _path_or_none(arguments[0]) != ("event_time",):
        raise RejectedInput(f"GROUP BY {_SIGNATURES[kind]}: the first argument is event_time")
    if not 2 <= len(arguments) <= most:
        hint = ""
        if kind is WindowKind.SLIDING and len(arguments) == 3:
            hint = ("; a sliding window moves with each event and takes no slide "
                    "(window(event_time, '<size>', '<slide>') is a hopping window)")
        wanted = "2 or 3 arguments" if kind is WindowKind.FIXED else "2 arguments"
        raise RejectedInput(f"GROUP BY {_SIGNATURES[kind]}: {wanted}, not {len(arguments)}{hint}")
    durations = [_duration(kind, node) for node in arguments[1:]]
    size = durations[0]
    slide = durations[1] if len(durations) == 2 else size
    if slide > size:
        raise RejectedInput("window(...): the slide may not be longer than the window")
    if (size // _MICROSECOND) % (slide // _MICROSECOND):
        raise RejectedInput("window(...): the window size must be a whole number of slides")
    return size, slide


def _duration(kind: WindowKind, node: exp.Expression) -> timedelta:
    clause = f"{kind}(...)"
    if isinstance(node, exp.Interval):
        value = interval(node, clause)
    elif isinstance(node, exp.Literal) and node.is_string:
        words = node.this.split()
        if len(words) != 2:
            raise RejectedInput(f"{clause}: {node.this!r} is not a duration such as '5 minutes'")
        value = interval(exp.Interval(this=exp.Literal.string(words[0]), unit=exp.var(words[1].upper())), clause)
    else:
        raise RejectedInput(f"{clause}: {node.sql(dialect=DIALECT)} is not a duration such as '5 minutes'")
    if value <= timedelta(0):
        raise RejectedInput(f"{clause}: durations must be positive")
    return value


def _path_or_none(node: exp.Expression) -> ColumnPath | None:
    try:
        return _path(node)
    except RejectedInput:
        return None


def _path(node: exp.Expression) -> ColumnPath:
    parts: list[str] = []
    while isinstance(node, exp.Dot):
        parts.insert(0, node.expression.name)
        node = node.this
    if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star):
        raise RejectedInput(f"{node.sql(dialect=DIALECT)} is not a column")
    return tuple(part.name for part in node.parts) + tuple(parts)


_ROW = "__row"


def _row_expression(node: exp.Expression, clause: str,
                    check_column: Callable[[ColumnPath, str], None] | None) -> Evaluator:
    """One row expression, compiled by the pattern rules' expression compiler (same semantics)."""
    if check_column is not None:
        for column in node.find_all(exp.Column):
            if not isinstance(column.parent, (exp.Column, exp.Dot)):
                outer = column
                while isinstance(outer.parent, exp.Dot):
                    outer = outer.parent
                check_column(_path(outer), clause)
    conditions = compile_defines((_ROW,), [(_ROW, node)])
    test = conditions.tests[0]
    assert test is not None
    initial = conditions.initial

    def evaluate(row: Row) -> Any:
        frame = DefineFrame()
        frame.rows = [row]
        frame.context = initial
        return test(frame)
    return evaluate


def micros_of(value: datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return (value - _EPOCH) // _MICROSECOND


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
                      if watermark is None or s + spec.size // _MICROSECOND > watermark]
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
        size = spec.size // _MICROSECOND
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
        return min(self.open) + self._spec.size // _MICROSECOND if self.open else None

    def snapshot(self) -> dict[str, Any]:
        return {"open": {str(k): v for k, v in self.open.items()}, "late": self.late, "tenant": self.tenant}


__all__ = [
    "END", "START", "Aggregate", "KeyWindows", "WindowKind", "WindowRow", "WindowSpec", "WindowState",
    "compile_window", "micros_of", "time_of",
]
