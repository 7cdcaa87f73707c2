"""A rule's SQL, checked and compiled when it is submitted: ``compile_rule(sql) -> CompiledRule``.

Every rule reads a stream called ``events``: the envelope columns (``EVENT_COLUMNS``) and
any path into the event's JSON ``data`` (``data.amount``, ``data.user.id``), as
``wayline.rules.columns`` names them. Three kinds:

- ``filter``: ``SELECT ... FROM events [WHERE ...]`` — stateless; the job runs it as a
  Spark SQL expression in the JVM (``FilterSpec`` holds the Spark SQL, rendered from the
  checked tree, never pasted from the rule's text);
- ``window``: ``SELECT ... FROM events [WHERE ...] GROUP BY <keys>, window(event_time,
  '<size>'[, '<slide>']) [HAVING ...]`` — tumbling, or hopping when a slide is given — or
  with ``sliding_window(event_time, '<size>')`` (one row per event over its trailing
  interval) or ``session_window(event_time, '<gap>')`` in its place; the window function
  must be there, it is the rule's time bound (``wayline.rules.window``);
- ``pattern``: ``SELECT ... FROM events MATCH_RECOGNIZE (...)`` with a ``WITHIN`` clause,
  its time bound (``wayline.rules.recognize``).

The partition key of a stateful rule is its GROUP BY keys or its PARTITION BY columns:
rules with the same key share one shuffle and one stateful operator in the job.

Checks, each a ``RejectedInput`` naming the problem and, where known, its line and column:
syntax; the kind is one of the three; every column resolves against the envelope; only
the listed functions are called (a rule cannot reach ``reflect()`` or any other Spark
function that runs arbitrary code); a stateful rule has a time bound.

Typing of ``data.*`` in filters (the JSON is a VARIANT in Spark): a path compared with a
number, used in arithmetic or in SUM/AVG/MIN/MAX is read as DOUBLE, compared with a
boolean as BOOLEAN, otherwise as STRING; a bare path in the SELECT list keeps its JSON
value. So two paths ordered against each other (``data.a < data.b``) compare as text,
``'10' < '9'``: the rule compiles, with a warning (``CompiledRule.warnings``) that says
how to compare numbers. A value that does not convert reads as NULL. Pattern rules and the windows that stay
in Python evaluate their expressions on the JSON's own types (``wayline.rules.expression``);
the fixed windows the JVM runs read ``data.*`` as filters do (``wayline.rules.aggregation``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from itertools import pairwise

import sqlglot
from sqlglot import exp
from sqlglot.errors import TokenError

from wayline.core.errors import RejectedInput
from wayline.core.variant import json_path
from wayline.rules.aggregation import WindowAggregation, compile_aggregation
from wayline.rules.columns import (
    DATA,
    EVENT_TIME,
    STAR_COLUMNS,
    check_column,
    column_paths,
    key_name,
    output_name,
    parse_key,
    path_of,
)
from wayline.rules.expression import DIALECT, TOO_DEEP, ColumnPath, check_nesting, located, parse_statements
from wayline.rules.join import JoinSpec, compile_join
from wayline.rules.prefilter import Prefilter, for_condition, for_pattern
from wayline.rules.recognize import SOURCE, PatternSpec, parse_match_recognize
from wayline.rules.spark_sql import check_node, data_type
from wayline.rules.window import WindowSpec
from wayline.rules.window_compiler import compile_window

VARIABLE_REFERENCE = "${"


class RuleKind(StrEnum):
    FILTER = "filter"
    WINDOW = "window"
    PATTERN = "pattern"
    JOIN = "join"


@dataclass(frozen=True, slots=True)
class FilterSpec:
    """A stateless rule as Spark SQL: the condition (None: every event) and the output columns."""

    where: str | None
    select: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class CompiledRule:
    kind: RuleKind
    sql: str
    partition_key: tuple[ColumnPath, ...]
    filter: FilterSpec | None = None
    window: WindowSpec | None = None
    pattern: PatternSpec | None = None
    join: JoinSpec | None = None
    # The rows a stateful rule may use, told apart by string comparisons (None: every row).
    prefilter: Prefilter | None = None
    # A fixed window rule the JVM runs as a streaming aggregation (wayline.rules.aggregation).
    aggregation: WindowAggregation | None = None
    # What the submitter should know: the rule runs, but perhaps not as meant.
    warnings: tuple[str, ...] = ()

    @property
    def stateful(self) -> bool:
        """Whether the rules job's stateful operator runs it (a join runs as its own query)."""
        return self.kind in (RuleKind.WINDOW, RuleKind.PATTERN)

    @property
    def in_processor(self) -> bool:
        """Run by the Python stateful processor: patterns, and windows the JVM does not run."""
        return self.stateful and self.aggregation is None

    @property
    def time_bound(self) -> timedelta | None:
        """How long an event can stay in this rule's state (before lateness)."""
        if self.window is not None:
            return self.window.size
        if self.pattern is not None:
            return self.pattern.within
        if self.join is not None:
            return self.join.time_bound
        return None


