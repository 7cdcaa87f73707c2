"""A MATCH_RECOGNIZE rule, read from SQL into a frozen ``PatternSpec``.

The accepted shape is the Flink SQL subset and a little more::

    SELECT <* | partition columns and measures>
    FROM events MATCH_RECOGNIZE (
      [PARTITION BY col, ...]
      ORDER BY <event-time column> [, col [NULLS FIRST | NULLS LAST], ...]
      [MEASURES expr AS name, ...]
      [ONE ROW PER MATCH]
      [AFTER MATCH SKIP PAST LAST ROW | TO NEXT ROW | TO FIRST v | TO LAST v]
      PATTERN (<row pattern>)
      [WITHIN INTERVAL '<n>' <unit>]
      DEFINE v AS condition, ...
    ) [AS alias]
    [WHERE <condition on the partition columns and measures>]

The WHERE decides which matches are output, after matching: a match it drops still ends
where it ends, and AFTER MATCH SKIP goes on from there, as the standard says of a query
around MATCH_RECOGNIZE. ``AFTER MATCH SKIP TO v`` is the standard's shorthand for ``TO
LAST v``.

sqlglot's Snowflake dialect parses the clause; the PATTERN comes back as text for
``wayline.rules.pattern``, and DEFINE and MEASURES as trees for
``wayline.rules.expression``. Every problem becomes a ``RejectedInput`` that names the
clause and, where the parser knows it, the line and column.

AFTER MATCH SKIP TO FIRST/LAST v fails at run time in the standard when v is not in the
match or the skip would restart at the match's first row. Wayline checks both on the
automaton when the rule is submitted and rejects a rule for which either can happen, so a
deployed rule never fails that way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from wayline.core.errors import RejectedInput
from wayline.rules.automaton import Automaton, compile_automaton
from wayline.rules.expression import (
    DIALECT,
    ColumnPath,
    Conditions,
    Define,
    Measure,
    compile_defines,
    compile_measure,
    compile_row_condition,
    interval,
    located,
    mark_written_names,
    parse_statements,
)
from wayline.rules.pattern import Pattern, parse_pattern, variables

SOURCE = "events"

_SELECT_PARTS = frozenset({"expressions", "from_", "match", "where"})


class SkipTo(StrEnum):
    PAST_LAST_ROW = "PAST LAST ROW"
    NEXT_ROW = "TO NEXT ROW"
    FIRST = "TO FIRST"
    LAST = "TO LAST"


@dataclass(frozen=True, slots=True)
class AfterMatchSkip:
    to: SkipTo = SkipTo.PAST_LAST_ROW
    variable: str | None = None

    def __str__(self) -> str:
        return f"AFTER MATCH SKIP {self.to}" + (f" {self.variable}" if self.variable else "")


@dataclass(frozen=True, slots=True)
class OutputColumn:
    """One column of the rule's output: ``name``, taken from a partition key or measure ``source``."""

    name: str
    source: str


@dataclass(frozen=True)
class PatternSpec:
    """Everything a matcher needs to run one MATCH_RECOGNIZE rule, compiled once per rule."""

    sql: str
    partition_by: tuple[ColumnPath, ...]
    order_by: ColumnPath
    measures: tuple[Measure, ...]
    skip: AfterMatchSkip
    pattern: Pattern
    within: timedelta | None
    defines: tuple[Define, ...]
    select: tuple[OutputColumn, ...]
    conditions: Conditions = field(compare=False, repr=False)
    automaton: Automaton = field(compare=False, repr=False)
    # ORDER BY's columns after the event-time column, ascending, each with whether NULLs
    # come first: they order the rows of one event time.
    then_by: tuple[tuple[ColumnPath, bool], ...] = ()
    where: str | None = None  # the WHERE around MATCH_RECOGNIZE, over the output columns
    where_test: Callable[[Mapping[str, Any]], Any] | None = field(default=None, compare=False, repr=False)

    @property
    def output_names(self) -> tuple[str, ...]:
        """The columns of a match's output row: the partition columns, then the measures."""
        return tuple(path[-1] for path in self.partition_by) + tuple(measure.name for measure in self.measures)

    def keeps(self, output: Mapping[str, Any]) -> bool:
        """Whether the WHERE around MATCH_RECOGNIZE keeps a match whose output row is ``output``."""
        return self.where_test is None or self.where_test(output) is True

    @property
    def variables(self) -> tuple[str, ...]:
        return self.conditions.variables

    @property
    def columns(self) -> frozenset[ColumnPath]:
        """Every column path the rule reads, for checking against the event schema."""
        return frozenset({*self.partition_by, self.order_by, *(path for path, _ in self.then_by),
                          *self.conditions.columns,
                          *(path for measure in self.measures for path in measure.columns)})

    @property
    def numbers_matches(self) -> bool:
        """Whether a measure reads MATCH_NUMBER(), so each key's count of matches is kept."""
        return any(measure.numbered for measure in self.measures)

    @property
    def lookback(self) -> int:
        """How many rows before a match PREV may read, in DEFINE or MEASURES.

        A DEFINE's PREV reads before the match only if its variable can sit closer to the
        match's first row than PREV's offset: in ``PATTERN (A B+)`` with ``B AS B.price <
        PREV(B.price)`` it never does, so no row before a match need be kept, and a
        partition with no live search keeps nothing at all.
        """
        first = self.automaton.first_positions()
        defines = [
            self.conditions.lookback if back is None else max(0, back - (first[variable] or 0))
            for variable, back in enumerate(self.conditions.row_lookbacks)
        ]
        return max([0, *defines, *(measure.lookback for measure in self.measures)])


