"""Subscription content filters: a JSON operator language, checked once and run in Spark or Python.

A subscription may carry a filter on the content of the events it receives. The API
validates it with `parse_filter`; the pipelines compile it into a Spark SQL `Column`
(`wayline.pipelines.filter_column`, built from `pyspark.sql.functions`, never from SQL
text); `evaluate` gives the same answer in plain Python, which the tests hold the
Spark columns to.

Language reference
==================

A filter is a JSON object. Each key is either a *field* with a condition on it, or a
logical operator; an event matches when every key of the object holds. ``{}`` matches
every event::

    {"data.amount": {"$gte": 100},
     "$or": [{"data.currency": "EUR"}, {"data.currency": {"$in": ["USD", "GBP"]}}],
     "subject": {"$prefix": "order/"}}

Fields
------
``id``, ``source``, ``type``, ``subject``, ``tenantid``, ``subtenantid``
    The event's CloudEvents attributes. They are strings, compared with strings.
``time``
    The event time, compared with RFC 3339 timestamps that have an offset
    (``"2025-01-31T12:00:00Z"``, ``"2025-01-31T13:00:00.250+01:00"``); to the microsecond.
``data.<path>``
    A value inside the event's JSON payload. ``.key`` steps into an object member and
    ``[n]`` into the n-th element (from 0) of an array: ``data.order.items[0].sku``.
    A key is any text without ``.``, ``[`` and ``]`` that does not contain both ``'``
    and ``"`` (Spark's JSON paths cannot quote such a key); keys are case-sensitive.
    ``[n]`` only indexes arrays and ``.key`` only opens objects: ``data.items.0`` is the
    member named ``"0"``, not the first element. There is no wildcard and no implicit
    "any element of an array".

Conditions
----------
A field's value is either a bare value, meaning ``$eq``, or an object of operators,
all of which must hold: ``{"data.amount": {"$gt": 0, "$lte": 100}}``.

``$eq v`` / ``$neq v``
    Equal / not equal. ``$neq`` is exactly "not ``$eq``".
``$gt $gte $lt $lte v``
    Order: numbers by value, strings by Unicode code point (so dates written alike, such
    as ``"2025-01-31"``, order by time), ``time`` by instant. ``v`` is a number or a
    string (a timestamp for ``time``).
``$in [v, ...]`` / ``$nin [v, ...]``
    Equal to one of the values / to none of them (at most 500 values).
``$prefix s`` / ``$suffix s``
    A string that starts / ends with ``s`` (case-sensitive).
``$exists true|false``
    The field is present / absent (see below: a JSON ``null`` is present).
``$not {operators}``
    The operators do not all hold: ``{"data.amount": {"$not": {"$gt": 100}}}``.

Logical operators, beside fields in any filter object:
``$and [filter, ...]``, ``$or [filter, ...]`` (non-empty lists) and ``$not filter``.

Types
-----
Values are JSON scalars: strings, numbers, ``true``/``false`` and ``null``; an object or
array cannot be compared whole (compare its members by path). Comparisons never convert:
``5`` is not ``"5"`` and ``true`` is not ``1``; a field holding another type than the
value does not match (so ``$neq`` and ``$nin`` do match it). Strings compare exactly:
case-sensitive, without Unicode normalisation. Numbers compare as 64-bit
floats, as in JavaScript: integers beyond ±2^53 are rounded, so compare long numeric ids
as strings. Booleans and ``null`` cannot be ordered. The envelope's string fields take
only strings (or ``null``), and ``time`` only timestamps (or ``null``).

Missing and null
----------------
A field is *missing* when the event has no such attribute, or the path leads nowhere
(an absent key, an index past the end, a step into a scalar, no ``data`` at all). A
present JSON ``null`` is not missing. As in MongoDB:

- ``$eq null`` (and ``null`` inside ``$in``) matches a missing field or a null;
  ``$neq null`` matches a present, non-null value.
- Every other ``$eq``, ``$in``, ``$gt``…, ``$prefix``, ``$suffix`` is false on a missing
  or null field; so ``$neq``, ``$nin`` and ``$not`` of them are true there.
- ``$exists: true`` is true for a present field, even if it holds ``null``.

A filter is always true or false, never unknown: the compiled column is never NULL, and
Spark and Python agree on every event.

Limits
------
At most ``registry.max_filter_bytes`` bytes of JSON (64 KiB by default) and
``registry.max_filter_depth`` nested filter objects (8 by default; 32 at most), 100 operators (each operator and each bare value counts
once), 500 values in one ``$in``/``$nin``, strings of 1,000 characters, and
paths of 256 characters or 32 steps. An invalid filter raises `RejectedInput` naming the
place and the problem, e.g. ``$or[1].data.currency: unknown operator "$inn"``.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal, TypeAlias

from wayline.core.envelope import parse_time
from wayline.core.errors import RejectedInput
from wayline.core.settings import Settings

STRING_FIELDS = ("id", "source", "type", "subject", "tenantid", "subtenantid")
TIME_FIELD = "time"
DATA_FIELD = "data"

MAX_DEPTH = 8
# The deepest any deployment may allow (registry.max_filter_depth): stored filters parse with it.
DEEPEST = 32
MAX_OPERATORS = 100
MAX_LIST_VALUES = 500
MAX_STRING_LENGTH = 1000
MAX_PATH_LENGTH = 256
MAX_PATH_STEPS = 32

Kind = Literal["null", "boolean", "number", "string", "time"]
CompareOp = Literal["$eq", "$gt", "$gte", "$lt", "$lte"]
AffixOp = Literal["$prefix", "$suffix"]


@dataclass(frozen=True)
class Path:
    """An envelope field, or `data` with the keys (str) and array indexes (int) below it."""

    field: str
    steps: tuple[str | int, ...] = ()

    def __str__(self) -> str:
        return self.field + "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in self.steps)


@dataclass(frozen=True)
class Value:
    """A literal and its JSON type: the type keeps `true` and `1` apart, which Python's `==` does not."""

    kind: Kind
    raw: str | float | bool | datetime | None


