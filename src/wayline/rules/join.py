"""Join rules: the events stream joined with a reference table, or with itself in a time interval.

Two forms, each one SELECT with one JOIN (``JOIN``/``INNER JOIN`` or ``LEFT [OUTER] JOIN``):

- *stream-table enrichment* — ``FROM events e JOIN reference.<table> r ON r.key = <e's
  expression> [AND ...]``: each event meets the reference table's row whose ``key`` (a
  string) equals the expression, as the table is when the event's micro-batch runs (Flink's
  *lookup join*, ``FOR SYSTEM_TIME AS OF`` processing time). A reference row has ``key`` and
  a JSON ``data`` object: ``r.data.tier``. A LEFT JOIN keeps events with no row (``r``'s
  columns NULL).
- *interval join* — ``FROM events a JOIN events b ON <a's expression> = <b's expression>
  AND b.event_time BETWEEN a.event_time [± INTERVAL ...] AND a.event_time + INTERVAL ...``
  (or the same bound as ``>=``/``>`` and ``<=``/``<``, each end closed or open as written):
  pairs of events with equal, non-NULL keys whose times lie within the bound, as Flink's
  interval join. Both sides read the event topics;
  ``a.type = 'order'`` or ``b.topic = '...'`` picks the event type or topic of a side. A
  LEFT JOIN also emits each ``a`` event no ``b`` met, with ``b``'s columns NULL, once the
  watermark has passed the end of its interval. The bound is the rule's time bound: an
  event is kept in the join's state until the watermark passes its interval.

Columns are qualified by the side's alias (``e.id``, ``a.data.amount``, ``r.key``), and
read as in filter rules (``data.*`` typed by its use, NULL when it does not convert). The
rule compiles to Spark SQL (``JoinSpec``), its conditions sorted by the side they read:
the job filters each side's events before the join (a LEFT JOIN's ON conditions on ``a``
alone, ``left_on``, are part of the join: they decide matches, not which ``a`` events are
kept), joins on the rest of ON, and applies the rest of WHERE after the join.

An interval join runs as Spark's stream-stream join, which differs from a batch join in two
ways the compiled rule makes up for, so that the stream gives the pairs the batch plan
gives. It pairs NULL keys (its state matches a NULL with a NULL), so each key equality
brings ``IS NOT NULL`` on both of its sides. And it reads a comparison in the join
condition of one side's column with a constant as a bound on that side's event time, so a
LEFT JOIN's ``a``-only condition there (``a.data.v > 5``) would keep its ``a`` events for
ever, never emitted; ``left_on`` is therefore evaluated as a column of ``a`` before the join.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from sqlglot import exp

from wayline.core.errors import RejectedInput
from wayline.core.variant import json_path
from wayline.rules.columns import DATA, EVENT_TIME, check_column, column_paths, key_name, output_name
from wayline.rules.expression import DIALECT, interval, located
from wayline.rules.recognize import SOURCE
from wayline.rules.spark_sql import check_node, data_type

REFERENCE_SCHEMA = "reference"
REFERENCE_KEY = "key"
# The columns of a reference table as the job loads it.
REFERENCE_COLUMNS = (REFERENCE_KEY, DATA)


class JoinKind(StrEnum):
    TABLE = "table"
    INTERVAL = "interval"


@dataclass(frozen=True, slots=True)
class JoinSpec:
    """A join rule as Spark SQL over two aliased frames: the events as ``left``, and the
    reference table or the events again as ``right``."""

    kind: JoinKind
    outer: bool
    left: str
    right: str
    table: str | None  # TABLE: the reference table's name
    condition: str  # what of ON reads both sides (the key and time bound among it)
    where: str | None  # what of WHERE reads both sides, or the right side of a LEFT JOIN
    left_where: str | None  # conditions on the left side alone, applied before the join
    right_where: str | None  # conditions on the right side alone, applied before the join
    # A LEFT JOIN's ON conditions on the left side alone: a left event that fails them
    # matches nothing and is kept, unmatched.
    left_on: str | None
    key: str  # the left side's key expression: the output's subject
    select: tuple[tuple[str, str], ...]
    # INTERVAL: b.event_time lies between a.event_time + lower and a.event_time + upper
    # (each end included or not as the rule says; ``condition`` holds the comparisons).
    lower: timedelta | None = None
    upper: timedelta | None = None

    @property
    def time_bound(self) -> timedelta | None:
        if self.lower is None or self.upper is None:
            return None
        return max(abs(self.lower), abs(self.upper))


def compile_join(statement: exp.Select) -> JoinSpec:
    """Check a SELECT with a JOIN (``wayline.rules.rule`` found one) and compile it."""
    joins = statement.args.get("joins") or []
    if len(joins) != 1:
        raise RejectedInput("a join rule joins events with one reference table or with events once")
    extra = sorted(key for key, value in statement.args.items()
                   if value and key not in ("expressions", "from_", "where", "joins"))
    if extra:
        raise RejectedInput(f"{', '.join(key.upper().rstrip('_') for key in extra)} is not supported in a join rule")
    join = joins[0]
    outer = _join_type(join)
    left = _alias(statement.args["from_"].this, stream=True)
    right_table = join.this
    if not isinstance(right_table, exp.Table):
        raise RejectedInput(f"JOIN {right_table.sql(dialect=DIALECT)}: join events or reference.<table>")
    interval_join = right_table.name.lower() == SOURCE and not right_table.args.get("db")
    if not interval_join and (right_table.db or "").lower() != REFERENCE_SCHEMA:
        raise RejectedInput(
            f"JOIN {right_table.sql(dialect=DIALECT)}: a rule joins events with events (an interval join) or "
            f"with a reference table, {REFERENCE_SCHEMA}.<name>"
        )
    right = _alias(right_table, stream=interval_join)
    if right == left:
        raise RejectedInput(f"JOIN: both sides are called {left}; give them different aliases (FROM events a JOIN ... b)")
    on = join.args.get("on")
    if on is None or join.args.get("using"):
        raise RejectedInput("JOIN needs an ON condition (USING is not supported)")
    sides = {left: True, right: interval_join}
    for node in statement.walk():
        if not isinstance(node, (exp.Join, exp.TableAlias, exp.Interval, exp.Var)):
            check_node(node)
    for path, node in column_paths(statement):
        _check_qualified(path, node, sides)
    conjuncts = _conjuncts(on)
    bounds: list[str] = []
    lower = upper = None
    if interval_join:
        bound, key, start, end = _interval_bound(conjuncts, left, right)
        conjuncts = [c for c in conjuncts if c not in bound]
        bounds = [f"`{right}`.`{EVENT_TIME}` {'>' if start.strict else '>='} `{left}`.`{EVENT_TIME}` + "
                  f"{_spark_interval(start.offset)}",
                  f"`{right}`.`{EVENT_TIME}` {'<' if end.strict else '<='} `{left}`.`{EVENT_TIME}` + "
                  f"{_spark_interval(end.offset)}"]
        lower, upper = start.offset, end.offset
        table = None
    else:
        key = _table_key(conjuncts, left, right)
        for node in on.walk():
            if isinstance(node, exp.Interval):
                raise RejectedInput(f"ON: INTERVAL has no use in a join with a reference table{located(node)}")
        table = right_table.name
    where = statement.args.get("where")
    if where is not None and where.find(exp.Interval):
        raise RejectedInput(f"WHERE: the time bound of an interval join goes in ON{located(where)}")
    split = _split(conjuncts, where, left, right, outer, interval_join)
    return JoinSpec(
        kind=JoinKind.INTERVAL if interval_join else JoinKind.TABLE, outer=outer, left=left, right=right,
        table=table, condition=_and([_spark(c) for c in split["on"]] + bounds),
        where=_and([_spark(c) for c in split["after"]]) or None,
        left_where=_and([_spark(c) for c in split["left"]]) or None,
        right_where=_and([_spark(c) for c in split["right"]]) or None,
        left_on=_and([_spark(c) for c in split["left_on"]]) or None,
        key=_spark(exp.cast(key.copy(), "string")), select=_select(statement), lower=lower, upper=upper,
    )


def _split(on: list[exp.Expression], where: exp.Where | None, left: str, right: str, outer: bool,
           interval_join: bool) -> dict[str, list[exp.Expression]]:
    """The ON conjuncts (less an interval join's time bound) and WHERE's, by where they apply:
    to one side before the join (``left``, ``right``), to a LEFT JOIN's left side in ON
    (``left_on``), to the pairing (``on``), or to the joined rows (``after``)."""
    split: dict[str, list[exp.Expression]] = {"left": [], "right": [], "on": [], "after": [], "left_on": []}
    for conjunct in on:
        read = _aliases(conjunct)
        if read == {right}:
            split["right"].append(conjunct)
        elif read == {left}:
            split["left_on" if outer else "left"].append(conjunct)
        else:
            split["on"].append(conjunct)
        pair = _equated(conjunct, left, right) if interval_join else None
        if pair is not None:
            # Spark's stream-stream join would pair a NULL key with a NULL key.
            split["left_on" if outer else "left"].append(_not_null(pair[0]))
            split["right"].append(_not_null(pair[1]))
    for conjunct in _conjuncts(where.this) if where is not None else []:
        read = _aliases(conjunct)
        if read == {left}:
            split["left"].append(conjunct)
        elif read == {right} and not outer:
            split["right"].append(conjunct)
        else:
            split["after"].append(conjunct)
    return split


def _conjuncts(condition: exp.Expression) -> list[exp.Expression]:
    while isinstance(condition, exp.Paren):
        condition = condition.this
    return list(condition.flatten()) if isinstance(condition, exp.And) else [condition]


def _join_type(join: exp.Join) -> bool:
    """True for LEFT [OUTER] JOIN, False for [INNER] JOIN; anything else is refused."""
    side, kind = (join.args.get("side") or "").upper(), (join.args.get("kind") or "").upper()
    if join.args.get("method") or kind in ("CROSS", "SEMI", "ANTI") or side in ("RIGHT", "FULL"):
        words = " ".join(w for w in (join.args.get("method") or "", side, kind) if w)
        raise RejectedInput(f"{words} JOIN is not supported: use JOIN (inner) or LEFT JOIN")
    return side == "LEFT"


def _alias(table: exp.Table, stream: bool) -> str:
    if stream and (table.name.lower() != SOURCE or table.args.get("db")):
        raise RejectedInput(f"a join rule reads FROM {SOURCE}, not {table.sql(dialect=DIALECT)}")
    return table.alias or table.name


def _check_qualified(path: tuple[str, ...], node: exp.Expression, sides: dict[str, bool]) -> None:
    alias, rest = path[0], path[1:]
    clause = "ON" if node.find_ancestor(exp.Join) is not None else "SELECT" if node.find_ancestor(
        exp.Where) is None else "WHERE"
    if alias not in sides or not rest:
        raise RejectedInput(
            f"{clause}: {key_name(path)} is not qualified by a side of the join; write "
            f"{' or '.join(a + '.' + key_name(path[1:] or path) for a in sides)}{located(node)}"
        )
    if sides[alias]:
        check_column(rest, clause)
    elif rest != (REFERENCE_KEY,) and (rest[0] != DATA or len(rest) < 2):
        raise RejectedInput(
            f"{clause}: unknown column {key_name(path)}; a reference table has {alias}.{REFERENCE_KEY} and "
            f"{alias}.data.<path>{located(node)}"
        )
    elif rest[0] == DATA:
        check_column(rest, clause)


def _aliases(node: exp.Expression) -> set[str]:
    return {path[0] for path, _ in column_paths(node)}


def _table_key(conjuncts: list[exp.Expression], left: str, right: str) -> exp.Expression:
    for conjunct in conjuncts:
        if isinstance(conjunct, exp.EQ):
            for mine, theirs in ((conjunct.this, conjunct.expression), (conjunct.expression, conjunct.this)):
                if isinstance(mine, exp.Column) and [p.name for p in mine.parts] == [right, REFERENCE_KEY] \
                        and _aliases(theirs) == {left}:
                    return theirs
    raise RejectedInput(
        f"ON: a join with a reference table looks rows up by key: write ON {right}.{REFERENCE_KEY} = "
        f"<an expression of {left}'s columns>, e.g. {right}.{REFERENCE_KEY} = {left}.data.customer"
    )


def _equated(conjunct: exp.Expression, left: str, right: str) -> tuple[exp.Expression, exp.Expression] | None:
    """(the left side's expression, the right side's) of an equality between the two sides."""
    if not isinstance(conjunct, exp.EQ):
        return None
    sides = (_aliases(conjunct.this), _aliases(conjunct.expression))
    if sides == ({left}, {right}):
        return conjunct.this, conjunct.expression
    if sides == ({right}, {left}):
        return conjunct.expression, conjunct.this
    return None


def _not_null(node: exp.Expression) -> exp.Expression:
    return exp.Not(this=exp.Is(this=node.copy(), expression=exp.Null()))


@dataclass(frozen=True, slots=True)
class _End:
    """One end of an interval join's bound: ``a.event_time + offset``, excluded if strict."""

    offset: timedelta
    strict: bool

    def describe(self, left: str, lower: bool) -> str:
        relation = ("after" if self.strict else "at or after") if lower else ("before" if self.strict else "at or before")
        amount = "" if not self.offset else f" {'-' if self.offset < timedelta(0) else '+'} {abs(self.offset)}"
        return f"{relation} {left}.{EVENT_TIME}{amount}"


_MICROSECOND = timedelta(microseconds=1)


def _interval_bound(conjuncts: list[exp.Expression], left: str, right: str
                    ) -> tuple[list[exp.Expression], exp.Expression, _End, _End]:
    """The conjuncts that bound ``right.event_time`` around ``left.event_time``, the left
    side's key (of the first equality between the sides), and the bound's two ends."""
    key = next((pair[0] for pair in (_equated(c, left, right) for c in conjuncts) if pair is not None), None)
    if key is None:
        raise RejectedInput(
            f"ON: an interval join pairs events by key: add {left}.<column> = {right}.<column>, "
            f"e.g. {left}.data.order = {right}.data.order"
        )
    used: list[exp.Expression] = []
    lower: _End | None = None
    upper: _End | None = None
    for conjunct in conjuncts:
        if isinstance(conjunct, exp.Between) and _is_time(conjunct.this, right):
            lower = _End(_offset(conjunct.args["low"], left), strict=False)
            upper = _End(_offset(conjunct.args["high"], left), strict=False)
            used.append(conjunct)
            continue
        bounds = _inequality(conjunct, left, right)
        if bounds is not None:
            low, high = bounds
            lower = low if low is not None else lower
            upper = high if high is not None else upper
            used.append(conjunct)
    if lower is None or upper is None:
        raise RejectedInput(
            f"ON: an interval join needs a time bound on both ends, such as {right}.{EVENT_TIME} BETWEEN "
            f"{left}.{EVENT_TIME} AND {left}.{EVENT_TIME} + INTERVAL '10' MINUTE: it is what lets the join "
            "forget events"
        )
    # Event times are whole microseconds: a strict end excludes one microsecond.
    if upper.offset - upper.strict * _MICROSECOND < lower.offset + lower.strict * _MICROSECOND:
        raise RejectedInput(f"ON: the time bound is empty: no {right}.{EVENT_TIME} is {lower.describe(left, True)} "
                            f"and {upper.describe(left, False)}")
    return used, key, lower, upper


def _is_time(node: exp.Expression, alias: str) -> bool:
    return isinstance(node, exp.Column) and [p.name for p in node.parts] == [alias, EVENT_TIME]


def _offset(node: exp.Expression, left: str) -> timedelta:
    """``a.event_time``, ``a.event_time + INTERVAL ...`` or ``a.event_time - INTERVAL ...``."""
    if _is_time(node, left):
        return timedelta(0)
    if isinstance(node, (exp.Add, exp.Sub)) and _is_time(node.this, left) \
            and isinstance(node.expression, exp.Interval):
        amount = interval(node.expression, "ON")
        return amount if isinstance(node, exp.Add) else -amount
    raise RejectedInput(
        f"ON: {node.sql(dialect=DIALECT)} is not {left}.{EVENT_TIME} or {left}.{EVENT_TIME} ± INTERVAL "
        f"'<n>' <unit>{located(node)}"
    )


def _inequality(conjunct: exp.Expression, left: str, right: str) -> tuple[_End | None, _End | None] | None:
    """(lower, upper) from ``b.event_time >= a.event_time + x`` and its mirror forms; None
    for a conjunct that is not such a comparison."""
    if not isinstance(conjunct, (exp.GT, exp.GTE, exp.LT, exp.LTE)):
        return None
    this, other = conjunct.this, conjunct.expression
    at_least = isinstance(conjunct, (exp.GT, exp.GTE))
    if _is_time(other, right):
        this, other, at_least = other, this, not at_least
    if not _is_time(this, right) or not _aliases(other) == {left}:
        return None
    end = _End(_offset(other, left), strict=isinstance(conjunct, (exp.GT, exp.LT)))
    return (end, None) if at_least else (None, end)


def _spark_interval(offset: timedelta) -> str:
    """Spark's literal for ``offset``, to the microsecond, in plain decimal digits (a float's
    ``5e-05`` is no interval Spark can read)."""
    micros = offset // _MICROSECOND
    seconds, fraction = divmod(abs(micros), 1_000_000)
    return f"INTERVAL '{'-' if micros < 0 else ''}{seconds}.{fraction:06d}' SECOND"


def _and(parts: list[str]) -> str:
    return " AND ".join(f"({part})" for part in parts)


def _select(statement: exp.Select) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    taken: set[str] = set()
    for item in statement.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
            raise RejectedInput("SELECT *: name the columns a join rule outputs (e.id, r.data.tier AS tier)")
        name = output_name(item)
        if name in taken:
            raise RejectedInput(f"SELECT: two output columns are named {name}; rename one with AS")
        taken.add(name)
        out.append((name, _spark(item.this if isinstance(item, exp.Alias) else item)))
    return tuple(out)


def _spark(node: exp.Expression) -> str:
    """The node as Spark SQL over the aliased sides, ``data.*`` read out of the VARIANT."""
    copy = node.copy()
    replacements = []
    for path, column in column_paths(copy):
        alias, rest = path[0], path[1:]
        if rest[0] == DATA and len(rest) > 1:
            replacement: exp.Expression = exp.Anonymous(this="try_variant_get", expressions=[
                exp.column(DATA, table=alias, quoted=True), exp.Literal.string(json_path(rest[1:])),
                exp.Literal.string(data_type(column))])
        else:
            replacement = exp.column(rest[0], table=alias, quoted=True)
        replacements.append((column, replacement))
    for column, replacement in replacements:
        if column is copy:
            copy = replacement
        else:
            column.replace(replacement)
    return copy.sql(dialect="spark")


__all__ = ["JoinKind", "JoinSpec", "REFERENCE_COLUMNS", "REFERENCE_KEY", "REFERENCE_SCHEMA", "compile_join"]