def parse_match_recognize(sql: str) -> PatternSpec:
    """Read a pattern rule, or raise ``RejectedInput`` saying what is wrong and where."""
    text, within = _take_within(sql)
    text, skip_to = _take_skip_to(text)
    statement = _parse(text)
    mark_written_names(statement, text)
    match = statement.args.get("match")
    if not isinstance(match, exp.MatchRecognize):
        raise RejectedInput(f"a pattern rule is SELECT ... FROM {SOURCE} MATCH_RECOGNIZE (...)")
    _check_select(statement)

    pattern_text = match.args.get("pattern")
    if pattern_text is None:
        raise RejectedInput("MATCH_RECOGNIZE needs a PATTERN")
    pattern = parse_pattern(pattern_text.name)
    names = variables(pattern)

    partition_by = tuple(_column_path(node, "PARTITION BY") for node in match.args.get("partition_by") or [])
    order_by, then_by = _order_by(match.args.get("order"))
    _check_rows_per_match(match.args.get("rows"))
    skip = skip_to or _skip(match.args.get("after"))

    definitions = [(_identifier(alias.args["alias"]), alias.this) for alias in match.args.get("define") or []]
    conditions = compile_defines(names, definitions)
    measures = _measures(match.args.get("measures") or [], names, partition_by)
    automaton = compile_automaton(pattern, names)
    _check_skip(skip, automaton)
    where = statement.args.get("where")
    outputs = tuple(path[-1] for path in partition_by) + tuple(measure.name for measure in measures)

    return PatternSpec(
        sql=sql,
        partition_by=partition_by,
        order_by=order_by,
        measures=measures,
        skip=skip,
        pattern=pattern,
        within=within,
        defines=conditions.defines,
        select=_select(statement, match, partition_by, measures),
        conditions=conditions,
        automaton=automaton,
        then_by=then_by,
        where=where.this.sql(dialect=DIALECT) if where is not None else None,
        where_test=_where(where.this, match.alias, outputs) if where is not None else None,
    )


def _take_within(sql: str) -> tuple[str, timedelta | None]:
    """Cut ``WITHIN <interval>`` out of the SQL; sqlglot does not know this Flink clause.

    The clause sits between PATTERN's closing parenthesis and DEFINE (or the end of
    MATCH_RECOGNIZE). It is blanked out with spaces, not removed, so the line and column
    of everything sqlglot reports later still point into the text the user wrote.
    """
    try:
        tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(sql)
    except TokenError as exc:
        raise RejectedInput(f"SQL syntax error: {exc}") from exc
    close = _pattern_end(tokens)
    if close is None or close + 1 >= len(tokens) or not _is_word(tokens[close + 1], "WITHIN"):
        return sql, None
    keyword = tokens[close + 1]
    end = close + 2
    depth = 0
    while end < len(tokens):
        token = tokens[end]
        if depth == 0 and (_is_word(token, "DEFINE") or token.token_type == TokenType.R_PAREN):
            break
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(token.token_type, 0)
        end += 1
    where = f"line {keyword.line}, column {keyword.col - len(keyword.text) + 1}"
    if end == close + 2:
        raise RejectedInput(f"WITHIN needs an interval, e.g. WITHIN INTERVAL '5' MINUTE ({where})")
    begin = tokens[close + 2].start
    clause = sql[begin:tokens[end - 1].end + 1]
    try:
        # Padded so that positions in the interval are positions in the rule.
        node = sqlglot.parse_one(_blank(sql[:begin]) + clause, read=DIALECT)
    except (ParseError, TokenError):
        node = None
    if not isinstance(node, exp.Interval):
        raise RejectedInput(f"WITHIN {clause}: expected an interval such as INTERVAL '5' MINUTE ({where})")
    within = interval(node, "WITHIN")
    if within <= timedelta(0):
        raise RejectedInput(f"WITHIN {clause}: the interval must be positive ({where})")
    start = keyword.start
    stop = tokens[end].start if end < len(tokens) else len(sql)
    return sql[:start] + _blank(sql[start:stop]) + sql[stop:], within