@dataclass(frozen=True)
class Compare:
    path: Path
    op: CompareOp
    value: Value


@dataclass(frozen=True)
class In:
    path: Path
    values: tuple[Value, ...]


@dataclass(frozen=True)
class Exists:
    path: Path


@dataclass(frozen=True)
class Affix:
    path: Path
    op: AffixOp
    text: str


@dataclass(frozen=True)
class And:
    items: tuple[Filter, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[Filter, ...]


@dataclass(frozen=True)
class Not:
    item: Filter


# `$neq`, `$nin` and `$exists: false` parse to `Not(...)`, so each is by construction
# the exact negation of its counterpart, in Python and in Spark alike.
Filter: TypeAlias = Compare | In | Exists | Affix | And | Or | Not

_COMPARE_OPS: tuple[CompareOp, ...] = ("$eq", "$gt", "$gte", "$lt", "$lte")
_FIELD_OPS = (*_COMPARE_OPS, "$neq", "$in", "$nin", "$exists", "$prefix", "$suffix", "$not")
# One table for both evaluators: the `operator` functions work on Python values and on Columns.
COMPARISONS: Mapping[CompareOp, Callable[[Any, Any], Any]] = {
    "$eq": operator.eq, "$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le,
}
_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d{1,6})\]")


# --- Parsing -------------------------------------------------------------------------


@dataclass(frozen=True)
class FilterLimits:
    """How large a new filter may be (registry.max_filter_bytes, registry.max_filter_depth).

    The per-operator limits alone multiply out to megabytes, and every filter rides in each
    delivery job's registry snapshot: the whole filter is capped too."""

    max_bytes: int
    max_depth: int

    @classmethod
    def from_settings(cls, settings: Settings) -> FilterLimits:
        return cls(settings.registry.max_filter_bytes, settings.registry.max_filter_depth)

    def check(self, obj: object) -> Filter:
        """Parse a filter submitted now, within these limits."""
        size = len(json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))
        if size > self.max_bytes:
            raise _rejected("", f"the filter is {size:,} bytes of JSON; at most {self.max_bytes:,} bytes are allowed "
                                "(split it across subscriptions, or filter on fewer, shorter values)")
        return parse_filter(obj, self.max_depth)


def parse_filter(obj: object, max_depth: int = MAX_DEPTH) -> Filter:
    """Validate a decoded JSON filter into its syntax tree; `RejectedInput` says what is wrong and where.

    New filters go through `FilterLimits.check`; stored ones parse with ``DEEPEST``, which
    admits whatever any deployment's limits did."""
    return _Parser(max_depth).filter(obj, "", 1)


