"""DEFINE conditions and MEASURES, compiled from sqlglot trees into Python callables.

Nothing is evaluated from text: each supported node becomes a closure, and anything else is
rejected naming the construct and its line and column. Supported: literals (numbers,
strings, TRUE/FALSE, NULL, INTERVAL), columns (``price``, ``A.price``, ``data.price``,
``A.data.price``), comparisons, ``+ - * / %``, AND/OR/NOT with SQL's three-valued logic,
IS [NOT] NULL, BETWEEN, IN (list), CASE; ``ABS``, ``LOWER``, ``UPPER``, ``COALESCE``,
``CAST``/``TRY_CAST`` to DOUBLE, BIGINT (and the other integer types), STRING, BOOLEAN or
TIMESTAMP, ``TIMESTAMPDIFF(unit, t1, t2)`` (whole units from t1 to t2, as in Flink, for
MILLISECOND, SECOND, MINUTE, HOUR, DAY, WEEK); row-pattern navigation ``PREV(x[, n])``,
``FIRST(v.x[, n])``, ``LAST(v.x[, n])``; aggregates ``COUNT SUM AVG MIN MAX`` over one
variable (or over all rows of the match when unqualified); and in MEASURES also
``MATCH_NUMBER()``, ``CLASSIFIER()`` and ``MATCH_ROWTIME()`` (the ORDER BY time of the
match's last row). ``NEXT`` is refused: it reads rows a stream has not seen yet. A
function is named in messages as written (``TIMESTAMPDIFF``, not the parser's
``DATEDIFF``) when the caller has marked the tree with ``mark_written_names``.

Name resolution: a qualifier that is a pattern variable (case-insensitive, as the pattern's
variables) makes the column that variable's; any other dotted name is a path into nested
mappings (``data.price`` reads ``row["data"]["price"]``). A missing key reads as NULL.

DEFINE uses *running* semantics: while a row is tested as ``V``, it counts as mapped to
``V``, so ``V.x`` and ``LAST(V.x)`` are the row itself and ``COUNT(V.*)`` includes it;
another variable's ``W.x`` is ``LAST(W.x)`` among the rows mapped so far. MEASURES use
*final* semantics over the finished match (with ONE ROW PER MATCH, RUNNING and FINAL agree).
An unqualified column in MEASURES reads the match's last row.

What a DEFINE reads from the match so far is kept per candidate match as a small tuple, the
*context*: the last/first k rows mapped to a variable (as row numbers) and running
aggregates. Which entries exist is decided here, at compile time, so a condition that reads
only the current row costs no context at all.

Arithmetic follows Spark: ``/`` is true division; division or modulo by zero, or an
operator applied to values of the wrong types, raises ``GiveUp`` (the rule cannot run on
this data and should be quarantined).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from wayline.core.errors import GiveUp, RejectedInput

Row = Mapping[str, Any]
ColumnPath = tuple[str, ...]
Evaluator = Callable[[Any], Any]
Context = tuple[Any, ...]
ContextUpdate = Callable[[Context, int, Row], Context]

# The universal row pattern variable: every row of the match.
ANY = -1

# The sqlglot dialect rules are read in (its MATCH_RECOGNIZE support is the most complete).
DIALECT = "snowflake"

_UNITS = {
    "MILLISECOND": timedelta(milliseconds=1),
    "SECOND": timedelta(seconds=1),
    "MINUTE": timedelta(minutes=1),
    "HOUR": timedelta(hours=1),
    "DAY": timedelta(days=1),
}

# How deep a rule's expressions may nest. Parsing, rendering and evaluating a tree recurse
# once per level (AND and OR chains excepted: they are flattened), so a deeper tree could
# exhaust Python's recursion limit in the API or, worse, in the rules job.
MAX_NESTING = 48
TOO_DEEP = (f"the rule nests too deeply: at most {MAX_NESTING} levels of parentheses, NOT, "
            "arithmetic and function calls; write long lists of alternatives as IN (...)")
# The longest duration a rule may state: what a timedelta holds, which is ample.
_LONGEST = timedelta.max

_COMPARISONS: dict[type[exp.Expression], Callable[[Any, Any], Any]] = {
    exp.EQ: operator.eq,
    exp.NEQ: operator.ne,
    exp.GT: operator.gt,
    exp.GTE: operator.ge,
    exp.LT: operator.lt,
    exp.LTE: operator.le,
}

_ARITHMETIC: dict[type[exp.Expression], Callable[[Any, Any], Any]] = {
    exp.Add: operator.add,
    exp.Sub: operator.sub,
    exp.Mul: operator.mul,
}

_AGGREGATES: dict[type[exp.Expression], str] = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.Min: "min",
    exp.Max: "max",
}


class DefineFrame:
    """What a DEFINE condition reads: the row under test and the candidate match so far.

    ``rows[index]`` is the row under test; ``base`` is the row number of ``rows[0]``, so a
    row number ``n`` kept in the context is ``rows[n - base]``.
    """

    __slots__ = ("base", "context", "index", "rows")

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.base = 0
        self.index = 0
        self.context: Context = ()


class MatchView:
    """What a MEASURE reads: a finished match; ``rows_of[v]`` lists variable v's row numbers."""

    __slots__ = ("base", "end", "labels", "number", "rows", "rows_of", "rowtime", "start", "variables")

    def __init__(
        self, rows: list[Row], base: int, start: int, labels: Sequence[int], number: int,
        variables: tuple[str, ...], rowtime: Any = None,
    ) -> None:
        self.rowtime = rowtime  # the ORDER BY time of the match's last row
        self.rows = rows
        self.base = base
        self.start = start
        self.end = start + len(labels) - 1
        self.labels = labels
        self.number = number
        self.variables = variables
        self.rows_of: list[list[int]] = [[] for _ in variables]
        for offset, variable in enumerate(labels):
            self.rows_of[variable].append(start + offset)