def _take_skip_to(sql: str) -> tuple[str, AfterMatchSkip | None]:
    """Cut ``AFTER MATCH SKIP TO v`` out of the SQL (sqlglot knows only ``TO FIRST v`` and
    ``TO LAST v``), blanked as WITHIN is; the standard reads it as ``TO LAST v``."""
    tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(sql)
    for index in range(len(tokens) - 4):
        words = tokens[index:index + 5]
        if all(_is_word(token, word) for token, word in zip(words, ("AFTER", "MATCH", "SKIP", "TO"), strict=False)) \
                and words[4].text.upper() not in ("FIRST", "LAST", "NEXT", "PAST") \
                and words[4].token_type in (TokenType.VAR, TokenType.IDENTIFIER):
            name = words[4].text if words[4].token_type == TokenType.IDENTIFIER else words[4].text.upper()
            start, stop = words[0].start, words[4].end + 1
            return sql[:start] + _blank(sql[start:stop]) + sql[stop:], AfterMatchSkip(SkipTo.LAST, name)
    return sql, None


def _is_word(token: Token, word: str) -> bool:
    return token.token_type != TokenType.STRING and token.text.upper() == word


def _blank(text: str) -> str:
    return re.sub(r"[^\n]", " ", text)


def _pattern_end(tokens: list[Token]) -> int | None:
    """The index of the parenthesis closing ``PATTERN (``, if there is one."""
    for index, token in enumerate(tokens[:-1]):
        if _is_word(token, "PATTERN") and tokens[index + 1].token_type == TokenType.L_PAREN:
            depth = 0
            for position in range(index + 1, len(tokens)):
                kind = tokens[position].token_type
                depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(kind, 0)
                if depth == 0:
                    return position
            return None
    return None


def _parse(sql: str) -> exp.Expression:
    found = parse_statements(sql)
    if len(found) != 1:
        raise RejectedInput(f"a rule is exactly one SELECT statement, not {len(found)}")
    statement = found[0]
    if not isinstance(statement, exp.Select):
        raise RejectedInput(f"a pattern rule is SELECT ... FROM {SOURCE} MATCH_RECOGNIZE (...)")
    return statement


def _check_select(statement: exp.Select) -> None:
    extra = sorted(key for key, value in statement.args.items() if value and key not in _SELECT_PARTS)
    if extra:
        clauses = ", ".join(key.upper().rstrip("_") for key in extra)
        raise RejectedInput(f"{clauses} is not supported in a MATCH_RECOGNIZE rule")
    source = statement.args["from_"].this
    if not isinstance(source, exp.Table) or source.name.lower() != SOURCE or source.args.get("db"):
        raise RejectedInput(f"a pattern rule reads FROM {SOURCE}, not {source.sql(dialect=DIALECT)}")


def _identifier(node: exp.Expression) -> str:
    return node.name if node.args.get("quoted") else node.name.upper()


def _column_path(node: exp.Expression, clause: str) -> ColumnPath:
    parts: list[str] = []
    while isinstance(node, exp.Dot):
        parts.insert(0, node.expression.name)
        node = node.this
    if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star):
        raise RejectedInput(f"{clause}: expected a column, found {node.sql(dialect=DIALECT)}")
    return tuple(part.name for part in node.parts) + tuple(parts)


def _order_by(order: exp.Order | None) -> tuple[ColumnPath, tuple[tuple[ColumnPath, bool], ...]]:
    """The event-time column, and the columns that order the rows of one time."""
    keys = order.expressions if order else []
    if not keys or keys[0].args.get("desc"):
        raise RejectedInput(
            "MATCH_RECOGNIZE needs ORDER BY the event-time column, ascending (then more columns, ascending, "
            "to order rows of one time)"
        )
    for key in keys[1:]:
        if key.args.get("desc"):
            raise RejectedInput(f"ORDER BY {key.sql(dialect=DIALECT)}: the columns after the event-time column "
                                f"order rows of one time, ascending; DESC is not supported{located(key)}")
    then_by = tuple((_column_path(key.this, "ORDER BY"), bool(key.args.get("nulls_first"))) for key in keys[1:])
    return _column_path(keys[0].this, "ORDER BY"), then_by