class _Parser:
    def __init__(self, max_depth: int) -> None:
        self.operators = 0
        self.max_depth = max_depth

    def count(self, where: str) -> None:
        self.operators += 1
        if self.operators > MAX_OPERATORS:
            raise _rejected(where, f"the filter has more than {MAX_OPERATORS} operators")

    def filter(self, obj: object, where: str, depth: int) -> Filter:
        if depth > self.max_depth:
            raise _rejected(where, f"filters nest more than {self.max_depth} levels deep")
        if not isinstance(obj, dict):
            raise _rejected(where, f"expected a filter object, got {_describe(obj)}")
        if not obj and where:
            raise _rejected(where, "empty filter object ({} matches everything only as a whole filter)")
        items: list[Filter] = []
        for key, spec in obj.items():
            if not isinstance(key, str):
                raise _rejected(where, f"keys must be strings, got {_describe(key)}")
            at = _member(where, key)
            if key in ("$and", "$or"):
                self.count(at)
                if not isinstance(spec, list) or not spec:
                    raise _rejected(at, f"expected a non-empty list of filter objects, got {_describe(spec)}")
                parts = tuple(self.filter(part, f"{at}[{i}]", depth + 1) for i, part in enumerate(spec))
                items.append(And(parts) if key == "$and" else Or(parts))
            elif key == "$not":
                self.count(at)
                items.append(Not(self.filter(spec, at, depth + 1)))
            elif key in _FIELD_OPS:
                example = f'{{"data.status": {{{_quote(key)}: ...}}}}'
                raise _rejected(where, f"operator {_quote(key)} needs a field: {example}")
            elif key.startswith("$"):
                raise _rejected(where, f"unknown operator {_quote(key)}")
            else:
                items.append(self.field(_parse_path(key, at), spec, at, depth))
        return items[0] if len(items) == 1 else And(tuple(items))

    def field(self, path: Path, spec: object, where: str, depth: int) -> Filter:
        if not isinstance(spec, dict):
            self.count(where)
            return self.compare(path, "$eq", spec, where)
        if not spec:
            raise _rejected(where, 'empty operator object; expected operators such as {"$eq": ...}')
        conditions = [self.condition(path, op, arg, where, depth) for op, arg in spec.items()]
        return conditions[0] if len(conditions) == 1 else And(tuple(conditions))

    def condition(self, path: Path, op: object, arg: object, where: str, depth: int) -> Filter:
        if not isinstance(op, str) or not op.startswith("$"):
            raise _rejected(
                where,
                f"unknown operator {_quote(op)}; objects cannot be compared whole, "
                f"write the member's full path instead (e.g. {_quote(f'{path}.{op}')})",
            )
        if op in ("$and", "$or"):
            raise _rejected(where, f"{_quote(op)} combines whole filters: put it beside fields, not under one")
        if op not in _FIELD_OPS:
            raise _rejected(where, f"unknown operator {_quote(op)}")
        at = f"{where}.{op}"
        self.count(at)
        match op:
            case "$eq" | "$gt" | "$gte" | "$lt" | "$lte":
                return self.compare(path, op, arg, at)
            case "$neq":
                return Not(self.compare(path, "$eq", arg, at))
            case "$in" | "$nin":
                found = self.membership(path, arg, at)
                return found if op == "$in" else Not(found)
            case "$exists":
                if not isinstance(arg, bool):
                    raise _rejected(at, f"expected true or false, got {_describe(arg)}")
                return Exists(path) if arg else Not(Exists(path))
            case "$prefix" | "$suffix":
                if path.field == TIME_FIELD:
                    raise _rejected(at, "time is a timestamp, not a string")
                if not isinstance(arg, str):
                    raise _rejected(at, f"expected a string, got {_describe(arg)}")
                return Affix(path, op, _text(arg, at))
            case _:  # "$not"
                return Not(self.negated(path, arg, at, depth))

    def membership(self, path: Path, arg: object, where: str) -> In:
        if not isinstance(arg, list):
            raise _rejected(where, f"expected a list of values, got {_describe(arg)}")
        if len(arg) > MAX_LIST_VALUES:
            raise _rejected(where, f"more than {MAX_LIST_VALUES} values")
        return In(path, tuple(_value(path, v, f"{where}[{i}]", ordered=False) for i, v in enumerate(arg)))

    def negated(self, path: Path, arg: object, where: str, depth: int) -> Filter:
        """What ``$not`` negates: an object of operators, one level deeper."""
        if depth + 1 > self.max_depth:
            raise _rejected(where, f"filters nest more than {self.max_depth} levels deep")
        if not isinstance(arg, dict):
            raise _rejected(where, f'expected an object of operators such as {{"$gt": 5}}, got {_describe(arg)}')
        return self.field(path, arg, where, depth + 1)

    def compare(self, path: Path, op: CompareOp, arg: object, where: str) -> Compare:
        return Compare(path, op, _value(path, arg, where, ordered=op != "$eq"))


