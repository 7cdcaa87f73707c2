"""Window rules compiled: ``compile_window(statement) -> WindowSpec``.

The SELECT list and HAVING may use the GROUP BY keys, ``window.start``, ``window.end`` and
the aggregates ``COUNT(*)``, ``COUNT(x)``, ``SUM``, ``AVG``, ``MIN``, ``MAX`` of row
expressions, combined with the operators ``wayline.rules.expression`` supports; a sliding
window's may also read the columns of the event it is computed for. WHERE is a row
expression. What the window functions mean, and how a compiled rule runs: ``wayline.rules.window``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlglot import exp

from wayline.core.errors import RejectedInput
from wayline.rules.expression import DIALECT, ColumnPath, DefineFrame, Row, compile_defines, interval
from wayline.rules.window import END, MICROSECOND, START, WINDOW, Aggregate, Evaluator, WindowKind, WindowSpec

_KINDS: dict[type[exp.Expression], str] = {
    exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max",
}


def compile_window(statement: exp.Select, check_column: Callable[[ColumnPath, str], None]) -> WindowSpec:
    extra = sorted(key for key, value in statement.args.items()
                   if value and key not in ("expressions", "from_", "where", "group", "having"))
    if extra:
        raise RejectedInput(f"{', '.join(k.upper().rstrip('_') for k in extra)} is not supported in a window rule")
    group = statement.args.get("group")
    call = _window_call(group.expressions if group else [])
    kind = _window_kind(call)
    assert kind is not None
    size, slide = _window_arguments(kind, call)
    groups = _OverGroups(kind, _group_keys(group.expressions, call, kind, check_column), check_column)
    select = _select(statement.expressions, groups)
    where = statement.args.get("where")
    having = statement.args.get("having")
    # Before the aggregates are taken: HAVING may add its own (HAVING COUNT(*) = 1 alone).
    having_test = groups.compile(having.this, "HAVING") if having is not None else None
    return WindowSpec(
        size=size, slide=slide, keys=tuple(groups.keys), aggregates=tuple(groups.aggregates),
        where=_row_expression(where.this, "WHERE", check_column) if where is not None else None,
        having=having_test,
        select=tuple(select),
        kind=kind,
    )


def _window_call(grouped: list[exp.Expression]) -> exp.Anonymous:
    """The one window function GROUP BY must name."""
    calls = [node for node in grouped if _window_kind(node) is not None]
    if not calls:
        raise RejectedInput(
            "an aggregation rule needs a time bound: GROUP BY window(event_time, '<size>'[, '<slide>']), "
            "sliding_window(event_time, '<size>') or session_window(event_time, '<gap>'), "
            "or its groups would be kept forever"
        )
    if len(calls) > 1:
        raise RejectedInput("GROUP BY: one window(...), sliding_window(...) or session_window(...) per rule")
    return calls[0]


def _group_keys(grouped: list[exp.Expression], call: exp.Anonymous, kind: WindowKind,
                check_column: Callable[[ColumnPath, str], None]) -> list[ColumnPath]:
    """The columns GROUP BY names beside the window function."""
    keys: list[ColumnPath] = []
    for node in grouped:
        if node is call:
            continue
        if not isinstance(node, (exp.Column, exp.Dot)):
            raise RejectedInput(f"GROUP BY {node.sql(dialect=DIALECT)}: group by columns and one {kind}(...)")
        path = _path(node)
        check_column(path, "GROUP BY")
        keys.append(path)
    return keys


def _select(items: list[exp.Expression], groups: _OverGroups) -> list[tuple[str, Evaluator]]:
    """The SELECT list as (output name, evaluator over a finished group)."""
    select: list[tuple[str, Evaluator]] = []
    for item in items:
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
        select.append((name, groups.compile(target, f"SELECT {name}")))
    return select


class _OverGroups:
    """Compiles expressions over a finished group: aggregates, keys and window bounds (and for
    a sliding window, the columns of the event the window ends at). Collects the aggregates
    they take, each once."""

    def __init__(self, kind: WindowKind, keys: list[ColumnPath],
                 check_column: Callable[[ColumnPath, str], None]) -> None:
        self.kind = kind
        self.keys = keys
        self.check_column = check_column
        self.aggregates: list[Aggregate] = []

    def compile(self, node: exp.Expression, clause: str) -> Evaluator:
        tree = node.copy()
        for found in list(tree.find_all(exp.AggFunc)):
            if found.find_ancestor(exp.AggFunc) is None:
                replacement = self._slot(found)
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
            elif self.kind is WindowKind.SLIDING and not path[0].startswith("__agg"):
                self.check_column(path, clause)
            elif not path[0].startswith("__agg") and path not in self.keys:
                raise RejectedInput(
                    f"{clause}: {'.'.join(path)} is neither a GROUP BY key, window.start/window.end, "
                    "nor inside an aggregate"
                )
        return _row_expression(tree, clause, None)

    def _slot(self, node: exp.Expression) -> exp.Expression:
        """The column an aggregate's value is read from, the aggregate added if it is new."""
        kind = _KINDS.get(type(node))
        if kind is None:
            what = node.sql_name() if isinstance(node, exp.Func) else node.sql(dialect=DIALECT)
            raise RejectedInput(f"aggregate {what} is not supported; use COUNT, SUM, AVG, MIN or MAX")
        if node.args.get("distinct") or isinstance(node.this, exp.Distinct):
            raise RejectedInput(f"{node.sql(dialect=DIALECT)}: DISTINCT aggregates are not supported")
        sql = node.sql(dialect=DIALECT)
        for index, known in enumerate(self.aggregates):
            if known.sql == sql:
                return exp.column(f"__agg{index}")
        argument = None if isinstance(node.this, exp.Star) else _row_expression(node.this, f"{sql}", self.check_column)
        self.aggregates.append(Aggregate(kind, sql, argument))
        return exp.column(f"__agg{len(self.aggregates) - 1}")


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
    if (size // MICROSECOND) % (slide // MICROSECOND):
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


__all__ = ["compile_window"]