@dataclass(frozen=True, slots=True)
class Define:
    variable: str
    sql: str
    reads_only_current_row: bool


@dataclass(frozen=True, slots=True)
class Measure:
    name: str
    sql: str
    evaluate: Evaluator = field(compare=False, repr=False)
    lookback: int = 0
    columns: frozenset[ColumnPath] = frozenset()
    numbered: bool = False  # reads MATCH_NUMBER()


@dataclass(frozen=True, slots=True)
class Conditions:
    """The compiled DEFINE clause, indexed like ``variables``.

    ``tests[v]`` is None for a variable without a definition (always true). ``updates[v]``
    folds a row mapped to v into a context (None when no condition keeps anything about v).
    ``cacheable[v]`` says the test's answer depends on the rows only, not on the match so
    far, so one answer per row serves every candidate match. ``lookback`` is how many rows
    back PREV may read; ``row_lookbacks[v]`` how far back from v's own row v's PREVs read
    (None where one reads back from another variable's row); ``columns`` are the column
    paths the conditions read.
    """

    variables: tuple[str, ...]
    defines: tuple[Define, ...]
    tests: tuple[Evaluator | None, ...] = field(repr=False)
    updates: tuple[ContextUpdate | None, ...] = field(repr=False)
    cacheable: tuple[bool, ...]
    initial: Context
    tuple_slots: frozenset[int]
    lookback: int
    row_lookbacks: tuple[int | None, ...]
    columns: frozenset[ColumnPath]

    def thaw(self, context: Sequence[Any]) -> Context:
        """A context back from its serialised form (lists for tuples)."""
        return tuple(
            tuple(value) if index in self.tuple_slots else value
            for index, value in enumerate(context)
        )


def compile_defines(
    variables: Sequence[str], definitions: Sequence[tuple[str, exp.Expression]],
) -> Conditions:
    """Compile ``DEFINE v AS condition`` pairs for a pattern over ``variables``."""
    index = {name: position for position, name in enumerate(variables)}
    slots = _SlotTable()
    tests: list[Evaluator | None] = [None] * len(variables)
    defines = [Define(name, "TRUE", True) for name in variables]
    cacheable = [True] * len(variables)
    lookback = 0
    row_lookbacks: list[int | None] = [0] * len(variables)
    columns: set[ColumnPath] = set()
    for name, node in definitions:
        if name not in index:
            raise RejectedInput(f"DEFINE {name}: {name} does not appear in the PATTERN")
        if tests[index[name]] is not None:
            raise RejectedInput(f"DEFINE {name}: {name} is defined twice")
        check_nesting(node, f"DEFINE {name}")
        compiler = _Compiler(f"DEFINE {name}", index, "define", index[name], slots, columns)
        tests[index[name]] = compiler.compile(node)
        defines[index[name]] = Define(name, node.sql(dialect=DIALECT),
                                      not compiler.reads_match and compiler.lookback == 0)
        cacheable[index[name]] = not compiler.reads_match
        lookback = max(lookback, compiler.lookback)
        row_lookbacks[index[name]] = None if compiler.prev_elsewhere else compiler.lookback
    return Conditions(
        variables=tuple(variables),
        defines=tuple(defines),
        tests=tuple(tests),
        updates=tuple(slots.update_for(position) for position in range(len(variables))),
        cacheable=tuple(cacheable),
        initial=slots.initial(),
        tuple_slots=slots.tuple_slots(),
        lookback=lookback,
        row_lookbacks=tuple(row_lookbacks),
        columns=frozenset(columns),
    )


def compile_measure(name: str, node: exp.Expression, variables: Sequence[str]) -> Measure:
    index = {variable: position for position, variable in enumerate(variables)}
    columns: set[ColumnPath] = set()
    check_nesting(node, f"MEASURES {name}")
    compiler = _Compiler(f"MEASURES {name}", index, "measure", None, None, columns)
    evaluate = compiler.compile(node)
    return Measure(name, node.sql(dialect=DIALECT), evaluate, compiler.lookback, frozenset(columns),
                   compiler.numbered)


def compile_row_condition(node: exp.Expression, clause: str) -> Callable[[Row], Any]:
    """A condition on one row of plain values by name (a pattern rule's output row), with
    the operators and functions of DEFINE but nothing that reads a match's rows."""
    check_nesting(node, clause)
    for found in node.walk():
        reads_match = isinstance(found, (exp.AggFunc, exp.First, exp.Last)) or (
            isinstance(found, exp.Anonymous) and found.name.upper() in _MATCH_FUNCTIONS)
        if reads_match:
            raise RejectedInput(f"{clause}: {found.sql(dialect=DIALECT)} reads the match's rows; compute it in "
                                f"MEASURES and test the measure here{located(found)}")
    return _Compiler(clause, {}, "row", None, None, set()).compile(node)


# What only DEFINE and MEASURES can evaluate: they read the rows of a match.
_MATCH_FUNCTIONS = frozenset({"PREV", "NEXT", "MATCH_NUMBER", "CLASSIFIER", "MATCH_ROWTIME"})


