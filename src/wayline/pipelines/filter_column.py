"""Subscription filters (``wayline.registry.filter``) compiled to Spark SQL Columns.

Built from ``pyspark.sql.functions``, never from SQL text, so a filter's values can never
become SQL; the Python evaluator (``evaluate``) gives the same answers, which
``tests/pipelines/test_filter_column.py`` holds these columns to.
"""

from __future__ import annotations

import operator
from functools import reduce

from pyspark.sql import Column
from pyspark.sql import functions as F

from wayline.core.variant import json_path
from wayline.registry.filter import (
    COMPARISONS,
    DATA_FIELD,
    Affix,
    And,
    Compare,
    Exists,
    Filter,
    In,
    Kind,
    Not,
    Or,
    Path,
)


def to_column(filter: Filter) -> Column:
    """A boolean Column over the envelope's columns (by name; `data` a VARIANT), never NULL."""
    match filter:
        case And(items):
            return reduce(operator.and_, map(to_column, items), F.lit(True))
        case Or(items):
            return reduce(operator.or_, map(to_column, items), F.lit(False))
        case Not(item):
            return ~to_column(item)
    # SQL's NULL (unknown) would make NOT and OR disagree with Python: pin each condition to false.
    return F.coalesce(_condition(filter), F.lit(False))


def _condition(filter: Filter) -> Column:
    match filter:
        case Exists(path):
            return _field(path).isNotNull()
        case Compare(path, op, value):
            if value.kind == "null":
                return _absent(path)
            comparison: Column = COMPARISONS[op](_typed(path, value.kind), F.lit(value.raw))
            return comparison
        case In(path, values):
            tests = [_absent(path)] if any(v.kind == "null" for v in values) else []
            kinds = sorted({v.kind for v in values if v.kind != "null"})
            tests += [_typed(path, kind).isin([v.raw for v in values if v.kind == kind]) for kind in kinds]
            return reduce(operator.or_, tests, F.lit(False))
        case Affix(path, "$prefix", text):
            return _typed(path, "string").startswith(text)
        case Affix(path, _, text):
            return _typed(path, "string").endswith(text)
    raise TypeError(f"not a condition: {filter!r}")


def _field(path: Path) -> Column:
    """The envelope column, or for a data path the VARIANT there (SQL NULL when missing)."""
    if path.field != DATA_FIELD:
        return F.col(path.field)
    return F.variant_get(F.col(DATA_FIELD), json_path(path.steps), "variant")


def _absent(path: Path) -> Column:
    found = _field(path)
    return found.isNull() | F.is_variant_null(found) if path.field == DATA_FIELD else found.isNull()


def _typed(path: Path, kind: Kind) -> Column:
    """The value as a SQL value of `kind`'s type, or NULL when it is missing or of another JSON type."""
    found = _field(path)
    if path.field != DATA_FIELD:
        return found  # the parser only lets an envelope column meet values of its own type
    if kind == "string":
        # A cast to string would also take numbers, booleans and objects (as their text);
        # only a JSON string casts to binary, so this is the string and nothing else.
        return F.try_variant_get(found, "$", "binary").cast("string")
    value = F.try_variant_get(found, "$", "double" if kind == "number" else "boolean")
    # Variant casts convert ("5" -> 5.0, 1 -> true), so the JSON type is checked too. The
    # cast succeeds only on scalars, and testing it first keeps schema_of_variant from
    # describing whole objects.
    schema = F.schema_of_variant(found)
    same_type = ~schema.isin("STRING", "BOOLEAN") if kind == "number" else schema == "BOOLEAN"
    return F.when(value.isNotNull() & same_type, value)


__all__ = ["to_column"]