def compile_rule(sql: str, partition_key: tuple[ColumnPath, ...] | None = None) -> CompiledRule:
    """Check a rule and compile it, or raise ``RejectedInput`` saying what is wrong and where.

    ``partition_key``, when given, must agree with the key the SQL states (GROUP BY keys or
    PARTITION BY); for a filter it only names the ``subject`` of the output events.
    """
    try:
        return _compile(sql, partition_key)
    except RecursionError:
        # sqlglot's parser recurses per nesting level and can run out before check_nesting sees the tree.
        raise RejectedInput(f"sql: {TOO_DEEP}") from None


def _compile(sql: str, partition_key: tuple[ColumnPath, ...] | None) -> CompiledRule:
    if not sql.strip():
        raise RejectedInput("sql: the rule is empty")
    if VARIABLE_REFERENCE in sql:
        # Spark reads ${env:…}, ${system:…} and ${spark.…} as variables even inside string
        # literals; the job's session turns that off, and the text is refused all the same.
        before = sql[:sql.index(VARIABLE_REFERENCE)]
        line, column = before.count("\n") + 1, len(before) - before.rfind("\n")
        raise RejectedInput(f"sql: '{VARIABLE_REFERENCE}' (line {line}, column {column}) is not allowed in a rule: "
                            "Spark reads it as a variable reference")
    if _mentions_match_recognize(sql):
        rule = _pattern_rule(sql)
    else:
        statement = _parse(sql)
        if statement.args.get("joins"):
            rule = CompiledRule(RuleKind.JOIN, sql, (), join=compile_join(statement),
                                warnings=_text_comparisons(statement))
        elif statement.args.get("group") or any(isinstance(node, exp.AggFunc) for node in statement.walk()):
            window = compile_window(statement, check_column)
            where = statement.args.get("where")
            aggregation = compile_aggregation(statement, window, _spark, check_node)
            # Only the JVM reads data.* as text; the Python path compares the JSON's own values.
            rule = CompiledRule(RuleKind.WINDOW, sql, window.keys, window=window,
                                prefilter=for_condition(where.this if where is not None else None),
                                aggregation=aggregation,
                                warnings=_text_comparisons(statement) if aggregation is not None else ())
        else:
            rule = CompiledRule(RuleKind.FILTER, sql, (), filter=_filter(statement),
                                warnings=_text_comparisons(statement))
    for path in rule.partition_key:
        # The job reads the key back with parse_key and plain dotted paths: identifiers only.
        parse_key(key_name(path))
    if partition_key is not None:
        for path in partition_key:
            check_column(path, "partition_key")
        if rule.stateful and tuple(partition_key) != rule.partition_key:
            stated = ", ".join(map(key_name, rule.partition_key)) or "(none)"
            raise RejectedInput(
                f"partition_key: {', '.join(map(key_name, partition_key)) or '(none)'} differs from the "
                f"key the SQL states ({stated}); leave partition_key out or make them agree"
            )
        if rule.kind == RuleKind.FILTER:
            rule = CompiledRule(rule.kind, sql, tuple(partition_key), filter=rule.filter, warnings=rule.warnings)
        elif rule.kind == RuleKind.JOIN and partition_key:
            raise RejectedInput("partition_key: a join rule's output subject is its join key; leave partition_key out")
    return rule


# -- patterns --------------------------------------------------------------------------------


def _mentions_match_recognize(sql: str) -> bool:
    try:
        tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(sql)
    except TokenError as exc:
        raise RejectedInput(f"SQL syntax error: {exc}") from exc
    return any(token.text.upper() == "MATCH_RECOGNIZE" for token in tokens
               if token.token_type != sqlglot.TokenType.STRING)


def _pattern_rule(sql: str) -> CompiledRule:
    spec = parse_match_recognize(sql)
    if spec.within is None:
        raise RejectedInput(
            "a pattern rule needs a time bound: add WITHIN INTERVAL '<n>' <unit> after PATTERN (...), "
            "or its partial matches could be kept forever"
        )
    if spec.order_by != (EVENT_TIME,):
        raise RejectedInput(
            f"ORDER BY {key_name(spec.order_by)}: a pattern rule orders by {EVENT_TIME}, the column the "
            "watermark follows"
        )
    for path in sorted(spec.columns):
        check_column(path, "MATCH_RECOGNIZE")
    prefilter = for_pattern(((define.variable, define.sql) for define in spec.defines), spec.variables)
    return CompiledRule(RuleKind.PATTERN, sql, spec.partition_by, pattern=spec, prefilter=prefilter)


# -- filters ---------------------------------------------------------------------------------