def _check_rows_per_match(rows: exp.Expression | None) -> None:
    if rows is not None and rows.name != "ONE ROW PER MATCH":
        raise RejectedInput(f"{rows.name} is not supported; use ONE ROW PER MATCH")


def _skip(after: exp.Expression | None) -> AfterMatchSkip:
    if after is None:
        return AfterMatchSkip()
    words = after.name.split()[3:]  # after "AFTER MATCH SKIP"
    phrase = " ".join(words[:2]).upper()
    if phrase in (SkipTo.FIRST, SkipTo.LAST):
        return AfterMatchSkip(SkipTo(phrase), words[2].upper())
    if " ".join(words).upper() in (SkipTo.PAST_LAST_ROW, SkipTo.NEXT_ROW):
        return AfterMatchSkip(SkipTo(" ".join(words).upper()))
    raise RejectedInput(f"{after.name} is not supported")


def _check_skip(skip: AfterMatchSkip, automaton: Automaton) -> None:
    variable = skip.variable
    if variable is None:
        return
    if variable not in automaton.variables:
        raise RejectedInput(f"{skip}: {variable} does not appear in the PATTERN")
    if automaton.may_omit(variable):
        raise RejectedInput(
            f"{skip}: a match may contain no {variable} row, and then there is no row to skip to"
        )
    at_first_row = (automaton.may_start_with(variable) if skip.to == SkipTo.FIRST
                    else automaton.may_start_with_only(variable))
    if at_first_row:
        raise RejectedInput(
            f"{skip}: that row may be the match's first row, so matching would restart where it "
            "started and never advance"
        )


def _where(condition: exp.Expression, alias: str, outputs: tuple[str, ...]) -> Callable[[Mapping[str, Any]], Any]:
    """The WHERE around MATCH_RECOGNIZE as a test of an output row; it reads the output
    columns, by name or qualified by the MATCH_RECOGNIZE's alias."""
    for column in condition.find_all(exp.Column):
        qualified_elsewhere = column.args.get("db") or (column.table and column.table != alias)
        if isinstance(column.parent, exp.Dot) or isinstance(column.this, exp.Star) or qualified_elsewhere \
                or column.name not in outputs:
            raise RejectedInput(
                f"WHERE {column.sql(dialect=DIALECT)}: the WHERE around MATCH_RECOGNIZE reads its output columns, "
                f"the PARTITION BY columns and measures ({', '.join(outputs) or 'none'}); conditions on the events go in "
                f"DEFINE{located(column)}"
            )
    unqualified = condition.transform(
        lambda node: exp.Column(this=node.this.copy()) if isinstance(node, exp.Column) else node)
    return compile_row_condition(unqualified, "WHERE")


def _measures(nodes: list[exp.Expression], names: tuple[str, ...],
              partition_by: tuple[ColumnPath, ...]) -> tuple[Measure, ...]:
    taken = {path[-1] for path in partition_by}
    measures = []
    for node in nodes:
        expression = node.this
        if not isinstance(expression, exp.Alias):
            raise RejectedInput(f"MEASURES {expression.sql(dialect=DIALECT)}: a measure needs a name (AS name)")
        name = expression.alias
        if name in taken:
            raise RejectedInput(f"MEASURES {name}: the name is already taken by another output column")
        taken.add(name)
        measures.append(compile_measure(name, expression.this, names))
    return tuple(measures)


def _select(statement: exp.Select, match: exp.MatchRecognize, partition_by: tuple[ColumnPath, ...],
            measures: tuple[Measure, ...]) -> tuple[OutputColumn, ...]:
    available = [path[-1] for path in partition_by] + [measure.name for measure in measures]
    alias = match.alias
    columns = []
    for item in statement.expressions:
        if isinstance(item, exp.Star):
            columns.extend(OutputColumn(name, name) for name in available)
            continue
        target = item.this if isinstance(item, exp.Alias) else item
        if not isinstance(target, exp.Column) or isinstance(target.this, exp.Star) or \
                (target.table and target.table != alias) or target.args.get("db"):
            raise RejectedInput(
                f"SELECT {item.sql(dialect=DIALECT)}: select the partition columns or measures "
                f"by name ({', '.join(available)})"
            )
        if target.name not in available:
            raise RejectedInput(
                f"SELECT {item.sql(dialect=DIALECT)}: {target.name} is neither a PARTITION BY column "
                f"nor a measure ({', '.join(available)})"
            )
        columns.append(OutputColumn(item.alias_or_name, target.name))
    return tuple(columns)


__all__ = [
    "SOURCE",
    "AfterMatchSkip",
    "OutputColumn",
    "PatternSpec",
    "SkipTo",
    "parse_match_recognize",
]