def check_nesting(tree: exp.Expression, clause: str) -> None:
    """Refuse a tree nested deeper than ``MAX_NESTING``; iterative, so it cannot recurse itself."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise RejectedInput(f"{clause}: {TOO_DEEP}{located(node)}")
        for child in node.iter_expressions():
            chained = isinstance(node, exp.Connector) and type(child) is type(node)
            stack.append((child, depth if chained else depth + 1))


def interval(node: exp.Interval, clause: str) -> timedelta:
    """An INTERVAL literal (``INTERVAL '5' MINUTE``, ``INTERVAL '5 minutes'``, ``INTERVAL
    '1 02:03:04.5' DAY TO SECOND``) as a timedelta."""
    unit = node.args.get("unit")
    text = node.this.name if isinstance(node.this, exp.Literal) else None
    if isinstance(unit, exp.IntervalSpan) and text is not None:
        return _interval_span(node, text, unit, clause)
    name = unit.name.upper().removesuffix("S") if isinstance(unit, exp.Var) else ""
    if text is None or name not in _UNITS:
        raise RejectedInput(
            f"{clause}: {node.sql(dialect=DIALECT)} is not supported; write "
            f"INTERVAL '<number>' <unit> with unit one of {', '.join(_UNITS)}{located(node)}"
        )
    try:
        amount = Decimal(text)
    except InvalidOperation:
        raise RejectedInput(f"{clause}: {text!r} is not a number{located(node)}") from None
    if not amount.is_finite():
        raise RejectedInput(f"{clause}: {text!r} is not a finite number{located(node)}")
    unit = _UNITS[name]
    try:
        if abs(amount) > Decimal(_LONGEST // unit):
            raise OverflowError
        return unit * float(amount)
    except OverflowError:
        raise RejectedInput(
            f"{clause}: {text} {name.lower()}s is longer than a rule may wait "
            f"(at most {_LONGEST.days:,} days){located(node)}"
        ) from None


# The fields of a day-time interval, in order, and what separates each from the one before.
_SPAN_FIELDS = (("DAY", ""), ("HOUR", " "), ("MINUTE", ":"), ("SECOND", ":"))


def _interval_span(node: exp.Interval, text: str, unit: exp.IntervalSpan, clause: str) -> timedelta:
    """``INTERVAL '<d hh:mm:ss.f>' DAY TO SECOND`` and the other SQL standard spans
    (``HOUR TO SECOND``: ``'hh:mm:ss'``, ``DAY TO HOUR``: ``'d hh'``, ...)."""
    names = [name for name, _ in _SPAN_FIELDS]
    first, last = unit.this.name.upper(), unit.expression.name.upper()
    if first not in names or last not in names or names.index(first) >= names.index(last):
        raise RejectedInput(f"{clause}: {node.sql(dialect=DIALECT)} is not supported; write e.g. INTERVAL "
                            f"'0 00:00:05' DAY TO SECOND{located(node)}")
    fields = _SPAN_FIELDS[names.index(first):names.index(last) + 1]
    pattern = r"([+-])?" + "".join(
        (re.escape(separator) if index else "") + (r"(\d+(?:\.\d*)?)" if name == "SECOND" else r"(\d+)")
        for index, (name, separator) in enumerate(fields))
    found = re.fullmatch(pattern, text.strip())
    if found is None:
        shape = "".join((separator if index else "") + {"DAY": "d", "HOUR": "hh", "MINUTE": "mm", "SECOND": "ss"}[name]
                        for index, (name, separator) in enumerate(fields))
        raise RejectedInput(f"{clause}: {text!r} is not a {first} TO {last} interval ('{shape}'){located(node)}")
    sign, *amounts = found.groups()
    try:
        total = sum((_UNITS[name] * float(Decimal(amount)) for (name, _), amount in zip(fields, amounts, strict=True)),
                    timedelta(0))
    except OverflowError:
        raise RejectedInput(f"{clause}: {text!r} is longer than a rule may wait (at most {_LONGEST.days:,} days)"
                            f"{located(node)}") from None
    return -total if sign == "-" else total


class _SlotTable:
    """The context layout shared by all DEFINE conditions of one pattern."""

    def __init__(self) -> None:
        self.slots: dict[tuple[str, int, str], int] = {}
        self.sizes: list[int] = []
        # Per slot: what it keeps, for which variable, and the value aggregated (if any).
        self.entries: list[tuple[str, int, Callable[[Row], Any] | None]] = []

    def rows(self, kind: str, variable: int, size: int) -> int:
        """A slot keeping the last or first ``size`` row numbers mapped to ``variable``."""
        slot = self._slot((kind, variable, ""), (kind, variable, None))
        self.sizes[slot] = max(self.sizes[slot], size)
        return slot

    def aggregate(self, kind: str, variable: int, key: str, value: Callable[[Row], Any] | None) -> int:
        return self._slot((kind, variable, key), (kind, variable, value))

    def _slot(self, key: tuple[str, int, str], entry: tuple[str, int, Callable[[Row], Any] | None]) -> int:
        if key not in self.slots:
            self.slots[key] = len(self.entries)
            self.entries.append(entry)
            self.sizes.append(0)
        return self.slots[key]

    def initial(self) -> Context:
        return tuple(_INITIAL[kind] for kind, _, _ in self.entries)

    def tuple_slots(self) -> frozenset[int]:
        return frozenset(slot for slot, (kind, _, _) in enumerate(self.entries) if kind in ("last", "first", "avg"))

    def update_for(self, variable: int) -> ContextUpdate | None:
        steps = [
            (slot, _fold(kind, self.sizes[slot], value))
            for slot, (kind, owner, value) in enumerate(self.entries)
            if owner in (variable, ANY)
        ]
        if not steps:
            return None

        def update(context: Context, number: int, row: Row) -> Context:
            values = list(context)
            for slot, fold in steps:
                values[slot] = fold(values[slot], number, row)
            return tuple(values)

        return update


_INITIAL: dict[str, Any] = {
    "last": (), "first": (), "count": 0, "sum": None, "avg": (0, None), "min": None, "max": None,
}


def _fold(kind: str, size: int, value: Callable[[Row], Any] | None) -> Callable[[Any, int, Row], Any]:
    """How one slot takes in a row mapped to its variable (row number ``number``)."""
    if kind == "last":
        def last(kept: tuple[int, ...], number: int, row: Row) -> tuple[int, ...]:
            return (kept + (number,))[-size:]
        return last
    if kind == "first":
        def first(kept: tuple[int, ...], number: int, row: Row) -> tuple[int, ...]:
            return kept if len(kept) >= size else kept + (number,)
        return first
    if value is None:
        def count_rows(total: int, number: int, row: Row) -> int:
            return total + 1
        return count_rows
    get = value
    if kind == "count":
        def count(total: int, number: int, row: Row) -> int:
            return total + (get(row) is not None)
        return count
    if kind == "avg":
        def average(state: tuple[int, Any], number: int, row: Row) -> tuple[int, Any]:
            item = get(row)
            if item is None:
                return state
            return state[0] + 1, _combine(operator.add, state[1], item)
        return average
    combine = {"sum": operator.add, "min": min, "max": max}[kind]

    def fold(state: Any, number: int, row: Row) -> Any:
        item = get(row)
        return state if item is None else _combine(combine, state, item)
    return fold


def _combine(combine: Callable[[Any, Any], Any], state: Any, item: Any) -> Any:
    if state is None:
        return item
    try:
        return combine(state, item)
    except TypeError as exc:
        raise GiveUp(f"cannot aggregate {item!r} with {state!r}: {exc}") from exc


class _Compiler:
    """Turns one expression tree into a closure over a DefineFrame, a MatchView or a row.

    Mode ``define`` and ``measure`` compile whole clauses; mode ``row`` compiles the
    argument of a navigation or an aggregate, which reads one row of one variable.
    """

    def __init__(
        self, clause: str, variables: dict[str, int], mode: str, current: int | None,
        slots: _SlotTable | None, columns: set[ColumnPath],
    ) -> None:
        self.clause = clause
        self.columns = columns
        self.variables = variables
        self.mode = mode
        self.current = current
        self.slots = slots
        self.lookback = 0
        # Whether a PREV reads back from another variable's row rather than the current one.
        self.prev_elsewhere = False
        self.reads_match = False
        self.numbered = False  # MATCH_NUMBER() was met
        # In row mode: the single variable the argument's columns belong to (ANY if none).
        self.row_variable = ANY

    def compile(self, node: exp.Expression) -> Evaluator:
        if isinstance(node, exp.Paren):
            return self.compile(node.this)
        if isinstance(node, (exp.Literal, exp.Boolean, exp.Null, exp.Interval)):
            return _constant(self._literal(node))
        if isinstance(node, (exp.Column, exp.Dot)):
            return self._column(node)
        if isinstance(node, (exp.And, exp.Or)):
            return _logic(node, [self.compile(part) for part in node.flatten()])
        if isinstance(node, exp.Not):
            return _not(self.compile(node.this))
        if type(node) in _COMPARISONS:
            return self._comparison(node)
        if type(node) in _ARITHMETIC or isinstance(node, (exp.Div, exp.Mod)):
            return self._arithmetic(node)
        if isinstance(node, exp.Neg):
            return _negate(self.compile(node.this), self._text(node))
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
            inner = self.compile(node.this)
            return lambda env: inner(env) is None
        if isinstance(node, exp.Between):
            return self._between(node)
        if isinstance(node, exp.In) and not node.args.get("query") and not node.args.get("unnest"):
            return _in(self.compile(node.this), [self.compile(item) for item in node.expressions])
        if isinstance(node, exp.Case):
            return self._case(node)
        return self._call(node)

    def _call(self, node: exp.Expression) -> Evaluator:
        """Function calls: COALESCE, scalar functions, casts, TIMESTAMPDIFF, navigation and
        aggregates; anything else is refused."""
        if isinstance(node, exp.Coalesce):
            return _coalesce([self.compile(part) for part in (node.this, *node.expressions)])
        if type(node) in _SCALARS:
            return self._scalar(node)
        if isinstance(node, exp.Cast):  # TRY_CAST too
            return self._cast(node)
        if isinstance(node, exp.DateDiff) and _written(node) == "TIMESTAMPDIFF":
            return self._timestampdiff(node)
        if isinstance(node, (exp.First, exp.Last)):
            return self._navigation("FIRST" if isinstance(node, exp.First) else "LAST",
                                    node.this, node.expression, node)
        if isinstance(node, exp.Anonymous):
            return self._function(node)
        if type(node) in _AGGREGATES:
            return self._aggregate(_AGGREGATES[type(node)], node)
        raise self._unsupported(node)

    # -- leaves ---------------------------------------------------------------------------

    def _literal(self, node: exp.Expression) -> Any:
        if isinstance(node, exp.Null):
            return None
        if isinstance(node, exp.Boolean):
            return bool(node.this)
        if isinstance(node, exp.Interval):
            return interval(node, self.clause)
        value = _literal_value(node)
        if value is _NOT_CONSTANT:
            raise self._unsupported(node)
        return value

    def _column(self, node: exp.Expression) -> Evaluator:
        variable, path = self._reference(node)
        get = _getter(path)
        if self.mode == "row":
            self._row_variable(variable, node)
            return get
        if self.mode == "define":
            if variable in (ANY, self.current):
                return _current(path)
            return self._last_in_match(variable, 0, get)
        if variable == ANY:
            return lambda view: get(view.rows[view.end - view.base])
        return _final_row(variable, -1, get)

    def _reference(self, node: exp.Expression) -> tuple[int, ColumnPath]:
        parts: list[exp.Expression] = []
        while isinstance(node, exp.Dot):
            parts.insert(0, node.expression)
            node = node.this
        if not isinstance(node, exp.Column):
            raise self._unsupported(node)
        parts[:0] = node.parts
        if any(isinstance(part, exp.Star) for part in parts):
            raise RejectedInput(f"{self.clause}: {self._text(node)} is only allowed in COUNT{located(node)}")
        names = [part.name for part in parts]
        head = parts[0]
        key = names[0] if head.args.get("quoted") else names[0].upper()
        # A bare name is always a column; only a qualifier can name a pattern variable.
        if len(names) > 1 and key in self.variables:
            path = tuple(names[1:])
            self.columns.add(path)
            return self.variables[key], path
        self.columns.add(tuple(names))
        return ANY, tuple(names)

    # -- operators ------------------------------------------------------------------------

    def _comparison(self, node: exp.Expression) -> Evaluator:
        compare = _COMPARISONS[type(node)]
        left, right = self.compile(node.this), self.compile(node.expression)
        text = self._text(node)
        constant = _literal_value(node.expression)
        if constant is not _NOT_CONSTANT and constant is not None:
            def against_constant(env: Any) -> Any:
                value = left(env)
                if value is None:
                    return None
                try:
                    return compare(value, constant)
                except TypeError as exc:
                    raise GiveUp(f"{self.clause}: cannot evaluate {text} on {value!r}: {exc}") from exc
            return against_constant
        return _binary(compare, left, right, f"{self.clause}: cannot evaluate {text}")

    def _arithmetic(self, node: exp.Expression) -> Evaluator:
        left, right = self.compile(node.this), self.compile(node.expression)
        failure = f"{self.clause}: cannot evaluate {self._text(node)}"
        if isinstance(node, exp.Div):
            return _binary(_divide(failure), left, right, failure)
        if isinstance(node, exp.Mod):
            return _binary(_remainder(failure), left, right, failure)
        return _binary(_ARITHMETIC[type(node)], left, right, failure)

    def _between(self, node: exp.Between) -> Evaluator:
        value = self.compile(node.this)
        low, high = self.compile(node.args["low"]), self.compile(node.args["high"])
        failure = f"{self.clause}: cannot evaluate {self._text(node)}"

        def between(env: Any) -> Any:
            item, lo, hi = value(env), low(env), high(env)
            if item is None or lo is None or hi is None:
                return None
            try:
                return lo <= item <= hi
            except TypeError as exc:
                raise GiveUp(f"{failure}: {exc}") from exc
        return between

    def _case(self, node: exp.Case) -> Evaluator:
        branches = [(self.compile(branch.this), self.compile(branch.args["true"]))
                    for branch in node.args.get("ifs") or []]
        default = self.compile(node.args["default"]) if node.args.get("default") else _constant(None)
        operand = self.compile(node.this) if node.this else None

        def case(env: Any) -> Any:
            subject = operand(env) if operand else None
            for when, then in branches:
                answer = when(env)
                if operand is not None:
                    answer = None if subject is None or answer is None else subject == answer
                if answer is True:
                    return then(env)
            return default(env)
        return case

    # -- row pattern navigation and aggregates --------------------------------------------

    def _function(self, node: exp.Anonymous) -> Evaluator:
        name = node.name.upper()
        arguments = node.expressions
        if name == "PREV" and 1 <= len(arguments) <= 2:
            return self._navigation("PREV", arguments[0], arguments[1] if len(arguments) == 2 else None, node)
        if name == "NEXT":
            raise RejectedInput(
                f"{self.clause}: NEXT() reads rows after the current one, which a stream has not "
                f"seen yet; it is not supported{located(node)}"
            )
        if name in ("MATCH_NUMBER", "CLASSIFIER", "MATCH_ROWTIME") and not arguments:
            if self.mode != "measure":
                raise RejectedInput(f"{self.clause}: {name}() is only supported in MEASURES{located(node)}")
            if name == "MATCH_NUMBER":
                self.numbered = True
                return lambda view: view.number
            if name == "MATCH_ROWTIME":
                return lambda view: view.rowtime
            return lambda view: view.variables[view.labels[-1]]
        raise self._unsupported(node)

    def _scalar(self, node: exp.Expression) -> Evaluator:
        name, apply, accepts = _SCALARS[type(node)]
        inner = self.compile(node.this)
        failure = f"{self.clause}: cannot evaluate {self._text(node)}"

        def scalar(env: Any) -> Any:
            value = inner(env)
            if value is None:
                return None
            if not accepts(value):
                raise GiveUp(f"{failure}: {name} of {value!r}")
            return apply(value)
        return scalar

    def _cast(self, node: exp.Cast) -> Evaluator:
        target = node.to.this
        convert = next((convert for types, convert in _CASTS if target in types), None)
        if convert is None:
            raise RejectedInput(
                f"{self.clause}: {self._text(node)} is not supported; cast to DOUBLE, BIGINT, INT, STRING, "
                f"BOOLEAN or TIMESTAMP{located(node)}"
            )
        inner = self.compile(node.this)
        failure = f"{self.clause}: cannot evaluate {self._text(node)}"
        safe = isinstance(node, exp.TryCast)

        def cast(env: Any) -> Any:
            value = inner(env)
            if value is None:
                return None
            try:
                return convert(value)
            except (TypeError, ValueError, OverflowError) as exc:
                if safe:
                    return None
                raise GiveUp(f"{failure} on {value!r}: {exc}") from exc
        return cast

    def _timestampdiff(self, node: exp.DateDiff) -> Evaluator:
        unit = node.args.get("unit")
        name = unit.name.upper() if isinstance(unit, (exp.Var, exp.Column)) else ""
        step = _DIFF_UNITS.get(name.removesuffix("S"))
        if step is None:
            raise RejectedInput(
                f"{self.clause}: TIMESTAMPDIFF({name or '?'}, ...) is not supported; the unit is one of "
                f"{', '.join(_DIFF_UNITS)} (months and years have no fixed length){located(node)}"
            )
        start, end = self.compile(node.expression), self.compile(node.this)
        failure = f"{self.clause}: cannot evaluate {_written(node)}(...)"

        def difference(env: Any) -> Any:
            first = start(env)
            if first is None:
                return None
            last = end(env)
            if last is None:
                return None
            if not isinstance(first, datetime) or not isinstance(last, datetime):
                raise GiveUp(f"{failure}: {first!r} and {last!r} are not both timestamps "
                             "(CAST(... AS TIMESTAMP) reads one from text)")
            micros = _micros(last) - _micros(first)
            # Whole units, truncated toward zero.
            return micros // step if micros >= 0 else -(-micros // step)
        return difference

    def _navigation(self, kind: str, argument: exp.Expression, offset_node: exp.Expression | None,
                    node: exp.Expression) -> Evaluator:
        self._not_nested(node)
        offset = self._offset(offset_node, 1 if kind == "PREV" else 0, node)
        value, variable = self._argument(argument)
        if kind == "PREV":
            self.lookback = max(self.lookback, offset)
            return self._previous(variable, offset, value)
        if self.mode == "define":
            if kind == "LAST" and offset == 0 and variable in (ANY, self.current):
                return _current_value(value)
            if kind == "LAST":
                return self._last_in_match(variable, offset, value)
            assert self.slots is not None
            slot = self.slots.rows("first", variable, offset + 1)
            self.reads_match = True
            return _kept_row(slot, offset, value)
        if variable == ANY:
            if kind == "FIRST":
                return lambda view: value(view.rows[view.start + offset - view.base]) \
                    if view.start + offset <= view.end else None
            return lambda view: value(view.rows[view.end - offset - view.base]) \
                if view.end - offset >= view.start else None
        return _final_row(variable, offset if kind == "FIRST" else -1 - offset, value)

    def _previous(self, variable: int, offset: int, value: Callable[[Row], Any]) -> Evaluator:
        if self.mode == "define":
            if variable in (ANY, self.current):
                def physical(frame: DefineFrame) -> Any:
                    index = frame.index - offset
                    return value(frame.rows[index]) if index >= 0 else None
                return physical
            assert self.slots is not None
            slot = self.slots.rows("last", variable, 1)
            self.reads_match = True
            self.prev_elsewhere = True

            def before_last(frame: DefineFrame) -> Any:
                kept = frame.context[slot]
                if not kept:
                    return None
                index = kept[-1] - offset - frame.base
                return value(frame.rows[index]) if index >= 0 else None
            return before_last

        def before(view: MatchView) -> Any:
            if variable == ANY:
                number = view.end
            elif view.rows_of[variable]:
                number = view.rows_of[variable][-1]
            else:
                return None
            index = number - offset - view.base
            return value(view.rows[index]) if index >= 0 else None
        return before

    def _last_in_match(self, variable: int, offset: int, value: Callable[[Row], Any]) -> Evaluator:
        assert self.slots is not None
        slot = self.slots.rows("last", variable, offset + 1)
        self.reads_match = True
        return _kept_row(slot, -1 - offset, value)

    def _aggregate(self, kind: str, node: exp.Expression) -> Evaluator:
        self._not_nested(node)
        argument = node.this
        if isinstance(argument, exp.Distinct):
            raise RejectedInput(f"{self.clause}: DISTINCT aggregates are not supported{located(node)}")
        value: Callable[[Row], Any] | None
        if kind == "count" and isinstance(argument, exp.Star):
            value, variable = None, ANY
        elif kind == "count" and isinstance(argument, exp.Column) and isinstance(argument.this, exp.Star):
            value, variable = None, self._variable_named(argument.table, node)
        else:
            value, variable = self._argument(argument)
        if self.mode == "define":
            assert self.slots is not None
            slot = self.slots.aggregate(kind, variable, argument.sql(dialect=DIALECT), value)
            self.reads_match = True
            if kind == "avg":
                def average(frame: DefineFrame) -> Any:
                    count, total = frame.context[slot]
                    return total / count if count else None
                return average
            return lambda frame: frame.context[slot]
        return _final_aggregate(kind, variable, value)

    def _argument(self, node: exp.Expression) -> tuple[Callable[[Row], Any], int]:
        """The argument of a navigation or aggregate: a function of one row, and its variable."""
        inner = _Compiler(self.clause, self.variables, "row", None, None, self.columns)
        value = inner.compile(node)
        return value, inner.row_variable

    def _offset(self, node: exp.Expression | None, default: int, where: exp.Expression) -> int:
        if node is None:
            return default
        if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
            return int(node.this)
        raise RejectedInput(
            f"{self.clause}: the offset of {self._text(where)} must be a non-negative integer "
            f"literal{located(where)}"
        )

    def _not_nested(self, node: exp.Expression) -> None:
        if self.mode == "row":
            raise RejectedInput(
                f"{self.clause}: {self._text(node)} is nested inside a navigation or aggregate, "
                f"which is not supported{located(node)}"
            )

    def _row_variable(self, variable: int, node: exp.Expression) -> None:
        if variable == ANY:
            return
        if self.row_variable not in (ANY, variable):
            raise RejectedInput(
                f"{self.clause}: a navigation or aggregate argument must read one pattern "
                f"variable, but {self._text(node)} reads another{located(node)}"
            )
        self.row_variable = variable

    def _variable_named(self, identifier: str, node: exp.Expression) -> int:
        key = identifier.upper()
        if key not in self.variables:
            raise RejectedInput(f"{self.clause}: {identifier} is not a pattern variable{located(node)}")
        return self.variables[key]

    def _text(self, node: exp.Expression) -> str:
        return node.sql(dialect=DIALECT)

    def _unsupported(self, node: exp.Expression) -> RejectedInput:
        if isinstance(node, exp.Anonymous):
            what = f"function {node.name.upper()}()"
        elif isinstance(node, exp.Func):
            what = f"function {_written(node)}()"
        else:
            what = self._text(node)
        return RejectedInput(f"{self.clause}: {what} is not supported{located(node)}")


_NOT_CONSTANT = object()
_WRITTEN = "written"


def mark_written_names(tree: exp.Expression, sql: str) -> None:
    """Note on each function node of ``tree``, parsed from ``sql``, its name as written:
    the parser reads several names as one node (``TIMESTAMPDIFF`` and ``DATEDIFF`` as
    ``DateDiff``), and both a message and what is supported go by what the user wrote."""
    for node in tree.find_all(exp.Func):
        meta = node.meta
        if "start" in meta and "end" in meta:
            meta[_WRITTEN] = sql[meta["start"]:meta["end"] + 1].upper()


def _written(node: exp.Expression) -> str:
    written = node.meta.get(_WRITTEN)
    return written if isinstance(written, str) and written.isidentifier() else node.sql_name()


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ABS, LOWER, UPPER: (name, what it does, which values it takes).
_SCALARS: dict[type[exp.Expression], tuple[str, Callable[[Any], Any], Callable[[Any], bool]]] = {
    exp.Abs: ("ABS", abs, _number),
    exp.Lower: ("LOWER", str.lower, lambda value: isinstance(value, str)),
    exp.Upper: ("UPPER", str.upper, lambda value: isinstance(value, str)),
}

_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def _micros(value: datetime) -> int:
    """Epoch microseconds; a time without a zone is UTC, as the matcher reads event times."""
    return (value - (_EPOCH if value.tzinfo is None else _EPOCH_UTC)) // _MICROSECOND


_DIFF_UNITS = {
    "MICROSECOND": 1, "MILLISECOND": 1_000, "SECOND": 1_000_000, "MINUTE": 60_000_000, "HOUR": 3_600_000_000,
    "DAY": 86_400_000_000, "WEEK": 604_800_000_000,
}


def _to_double(value: Any) -> float:
    if isinstance(value, (bool, int, float)):
        return float(value)
    if isinstance(value, str):
        return float(value.strip())
    raise TypeError(f"{type(value).__name__} is not a number")


def _to_integer(value: Any) -> int:
    if isinstance(value, (bool, int)):
        return int(value)
    if isinstance(value, float):
        return int(value)  # toward zero, as Spark and Flink cast
    if isinstance(value, str):
        return int(value.strip())
    raise TypeError(f"{type(value).__name__} is not a number")


def _to_string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (dict, list)):
        return orjson.dumps(value).decode()
    return str(value)


def _to_boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if _number(value):
        return value != 0
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError("not true or false")


def _to_timestamp(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        return datetime.fromisoformat(value.strip())
    raise TypeError(f"{type(value).__name__} is not a timestamp")


_CASTS: tuple[tuple[frozenset[exp.DataType.Type], Callable[[Any], Any]], ...] = (
    (frozenset({exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT}), _to_double),
    (frozenset({exp.DataType.Type.BIGINT, exp.DataType.Type.INT, exp.DataType.Type.SMALLINT,
                exp.DataType.Type.TINYINT}), _to_integer),
    (frozenset({exp.DataType.Type.VARCHAR, exp.DataType.Type.TEXT, exp.DataType.Type.CHAR,
                exp.DataType.Type.NVARCHAR, exp.DataType.Type.NCHAR}), _to_string),
    (frozenset({exp.DataType.Type.BOOLEAN}), _to_boolean),
    (frozenset({exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ, exp.DataType.Type.TIMESTAMPLTZ,
                exp.DataType.Type.TIMESTAMPNTZ}), _to_timestamp),
)


def _literal_value(node: exp.Expression) -> Any:
    """The value of a string or number literal; ``_NOT_CONSTANT`` for anything else."""
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        try:
            return int(text) if text.isdigit() else float(text)
        except ValueError:
            return _NOT_CONSTANT
    return _NOT_CONSTANT


def parse_statements(sql: str) -> list[exp.Expression]:
    """The statements of ``sql`` in the rules' dialect; a syntax error is rejected with its place."""
    try:
        statements = sqlglot.parse(sql, read=DIALECT)
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        raise RejectedInput(
            f"SQL syntax error at line {first.get('line')}, column {first.get('col')}: "
            f"{first.get('description', exc)}"
        ) from exc
    except TokenError as exc:
        raise RejectedInput(f"SQL syntax error: {exc}") from exc
    return [statement for statement in statements if statement is not None]


