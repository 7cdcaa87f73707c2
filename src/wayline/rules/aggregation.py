"""A fixed window rule as Spark SQL, for the JVM's streaming aggregation.

A tumbling or hopping window rule (``GROUP BY <keys>, window(event_time, ...)``) is plain
row expressions (WHERE, the aggregates' arguments) folded per (rule, partition key,
window), then expressions over the finished group (SELECT, HAVING). The rules job runs
all such rules as one Spark streaming aggregation (``wayline.pipelines.windows``) instead
of Python state per partition key; ``compile_aggregation`` renders what that needs.

The aggregation's state schema is fixed, so that a rule change can restart the query on
its checkpoint: every group keeps ``COUNT(*)``, the tenant of its newest event, and for
each of ``SLOTS`` argument slots the count, sum, minimum and maximum of a DOUBLE. A rule's
aggregates share a slot when they aggregate the same argument (``SUM(data.amount)`` and
``AVG(data.amount)``); ``COUNT(x)`` gets a slot holding 1.0 where ``x`` is not NULL.

A rule stays in Python (``None``) when the JVM would not give the same answers, or could
fail where Python would quarantine just the rule: a sliding or session window; more
distinct arguments than slots; an argument of SUM/AVG/MIN/MAX that is not arithmetic over
``data.*`` paths and numbers (``MIN(type)``: strings); anything a filter rule may not use;
division, remainder and casts (ANSI mode raises on them, which would stop the whole job);
or comparing an envelope column with a number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from sqlglot import exp

from wayline.core.errors import RejectedInput
from wayline.rules.expression import DIALECT, ColumnPath
from wayline.rules.window import WINDOW, WindowKind, WindowSpec

# The argument slots of the aggregation's state: part of its schema, which a checkpoint
# fixes, so a constant and not a setting.
SLOTS = 4
KEY = "__key"  # the GROUP BY keys' values: __key0, __key1, ...
WINDOW_END = "__window_end"
COUNT_ALL = "__n"
TENANT = "__tenant"
# The folds kept per slot, as the aggregation's columns: __count0, __sum0, __min0, __max0, ...
FOLDS = ("count", "sum", "min", "max")

_UNSAFE = (exp.Div, exp.Mod, exp.Cast, exp.TryCast, exp.IntDiv)
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Neg, exp.Paren, exp.Literal)
_COMPARISON = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between, exp.In)

Render = Callable[[exp.Expression], str]
Check = Callable[[exp.Expression], None]
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class WindowAggregation:
    """A fixed window rule as Spark SQL over the ``events`` stream and the aggregation's columns.

    ``where`` and ``slots`` read an event; ``select`` and ``having`` a finished group:
    ``__key<i>`` (the keys as strings, as the Python path sees them), ``__window_end`` and
    the fold columns (``__n``, ``__sum0``...)."""

    size_us: int
    slide_us: int
    where: str | None
    slots: tuple[str, ...]
    select: tuple[tuple[str, str], ...]
    having: str | None

    @property
    def windows_per_event(self) -> int:
        return self.size_us // self.slide_us


def fold_column(fold: str, slot: int) -> str:
    return f"__{fold}{slot}"


def compile_aggregation(statement: exp.Select, window: WindowSpec, render: Render,
                        check: Check) -> WindowAggregation | None:
    """The rule for the JVM, or None if it must stay in Python (see the module's docstring).

    ``render`` turns a checked tree into Spark SQL (``data.*`` read out of the VARIANT with
    the filters' typing); ``check`` raises ``RejectedInput`` for what a filter may not use."""
    if window.kind is not WindowKind.FIXED:
        return None
    try:
        return _compile(statement, window, render, check)
    except _StaysInPython:
        return None


class _StaysInPython(Exception):
    pass


def _compile(statement: exp.Select, window: WindowSpec, render: Render, check: Check) -> WindowAggregation:
    calls = {}
    for node in statement.find_all(exp.AggFunc):
        if node.find_ancestor(exp.AggFunc) is None:
            calls.setdefault(node.sql(dialect=DIALECT), node)
    slots: list[str] = []
    formulas: list[exp.Expression] = []
    for aggregate in window.aggregates:
        call = calls[aggregate.sql]
        if aggregate.argument is None:
            formulas.append(exp.column(COUNT_ALL))
            continue
        _check_safe(call.this, check)
        if aggregate.kind == "count":
            # COUNT(x) counts the rows where x is not NULL: a 1.0 in its slot.
            slot = _slot(slots, f"CASE WHEN ({_argument(call, render)}) IS NOT NULL THEN 1.0 END")
            formulas.append(exp.column(fold_column("count", slot)))
            continue
        if not _numeric(call.this):
            raise _StaysInPython
        slot = _slot(slots, f"CAST(({_argument(call, render)}) AS DOUBLE)")
        if aggregate.kind == "avg":
            formulas.append(exp.Anonymous(this="try_divide", expressions=[
                exp.column(fold_column("sum", slot)), exp.column(fold_column("count", slot))]))
        else:
            formulas.append(exp.column(fold_column(aggregate.kind, slot)))
    where = statement.args.get("where")
    if where is not None:
        _check_safe(where.this, check)
    having = statement.args.get("having")
    select = []
    for item in statement.expressions:
        target = item.this if isinstance(item, exp.Alias) else item
        name = item.alias if isinstance(item, exp.Alias) else _path(item)[-1]
        select.append((name, _over_group(target, window, calls, formulas, render, check)))
    return WindowAggregation(
        size_us=window.size // _MICROSECOND, slide_us=window.slide // _MICROSECOND,
        where=render(where.this) if where is not None else None,
        slots=tuple(slots), select=tuple(select),
        having=_over_group(having.this, window, calls, formulas, render, check) if having is not None else None,
    )


def _slot(slots: list[str], sql: str) -> int:
    if sql not in slots:
        if len(slots) == SLOTS:
            raise _StaysInPython
        slots.append(sql)
    return slots.index(sql)


def _argument(call: exp.AggFunc, render: Render) -> str:
    """The call's argument as Spark SQL, typed as inside the call (a ``data.*`` path in SUM
    reads as DOUBLE): the call is rendered whole, then the argument taken out of it."""
    import sqlglot

    return sqlglot.parse_one(render(call), read="spark").this.sql(dialect="spark")


def _check_safe(tree: exp.Expression, check: Check) -> None:
    """Raise ``_StaysInPython`` for what the JVM must not run; aggregate calls are checked
    as arguments, not here."""
    for node in tree.walk(prune=lambda found: isinstance(found, exp.AggFunc)):
        if isinstance(node, exp.AggFunc):
            continue
        try:
            check(node)
        except RejectedInput:
            raise _StaysInPython from None
        if isinstance(node, _UNSAFE):
            raise _StaysInPython
        if isinstance(node, _COMPARISON):
            operands = [*node.iter_expressions(), *(node.expressions if isinstance(node, exp.In) else [])]
            envelope = any(isinstance(o, (exp.Column, exp.Dot)) and _path(o)[0] != "data" for o in operands)
            number = any(isinstance(o, exp.Literal) and not o.is_string for o in operands)
            if envelope and number:
                raise _StaysInPython


def _numeric(tree: exp.Expression) -> bool:
    """Arithmetic over ``data.*`` paths and number literals only."""
    for node in tree.walk():
        if isinstance(node, (exp.Column, exp.Dot)):
            if not isinstance(node.parent, (exp.Column, exp.Dot)) and _path(node)[0] != "data":
                return False
        elif isinstance(node, exp.Literal):
            if node.is_string:
                return False
        elif not isinstance(node, (*_ARITHMETIC, exp.Identifier)):
            return False
    return True


def _over_group(node: exp.Expression, window: WindowSpec, calls: dict[str, exp.AggFunc],
                formulas: list[exp.Expression], render: Render, check: Check) -> str:
    """A SELECT item or HAVING over the aggregation's columns."""
    _check_safe(node, check)
    index = {sql: position for position, sql in enumerate(a.sql for a in window.aggregates)}
    tree = node.copy()

    def swap(found: exp.Expression, replacement: exp.Expression) -> None:
        nonlocal tree
        if found is tree:
            tree = replacement
        else:
            found.replace(replacement)

    for found in list(tree.find_all(exp.AggFunc)):
        if found.find_ancestor(exp.AggFunc) is None:
            swap(found, formulas[index[found.sql(dialect=DIALECT)]].copy())
    size = window.size // _MICROSECOND
    for found in list(tree.find_all(exp.Column, exp.Dot)):
        if isinstance(found.parent, (exp.Column, exp.Dot)) or found.name.startswith("__"):
            continue
        path = _path(found)
        if path == (WINDOW, "end"):
            swap(found, exp.column(WINDOW_END))
        elif path == (WINDOW, "start"):
            swap(found, exp.Anonymous(this="timestamp_micros", expressions=[exp.Sub(
                this=exp.Anonymous(this="unix_micros", expressions=[exp.column(WINDOW_END)]),
                expression=exp.Literal.number(size))]))
        else:
            swap(found, exp.column(f"{KEY}{window.keys.index(path)}"))
    return render(tree)


def _path(node: exp.Expression) -> ColumnPath:
    parts: list[str] = []
    while isinstance(node, exp.Dot):
        parts.insert(0, node.expression.name)
        node = node.this
    if not isinstance(node, exp.Column):
        raise _StaysInPython
    return tuple(part.name for part in node.parts) + tuple(parts)


__all__ = ["COUNT_ALL", "FOLDS", "KEY", "SLOTS", "TENANT", "WINDOW_END", "WindowAggregation", "compile_aggregation",
           "fold_column"]