def _parse_path(key: str, where: str) -> Path:
    if key in STRING_FIELDS or key == TIME_FIELD:
        return Path(key)
    rest = key.removeprefix(DATA_FIELD)
    if rest == key or (rest and rest[0] not in ".["):
        raise _rejected(
            where, f"unknown field; use one of {', '.join((*STRING_FIELDS, TIME_FIELD))} or a data.<key> path"
        )
    if not rest:
        raise _rejected(where, "name a value inside data, e.g. data.amount")
    if len(key) > MAX_PATH_LENGTH:
        raise _rejected(where, f"the path is longer than {MAX_PATH_LENGTH} characters")
    steps: list[str | int] = []
    position = 0
    while position < len(rest):
        step = _STEP.match(rest, position)
        if step is None:
            raise _rejected(
                where,
                f'invalid path at character {len(DATA_FIELD) + position + 1}: expected ".key" '
                "(a key without . [ ]) or [index] (0 to 999999)",
            )
        name, index = step.groups()
        if name is not None:
            if "'" in name and '"' in name:
                raise _rejected(where, f"the key {_quote(name)} contains both ' and \", which Spark paths cannot quote")
            steps.append(_text(name, where))
        else:
            steps.append(int(index))
        position = step.end()
    if len(steps) > MAX_PATH_STEPS:
        raise _rejected(where, f"the path has more than {MAX_PATH_STEPS} steps")
    return Path(DATA_FIELD, tuple(steps))


def _value(path: Path, raw: object, where: str, *, ordered: bool) -> Value:
    if isinstance(raw, dict | list):
        raise _rejected(where, f"expected a single value, got {_describe(raw)} (use $in for a list of values)")
    if raw is None:
        if ordered:
            raise _rejected(where, "null cannot be ordered; use $eq, $neq or $exists")
        return Value("null", None)
    if path.field == TIME_FIELD:
        return Value("time", _timestamp(raw, where))
    if path.field in STRING_FIELDS:
        if not isinstance(raw, str):
            raise _rejected(where, f"{path.field} is a string; expected a string, got {_describe(raw)}")
        return Value("string", _text(raw, where))
    if isinstance(raw, bool):
        if ordered:
            raise _rejected(where, "true and false cannot be ordered; use $eq or $neq")
        return Value("boolean", raw)
    if isinstance(raw, int | float):
        return Value("number", _number(raw, where))
    if isinstance(raw, str):
        return Value("string", _text(raw, where))
    raise _rejected(where, f"expected a JSON value, got {_describe(raw)}")


def _number(raw: int | float, where: str) -> float:
    try:
        number = float(raw)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise _rejected(where, f"{_describe(raw)} is not a finite 64-bit number")
    return number + 0.0  # -0.0 becomes 0.0: they are equal, and now hash alike too


def _text(raw: str, where: str) -> str:
    if len(raw) > MAX_STRING_LENGTH:
        raise _rejected(where, f"strings are limited to {MAX_STRING_LENGTH} characters")
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise _rejected(where, "the string is not valid Unicode (a lone surrogate)") from None
    return raw


def _timestamp(raw: object, where: str) -> datetime:
    instant = parse_time(raw) if isinstance(raw, str) else None
    if instant is not None:
        return instant
    raise _rejected(
        where, f'time compares with RFC 3339 timestamps such as "2025-01-31T12:00:00Z", got {_describe(raw)}'
    )


def _member(where: str, key: str) -> str:
    return f"{where}.{_shown(key)}" if where else _shown(key)


def _quote(raw: object) -> str:
    return json.dumps(_shown(str(raw)), ensure_ascii=False)


