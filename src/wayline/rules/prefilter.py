"""Which rows can matter to a stateful rule, read from its current-row conditions alone.

Most rows of a shared stateful group concern only some of its rules: a window rule's
``WHERE type = 'order'`` rejects every other row, and a pattern whose every variable
requires ``type = 'login.failed'`` or ``type = 'login.ok'`` can use no other row in a
match. Deciding that per row and per rule in Python was much of the rules job's time
(docs/benchmarks.md), so each rule carries a ``Prefilter``: the conjuncts of its
conditions that compare a string envelope column of the current row with string
literals (``type = 'x'``, ``'x' = type``, ``V.type IN ('x', 'y')``). Those mean the
same in Python and in pandas or Spark (string equality; NULL is never equal), so the job
evaluates them on a whole batch at once (``wayline.pipelines.rules_processor``) and the engine
hands a rule only the rows it admits.

A prefilter is necessary, not sufficient: a window rule still applies its whole WHERE
to the rows admitted, and a pattern still tests its DEFINEs. A rule with a condition
that has no such conjunct (a pattern variable with no DEFINE, a WHERE on ``data.*``
only) has no prefilter: every row is admitted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp

from wayline.rules.expression import DIALECT

# The envelope columns that are strings in every row, in Python and in Spark alike.
STRING_COLUMNS = frozenset({
    "id", "source", "type", "specversion", "subject", "datacontenttype", "dataschema", "tenantid",
    "subtenantid", "topic",
})

# (column, the values it may take): one conjunct.
Conjunct = tuple[str, frozenset[str]]


@dataclass(frozen=True)
class Prefilter:
    """Rows that may matter: those meeting every conjunct of at least one alternative."""

    alternatives: tuple[tuple[Conjunct, ...], ...]

    def admits(self, row: Mapping[str, Any]) -> bool:
        return any(all(row.get(column) in values for column, values in conjuncts)
                   for conjuncts in self.alternatives)


def for_condition(node: exp.Expression | None, variable: str | None = None) -> Prefilter | None:
    """The prefilter of one condition (a WHERE, or the DEFINE of ``variable``); None: every row."""
    conjuncts = _conjuncts(node, variable) if node is not None else ()
    return Prefilter((conjuncts,)) if conjuncts else None


def for_pattern(defines: Iterable[tuple[str, str]], variables: Sequence[str]) -> Prefilter | None:
    """A pattern's rows: those some variable's DEFINE (``(variable, sql)`` pairs) may accept."""
    by_variable = dict(defines)
    alternatives = []
    for variable in variables:
        sql = by_variable.get(variable)
        conjuncts = _conjuncts(sqlglot.parse_one(sql, read=DIALECT), variable) if sql is not None else ()
        if not conjuncts:
            return None  # this variable may take any row
        alternatives.append(conjuncts)
    return Prefilter(tuple(alternatives))


def _conjuncts(node: exp.Expression, variable: str | None) -> tuple[Conjunct, ...]:
    while isinstance(node, exp.Paren):
        node = node.this
    parts = node.flatten() if isinstance(node, exp.And) else [node]
    out = []
    for part in parts:
        while isinstance(part, exp.Paren):
            part = part.this
        if isinstance(part, exp.And):
            out.extend(_conjuncts(part, variable))
            continue
        found = _string_test(part, variable)
        if found is not None:
            out.append(found)
    return tuple(out)


def _string_test(node: exp.Expression, variable: str | None) -> Conjunct | None:
    if isinstance(node, exp.EQ):
        for column, literal in ((node.this, node.expression), (node.expression, node.this)):
            name = _current_column(column, variable)
            if name is not None and isinstance(literal, exp.Literal) and literal.is_string:
                return name, frozenset({literal.this})
        return None
    if isinstance(node, exp.In) and not node.args.get("query") and not node.args.get("unnest"):
        name = _current_column(node.this, variable)
        if name is not None and node.expressions and all(
                isinstance(item, exp.Literal) and item.is_string for item in node.expressions):
            return name, frozenset(item.this for item in node.expressions)
    return None


def _current_column(node: exp.Expression, variable: str | None) -> str | None:
    """The string envelope column the node reads from the current row, if it is one.

    In a DEFINE a bare column and one qualified by the variable being defined read the
    current row (``wayline.rules.expression``); another variable's qualifier does not.
    """
    if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star):
        return None
    parts = node.parts
    if len(parts) == 2 and variable is not None:
        qualifier = parts[0].name if parts[0].args.get("quoted") else parts[0].name.upper()
        if qualifier != variable:
            return None
        parts = parts[1:]
    if len(parts) != 1 or parts[0].name not in STRING_COLUMNS:
        return None
    return parts[0].name


__all__ = ["Conjunct", "Prefilter", "STRING_COLUMNS", "for_condition", "for_pattern"]