def _quote_window_calls(sql: str) -> str:
    """``window(`` as a quoted name: sqlglot misreads ``GROUP BY window(...)`` as a clause."""
    tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(sql)
    out, last = [], 0
    for token, following in pairwise(tokens):
        if token.text.lower() == "window" and following.token_type == sqlglot.TokenType.L_PAREN \
                and token.token_type != sqlglot.TokenType.STRING and sql[token.start] != '"':
            out.append(sql[last:token.start])
            out.append('"window"')
            last = token.end + 1
    return "".join(out) + sql[last:]


def _parse(sql: str) -> exp.Select:
    statements = parse_statements(_quote_window_calls(sql))
    if len(statements) != 1 or not isinstance(statements[0], exp.Select):
        raise RejectedInput(
            f"a rule is one SELECT ... FROM {SOURCE} statement (a filter, a GROUP BY window(...) "
            "aggregation or a MATCH_RECOGNIZE pattern)"
        )
    statement = statements[0]
    check_nesting(statement, "sql")
    source = statement.args.get("from_")
    table = source.this if source is not None else None
    if not isinstance(table, exp.Table) or table.name.lower() != SOURCE or table.args.get("db"):
        found = table.sql(dialect=DIALECT) if table is not None else "nothing"
        raise RejectedInput(f"a rule reads FROM {SOURCE} only, not {found}")
    return statement


def _filter(statement: exp.Select) -> FilterSpec:
    extra = sorted(key for key, value in statement.args.items()
                   if value and key not in ("expressions", "from_", "where"))
    if extra:
        clauses = ", ".join(key.upper().rstrip("_") for key in extra)
        raise RejectedInput(f"{clauses} is not supported in a filter rule")
    for node in statement.walk():
        check_node(node)
    for path, node in column_paths(statement):
        check_column(path, "SELECT" if node.find_ancestor(exp.Where) is None else "WHERE")
    where = statement.args.get("where")
    select: list[tuple[str, str]] = []
    taken: set[str] = set()
    for item in statement.expressions:
        if isinstance(item, exp.Star):
            pairs = [(name, name) for name in STAR_COLUMNS]
        else:
            pairs = [(output_name(item), _spark(item.this if isinstance(item, exp.Alias) else item))]
        for name, expression in pairs:
            if name in taken:
                raise RejectedInput(f"SELECT: two output columns are named {name}; rename one with AS")
            taken.add(name)
            select.append((name, expression))
    return FilterSpec(where=_spark(where.this) if where is not None else None, select=tuple(select))


def _text_comparisons(statement: exp.Expression) -> tuple[str, ...]:
    """A warning for each ordering comparison of ``data.*`` paths with each other only:
    Spark reads them as strings there, so ``'10' < '9'``."""
    warnings = []
    for node in statement.walk():
        if isinstance(node, exp.Between):
            operands = [node.this, node.args["low"], node.args["high"]]
        elif isinstance(node, (exp.GT, exp.GTE, exp.LT, exp.LTE)):
            operands = [node.this, node.expression]
        else:
            continue
        if all(_is_data_path(operand) for operand in operands):
            text = node.sql(dialect=DIALECT)
            casts = [f"TRY_CAST({operand.sql(dialect=DIALECT)} AS DOUBLE)" for operand in operands]
            numeric = node.copy()
            for operand, cast in zip([*numeric.iter_expressions()], casts, strict=False):
                operand.replace(sqlglot.parse_one(cast, read=DIALECT))
            warnings.append(
                f"{text}: data.* paths compared with each other are read as strings, so they compare as text "
                f"('10' < '9'); to compare numbers, write {numeric.sql(dialect=DIALECT)}{located(node)}"
            )
    return tuple(warnings)


def _is_data_path(node: exp.Expression) -> bool:
    while isinstance(node, exp.Paren):
        node = node.this
    if not isinstance(node, (exp.Column, exp.Dot)):
        return False
    path = path_of(node)
    # data.<path>, or <alias>.data.<path> in a join rule.
    return (path[0] == DATA and len(path) > 1) or (len(path) > 2 and path[1] == DATA)


def _spark(node: exp.Expression) -> str:
    """The node as Spark SQL, with ``data.*`` paths read out of the VARIANT."""
    copy = node.copy()
    replacements = []
    for path, column in column_paths(copy):
        if path[0] == DATA and len(path) > 1:
            replacements.append((column, _variant_get(path[1:], data_type(column))))
        else:
            replacements.append((column, exp.column(path[0], quoted=True)))
    for column, replacement in replacements:
        if column is copy:
            copy = replacement
        else:
            column.replace(replacement)
    return copy.sql(dialect="spark")


def _variant_get(path: tuple[str, ...], type_name: str) -> exp.Expression:
    return exp.Anonymous(this="try_variant_get", expressions=[
        exp.column(DATA, quoted=True), exp.Literal.string(json_path(path)), exp.Literal.string(type_name)])


__all__ = ["CompiledRule", "FilterSpec", "RuleKind", "compile_rule"]