def located(node: exp.Expression) -> str:
    """Where ``node`` starts in the rule's SQL, as `` (line L, column C)`` for an error message."""
    places = [part.meta for part in node.walk() if "line" in part.meta]
    if not places:
        return ""
    first = min(places, key=lambda meta: meta["start"])
    # sqlglot's column is where the token ends; report where it starts.
    return f" (line {first['line']}, column {first['col'] - (first['end'] - first['start'])})"


def _getter(path: tuple[str, ...]) -> Callable[[Row], Any]:
    head, rest = path[0], path[1:]
    if not rest:
        return lambda row: row.get(head)

    def nested(row: Row) -> Any:
        value = row.get(head)
        for key in rest:
            if not isinstance(value, dict):
                return None
            value = value.get(key)
        return value
    return nested


def _current(path: tuple[str, ...]) -> Evaluator:
    if len(path) == 1:
        name = path[0]
        return lambda frame: frame.rows[frame.index].get(name)
    return _current_value(_getter(path))


def _current_value(value: Callable[[Row], Any]) -> Evaluator:
    return lambda frame: value(frame.rows[frame.index])


def _kept_row(slot: int, position: int, value: Callable[[Row], Any]) -> Evaluator:
    """A row kept in a context slot: ``position`` counts from the start if >= 0, else from the end."""
    need = position + 1 if position >= 0 else -position

    def kept_row(frame: DefineFrame) -> Any:
        kept = frame.context[slot]
        if len(kept) < need:
            return None
        return value(frame.rows[kept[position] - frame.base])
    return kept_row


