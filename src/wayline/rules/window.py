"""Windowed aggregation rules: ``GROUP BY <keys>, window(event_time, size[, slide]) HAVING ...``.

``window(event_time, '1 minute')`` is a tumbling window; ``window(event_time, '10 minutes',
'1 minute')`` a hopping (Spark: sliding) one, each event counted in every window that
holds it. Windows are aligned to the epoch, half-open ``[start, end)``. A window's row is
emitted once, when the watermark reaches its end (append mode), if HAVING holds; an event
older than the watermark for all of its windows is dropped as late and counted.

The SELECT list and HAVING may use the GROUP BY keys, ``window.start``, ``window.end`` and
the aggregates ``COUNT(*)``, ``COUNT(x)``, ``SUM``, ``AVG``, ``MIN``, ``MAX`` of row
expressions, combined with the operators ``wayline.rules.expression`` supports; WHERE is a
row expression. Aggregates are folded into partial values per (key, window) as events
arrive, so the state holds one small list per open window, never the events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlglot import exp

from wayline.core.errors import GiveUp, RejectedInput
from wayline.rules.expression import DIALECT, ColumnPath, DefineFrame, Row, compile_defines, interval

Evaluator = Callable[[Row], Any]

WINDOW = "window"
START, END = "__window_start", "__window_end"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)
_KINDS: dict[type[exp.Expression], str] = {
    exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max",
}


@dataclass(frozen=True)
class Aggregate:
    kind: str
    sql: str
    argument: Evaluator | None = field(compare=False)  # None: COUNT(*)


@dataclass(frozen=True)
class WindowSpec:
    size: timedelta
    slide: timedelta
    keys: tuple[ColumnPath, ...]
    aggregates: tuple[Aggregate, ...]
    where: Evaluator | None = field(compare=False)
    having: Evaluator | None = field(compare=False)
    select: tuple[tuple[str, Evaluator], ...] = field(compare=False)

    def windows_of(self, micros: int) -> list[int]:
        """The starts (epoch microseconds) of every window that holds an event at ``micros``."""
        size, slide = self.size // _MICROSECOND, self.slide // _MICROSECOND
        last = micros - micros % slide
        return list(range(last, micros - size, -slide))[::-1]


def compile_window(statement: exp.Select, check_column: Callable[[ColumnPath, str], None]) -> WindowSpec:
    extra = sorted(key for key, value in statement.args.items()
                   if value and key not in ("expressions", "from_", "where", "group", "having"))
    if extra:
        raise RejectedInput(f"{', '.join(k.upper().rstrip('_') for k in extra)} is not supported in a window rule")
    group = statement.args.get("group")
    calls = [node for node in (group.expressions if group else []) if _is_window_call(node)]
    if not calls:
        raise RejectedInput(
            "an aggregation rule needs a time bound: GROUP BY window(event_time, '<size>'[, '<slide>']), "
            "or its groups would be kept forever"
        )
    if len(calls) > 1:
        raise RejectedInput("GROUP BY: one window(...) per rule")
    size, slide = _window_arguments(calls[0])
    keys: list[ColumnPath] = []
    for node in group.expressions:
        if node is calls[0]:
            continue
        if not isinstance(node, (exp.Column, exp.Dot)):
            raise RejectedInput(f"GROUP BY {node.sql(dialect=DIALECT)}: group by columns and one window(...)")
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
        """An expression over a finished group: aggregates, keys and window bounds."""
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
    return WindowSpec(
        size=size, slide=slide, keys=tuple(keys), aggregates=tuple(aggregates),
        where=_row_expression(where.this, "WHERE", check_column) if where is not None else None,
        having=over_groups(having.this, "HAVING") if having is not None else None,
        select=tuple(select),
    )


def _is_window_call(node: exp.Expression) -> bool:
    if not isinstance(node, exp.Anonymous):
        return False
    name = node.this
    return (name.name if isinstance(name, exp.Identifier) else str(name)).lower() == WINDOW


def _window_arguments(call: exp.Anonymous) -> tuple[timedelta, timedelta]:
    arguments = call.expressions
    if not 2 <= len(arguments) <= 3 or _path_or_none(arguments[0]) != ("event_time",):
        raise RejectedInput("GROUP BY window(event_time, '<size>'[, '<slide>']): the first argument is event_time")
    durations = [_duration(node) for node in arguments[1:]]
    size = durations[0]
    slide = durations[1] if len(durations) == 2 else size
    if slide > size:
        raise RejectedInput("window(...): the slide may not be longer than the window")
    if (size // _MICROSECOND) % (slide // _MICROSECOND):
        raise RejectedInput("window(...): the window size must be a whole number of slides")
    return size, slide


def _duration(node: exp.Expression) -> timedelta:
    if isinstance(node, exp.Interval):
        value = interval(node, "window(...)")
    elif isinstance(node, exp.Literal) and node.is_string:
        words = node.this.split()
        if len(words) != 2:
            raise RejectedInput(f"window(...): {node.this!r} is not a duration such as '5 minutes'")
        value = interval(exp.Interval(this=exp.Literal.string(words[0]), unit=exp.var(words[1].upper())),
                         "window(...)")
    else:
        raise RejectedInput(f"window(...): {node.sql(dialect=DIALECT)} is not a duration such as '5 minutes'")
    if value <= timedelta(0):
        raise RejectedInput("window(...): durations must be positive")
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
            values = [None if a.argument is None else a.argument(row) for a in spec.aggregates]
            for start in starts:
                partial = self.open.get(start)
                if partial is None:
                    partial = self.open[start] = [_empty(a.kind) for a in spec.aggregates]
                for index, aggregate in enumerate(spec.aggregates):
                    partial[index] = _fold(aggregate, partial[index], values[index])

    def close(self, watermark: int, key: Mapping[str, Any]) -> list[tuple[int, int, dict[str, Any]]]:
        """Emit (and forget) every window that ends at or before the watermark, in time order,
        as (start, end, selected columns); starts and ends in epoch microseconds."""
        spec = self._spec
        size = spec.size // _MICROSECOND
        out = []
        for start in sorted(s for s in self.open if s + size <= watermark):
            partial = self.open.pop(start)
            group = dict(key)
            group[START] = time_of(start)
            group[END] = time_of(start + size)
            for index, aggregate in enumerate(spec.aggregates):
                group[f"__agg{index}"] = _final(aggregate.kind, partial[index])
            if spec.having is not None and spec.having(group) is not True:
                continue
            out.append((start, start + size, {name: evaluate(group) for name, evaluate in spec.select}))
        return out

    @property
    def size(self) -> int:
        return len(self.open)

    def snapshot(self) -> dict[str, Any]:
        return {"open": {str(k): v for k, v in self.open.items()}, "late": self.late, "tenant": self.tenant}


def _empty(kind: str) -> Any:
    return [0, 0] if kind == "avg" else (0 if kind == "count" else None)


def _fold(aggregate: Aggregate, partial: Any, value: Any) -> Any:
    kind = aggregate.kind
    if kind == "count":
        return partial + (1 if aggregate.argument is None or value is not None else 0)
    if value is None:
        return partial
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        if kind in ("sum", "avg"):
            raise GiveUp(f"{aggregate.sql}: {value!r} is not a number")
    try:
        if kind == "sum":
            return value if partial is None else partial + value
        if kind == "avg":
            return [partial[0] + value, partial[1] + 1]
        if kind == "min":
            return value if partial is None or value < partial else partial
        return value if partial is None or value > partial else partial
    except TypeError as exc:
        raise GiveUp(f"{aggregate.sql}: cannot compare {value!r} with {partial!r}") from exc


def _final(kind: str, partial: Any) -> Any:
    if kind == "avg":
        return partial[0] / partial[1] if partial[1] else None
    return partial


__all__ = ["Aggregate", "WindowSpec", "WindowState", "compile_window", "micros_of", "time_of"]
