"""The Spark SQL that filter and join rules compile to: which of it a rule may use, and
how a ``data.*`` path is typed by its use (``wayline.rules.rule`` tells the rule's author)."""

from __future__ import annotations

from sqlglot import exp

from wayline.core.errors import RejectedInput
from wayline.rules.expression import DIALECT, located

_NUMERIC_CONTEXT = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.Neg, exp.Sum, exp.Avg, exp.Min, exp.Max)
_COMPARISON = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between, exp.In)

# The Spark SQL a filter rule may use. Anything else is refused when the rule is submitted.
_ALLOWED_NODES = (
    exp.Select, exp.From, exp.Table, exp.Where, exp.Alias, exp.Star, exp.Column, exp.Dot,
    exp.Identifier, exp.Literal, exp.Boolean, exp.Null, exp.Paren, exp.And, exp.Or, exp.Not,
    exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Add, exp.Sub, exp.Mul, exp.Div,
    exp.Mod, exp.Neg, exp.Is, exp.Between, exp.In, exp.Case, exp.If, exp.Like, exp.ILike,
    exp.Cast, exp.TryCast, exp.DataType, exp.Lower, exp.Upper, exp.Length, exp.Substring,
    exp.Concat, exp.Coalesce, exp.Abs, exp.Round, exp.Floor, exp.Ceil, exp.StartsWith,
    exp.Trim, exp.DPipe, exp.Tuple,
)
_ALLOWED_FUNCTIONS = frozenset({"ENDSWITH", "CONTAINS", "STARTSWITH", "NVL", "IFNULL", "GREATEST", "LEAST"})


def check_node(node: exp.Expression) -> None:
    if isinstance(node, exp.Anonymous):
        if node.name.upper() not in _ALLOWED_FUNCTIONS:
            raise RejectedInput(f"function {node.name.upper()}() is not supported in a rule{located(node)}")
        return
    if not isinstance(node, _ALLOWED_NODES):
        what = f"function {node.sql_name()}()" if isinstance(node, exp.Func) else node.sql(dialect=DIALECT)
        raise RejectedInput(f"{what} is not supported in a filter rule{located(node)}")


def data_type(column: exp.Expression) -> str:
    parent = column.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    if parent is None or isinstance(parent, (exp.Alias, exp.Select)):
        return "variant"
    if isinstance(parent, _NUMERIC_CONTEXT):
        return "double"
    if isinstance(parent, _COMPARISON):
        others = [child for child in parent.iter_expressions() if child is not column]
        others += list(parent.expressions) if isinstance(parent, exp.In) else []
        for other in others:
            if isinstance(other, exp.Boolean):
                return "boolean"
            if isinstance(other, exp.Literal) and not other.is_string:
                return "double"
            if isinstance(other, exp.Neg) and isinstance(other.this, exp.Literal):
                return "double"
    return "string"


__all__ = ["check_node", "data_type"]