def _final_row(variable: int, position: int, value: Callable[[Row], Any]) -> Evaluator:
    need = position + 1 if position >= 0 else -position

    def final_row(view: MatchView) -> Any:
        numbers = view.rows_of[variable]
        if len(numbers) < need:
            return None
        return value(view.rows[numbers[position] - view.base])
    return final_row


def _final_aggregate(kind: str, variable: int, value: Callable[[Row], Any] | None) -> Evaluator:
    def aggregate(view: MatchView) -> Any:
        numbers = range(view.start, view.end + 1) if variable == ANY else view.rows_of[variable]
        if value is None:
            return len(numbers)
        items = [item for item in (value(view.rows[n - view.base]) for n in numbers) if item is not None]
        if kind == "count":
            return len(items)
        if not items:
            return None
        try:
            if kind == "min":
                return min(items)
            if kind == "max":
                return max(items)
            total = sum(items[1:], items[0])
        except TypeError as exc:
            raise GiveUp(f"cannot aggregate {items!r}: {exc}") from exc
        return total / len(items) if kind == "avg" else total
    return aggregate


def _constant(value: Any) -> Evaluator:
    return lambda env: value


def _binary(combine: Callable[[Any, Any], Any], left: Evaluator, right: Evaluator, failure: str) -> Evaluator:
    def binary(env: Any) -> Any:
        a = left(env)
        if a is None:
            return None
        b = right(env)
        if b is None:
            return None
        try:
            return combine(a, b)
        except TypeError as exc:
            raise GiveUp(f"{failure} on {a!r} and {b!r}: {exc}") from exc
    return binary