def _describe(raw: object) -> str:
    if isinstance(raw, dict):
        return "an object"
    if isinstance(raw, list):
        return "a list"
    if raw is None or isinstance(raw, bool):
        return json.dumps(raw)
    if isinstance(raw, str):
        return _quote(raw)
    if isinstance(raw, int | float):
        return _shown(repr(raw))
    return f"a {type(raw).__name__}"


def _shown(text: str) -> str:
    """User text as it may appear in an error message: short, and encodable (no lone surrogates)."""
    short = text if len(text) <= 60 else text[:57] + "..."
    return short.encode("utf-8", "backslashreplace").decode("utf-8")


def _rejected(where: str, problem: str) -> RejectedInput:
    return RejectedInput(f"{where or 'filter'}: {problem}")


# --- Python evaluation -----------------------------------------------------------------

_MISSING: Any = object()


def evaluate(filter: Filter, envelope: Mapping[str, Any]) -> bool:
    """Whether the event matches.

    `envelope` has the envelope's keys: strings, `time` a timezone-aware datetime (a naive
    one is read as UTC, as the envelope parser does), `data` the decoded JSON; None or an
    absent key means the attribute is missing.
    """
    match filter:
        case And(items):
            return all(evaluate(item, envelope) for item in items)
        case Or(items):
            return any(evaluate(item, envelope) for item in items)
        case Not(item):
            return not evaluate(item, envelope)
        case Exists(path):
            return _lookup(envelope, path) is not _MISSING
        case Compare(path, "$eq", value):
            return _equal(_lookup(envelope, path), value)
        case Compare(path, op, value):
            actual = _lookup(envelope, path)
            return _kind_of(actual) == value.kind and bool(COMPARISONS[op](_comparable(actual), value.raw))
        case In(path, values):
            actual = _lookup(envelope, path)
            return any(_equal(actual, value) for value in values)
        case Affix(path, op, text):
            actual = _lookup(envelope, path)
            return isinstance(actual, str) and (actual.startswith(text) if op == "$prefix" else actual.endswith(text))
    raise TypeError(f"not a filter: {filter!r}")


def _lookup(envelope: Mapping[str, Any], path: Path) -> Any:
    if path.field != DATA_FIELD:
        attribute = envelope.get(path.field)
        return _MISSING if attribute is None else attribute
    node: Any = envelope.get(DATA_FIELD)
    for step in path.steps:
        if isinstance(step, int):
            found = isinstance(node, list) and step < len(node)
        else:
            found = isinstance(node, dict) and step in node
        if not found:
            return _MISSING
        node = node[step]
    return node


def _equal(actual: Any, value: Value) -> bool:
    if value.kind == "null":
        return actual is _MISSING or actual is None
    return _kind_of(actual) == value.kind and bool(_comparable(actual) == value.raw)


def _kind_of(actual: Any) -> Kind | None:
    if actual is None:
        return "null"
    if isinstance(actual, bool):
        return "boolean"
    if isinstance(actual, int | float):
        return "number"
    if isinstance(actual, str):
        return "string"
    if isinstance(actual, datetime):
        return "time"
    return None


def _comparable(actual: Any) -> Any:
    # Python compares int with float exactly; Spark compares doubles, so round first.
    if isinstance(actual, int) and not isinstance(actual, bool):
        try:
            return float(actual)
        except OverflowError:
            return math.copysign(math.inf, actual)
    if isinstance(actual, datetime) and actual.tzinfo is None:
        return actual.replace(tzinfo=timezone.utc)  # the envelope parser's reading of a bare time
    return actual


__all__ = [
    "Affix",
    "AffixOp",
    "And",
    "COMPARISONS",
    "Compare",
    "CompareOp",
    "DATA_FIELD",
    "DEEPEST",
    "Exists",
    "Filter",
    "FilterLimits",
    "In",
    "Kind",
    "MAX_DEPTH",
    "MAX_LIST_VALUES",
    "MAX_OPERATORS",
    "MAX_PATH_LENGTH",
    "MAX_PATH_STEPS",
    "MAX_STRING_LENGTH",
    "Not",
    "Or",
    "Path",
    "STRING_FIELDS",
    "TIME_FIELD",
    "Value",
    "evaluate",
    "parse_filter",
]