def _divide(failure: str) -> Callable[[Any, Any], Any]:
    def divide(a: Any, b: Any) -> Any:
        if b == 0:
            raise GiveUp(f"{failure}: division by zero")
        return a / b
    return divide


def _remainder(failure: str) -> Callable[[Any, Any], Any]:
    def remainder(a: Any, b: Any) -> Any:
        # SQL's remainder takes the dividend's sign; Python's % takes the divisor's.
        if b == 0:
            raise GiveUp(f"{failure}: division by zero")
        result = abs(a) % abs(b)
        return -result if a < 0 else result
    return remainder


def _negate(inner: Evaluator, text: str) -> Evaluator:
    def negate(env: Any) -> Any:
        value = inner(env)
        if value is None:
            return None
        try:
            return -value
        except TypeError as exc:
            raise GiveUp(f"cannot evaluate {text} on {value!r}: {exc}") from exc
    return negate


def _logic(node: exp.Expression, parts: list[Evaluator]) -> Evaluator:
    decisive = isinstance(node, exp.Or)  # the value that settles the whole: TRUE for OR, FALSE for AND

    def logic(env: Any) -> Any:
        unknown = False
        for part in parts:
            value = part(env)
            if value is None:
                unknown = True
            elif bool(value) is decisive:
                return decisive
        return None if unknown else not decisive
    return logic


def _not(inner: Evaluator) -> Evaluator:
    def negation(env: Any) -> Any:
        value = inner(env)
        return None if value is None else not value
    return negation


def _coalesce(parts: list[Evaluator]) -> Evaluator:
    def coalesce(env: Any) -> Any:
        for part in parts:
            value = part(env)
            if value is not None:
                return value
        return None
    return coalesce


def _in(value: Evaluator, items: list[Evaluator]) -> Evaluator:
    def contained(env: Any) -> Any:
        subject = value(env)
        if subject is None:
            return None
        unknown = False
        for item in items:
            candidate = item(env)
            if candidate is None:
                unknown = True
            elif candidate == subject:
                return True
        return None if unknown else False
    return contained


__all__ = [
    "ANY",
    "DIALECT",
    "ColumnPath",
    "Conditions",
    "Context",
    "Define",
    "DefineFrame",
    "MatchView",
    "Measure",
    "Row",
    "MAX_NESTING",
    "check_nesting",
    "compile_defines",
    "compile_row_condition",
    "compile_measure",
    "interval",
    "located",
    "mark_written_names",
    "parse_statements",
]
