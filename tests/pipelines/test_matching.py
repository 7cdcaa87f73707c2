"""``wayline_routes`` routes by filters with exactly the answers of the Python evaluator."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from wayline.delivery.routing_table import publish
from wayline.pipelines.matching import routing, with_subscriptions
from wayline.registry.filter import Filter, evaluate, parse_filter
from wayline.registry.snapshot import ANY, CompiledSubscription, Snapshot

pytestmark = pytest.mark.integration

SCHEMA = (
    "row int, id string, source string, type string, specversion string, subject string, time timestamp, "
    "datacontenttype string, tenantid string, subtenantid string, data_json string"
)
ATTRIBUTES = ("id", "source", "type", "specversion", "subject", "time", "datacontenttype", "tenantid", "subtenantid")
# A new version for each table: the JVM keeps a folder's tables by version.
_versions = itertools.count(1)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("routing")


def spark_matches(spark: SparkSession, folder: Path, events: Sequence[dict[str, Any]],
                  filters: Sequence[Filter]) -> list[set[int]]:
    """For each filter, the indexes of the events routed to a subscription of every event
    type that has it: one routing table, one Spark job for all of them."""
    rows = [
        # No data and JSON null data both reach Python as None; give Spark both.
        (i, *(event[name] for name in ATTRIBUTES),
         json.dumps(event["data"], ensure_ascii=False) if event["data"] is not None or i % 2 else None)
        for i, event in enumerate(events)
    ]
    frame = spark.createDataFrame(rows, SCHEMA).select(
        "row", *ATTRIBUTES, F.parse_json("data_json").alias("data")
    )
    subscriptions = {f"s{n}": CompiledSubscription(f"s{n}", "e", "c", "streaming", None, None, f, n + 1)
                     for n, f in enumerate(filters)}
    snapshot = Snapshot(
        version=next(_versions), built_at=datetime.now(timezone.utc), subscriptions=subscriptions, endpoints={},
        index={(event["type"], ANY, ANY): tuple(subscriptions) for event in events},
        filters={n + 1: f for n, f in enumerate(filters)},
    )
    publish(folder, snapshot)
    routed = with_subscriptions(frame, routing(folder, snapshot.version))
    result = routed.select("row", F.col("subscriptions.subscription_id").alias("ids")).collect()
    return [{row["row"] for row in result if f"s{n}" in row["ids"]} for n in range(len(filters))]


def python_matches(events: Sequence[dict[str, Any]], filters: Sequence[Filter]) -> list[set[int]]:
    return [{i for i, event in enumerate(events) if evaluate(f, event)} for f in filters]


def event(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "e", "source": "/s", "type": "order.created", "specversion": "1.0", "subject": None, "time": None,
        "datacontenttype": "application/json", "tenantid": "t1", "subtenantid": None, "data": None,
    }
    return base | fields


# --- Random events and filters --------------------------------------------------------

KEYS = ["amount", "currency", "status", "flag", "it's", 'say "hi"', "a.b", "ü", "0", "x y"]
NUMBERS = [0, 1, -1, 2, 0.5, 100, 100.0, -0.0, 0.1, 0.30000000000000004, 1.5e-7, 1e20, 2**53, 2**53 + 1,
           2**63 - 1, 10**25, -(10**40), 123456.789012345678]
# Texts that variant casts would read as numbers, booleans or null, which must not match them.
STRINGS = ["", "a", "A", "EUR", "USD", "order/1", "order/", "x' OR 1=1 --", 'quo"te', "back\\slash", "ü", "😀",
           "0", "1", "100", "0.5", "true", "false", "null", "2024-01-01", "a\nb"]
ENVELOPE_STRINGS = ["t1", "t2", "t10", "T1", "order/1", "order/2", "invoice/1", "", "x' OR 1=1 --", "d-100"]
TIMES = [
    datetime(2025, 1, 31, 12, tzinfo=timezone.utc),
    datetime(2025, 1, 31, 12, 0, 0, 1, tzinfo=timezone.utc),
    datetime(2025, 1, 31, 13, tzinfo=timezone(timedelta(hours=1))),
    datetime(1999, 12, 31, 23, 59, tzinfo=timezone.utc),
]
TIME_TEXTS = ["2025-01-31T12:00:00Z", "2025-01-31T12:00:00.000001Z", "2025-01-31T13:00:00+01:00",
              "2025-01-31T11:00:00.5-01:00", "2000-01-01T00:00:00Z"]
AFFIXES = ["", "o", "order/", "1", "t", "x'", "\\", '"', "R", "e", "😀"]

scalars = st.one_of(
    st.none(), st.booleans(), st.sampled_from(NUMBERS), st.integers(-3, 3),
    st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from(STRINGS), st.text("ab'\"\\é", max_size=3),
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(KEYS), children, max_size=3),
    max_leaves=4,
)
objects = st.dictionaries(st.sampled_from(KEYS), json_values, max_size=8)
payloads = st.one_of(st.none(), objects, objects, objects, json_values)
envelopes = st.builds(
    event,
    id=st.sampled_from(ENVELOPE_STRINGS),
    source=st.sampled_from(ENVELOPE_STRINGS),
    type=st.sampled_from(["order.created", "order.paid", "x' OR 1=1 --"]),
    subject=st.none() | st.sampled_from(ENVELOPE_STRINGS),
    time=st.none() | st.sampled_from(TIMES),
    tenantid=st.sampled_from(ENVELOPE_STRINGS),
    subtenantid=st.none() | st.sampled_from(ENVELOPE_STRINGS),
    data=payloads,
)

# Paths that usually lead nowhere, or into the wrong kind of container.
MISSING_PATHS = ["data.nothing", "data.amount.currency", "data.status[0]", "data.flag.amount", "data[0]",
                 "data[1].status", "data.it's[5]"]
STRING_FIELDS = ["id", "source", "type", "subject", "tenantid", "subtenantid"]


def seen_values(events: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    """Every path the events have a value at (envelope fields, and data down to 3 steps), with the values."""
    seen: dict[str, list[Any]] = {path: [] for path in [*STRING_FIELDS, *MISSING_PATHS]}

    def walk(value: Any, path: str, depth: int) -> None:
        if depth:
            seen.setdefault(path, []).append(value)
        if isinstance(value, dict) and depth < 3:
            for key, member in value.items():
                if "." not in key:  # a key with a dot cannot be named in a path
                    walk(member, f"{path}.{key}", depth + 1)
        elif isinstance(value, list) and depth < 3:
            for index, member in enumerate(value):
                walk(member, f"{path}[{index}]", depth + 1)

    for event in events:
        for name in STRING_FIELDS:
            if event[name] is not None:
                seen[name].append(event[name])
        walk(event["data"], "data", 0)
    return seen


def look_alikes(value: Any) -> list[Any]:
    """The value, its neighbours, and values a converting comparison would take for it."""
    if isinstance(value, bool):
        return [value, int(value), json.dumps(value)]
    if isinstance(value, int | float):
        return [value, value + 1, json.dumps(value), *([bool(value)] if value in (0, 1) else [])]
    if isinstance(value, str):
        alikes: list[Any] = [value, value[:-1], value + "~"]
        try:
            alikes += [number] if math.isfinite(number := float(value)) else []
        except ValueError:
            words: dict[str, Any] = {"true": True, "false": False, "null": None}
            alikes += [words[value]] if value in words else []
        return alikes
    return [None, "null"] if value is None else []


def literals(seen: dict[str, list[Any]], path: str, *, ordered: bool) -> st.SearchStrategy[Any]:
    if path == "time":
        pool: list[Any] = TIME_TEXTS
    elif path in STRING_FIELDS:
        pool = [*seen[path], *ENVELOPE_STRINGS]
    else:
        # Mostly values the events have there (or would have, if comparisons converted).
        near = [alike for value in seen[path] for alike in look_alikes(value)]
        pool = [*near, *near, *near, *NUMBERS, *STRINGS, True, False]
    if ordered:
        return st.sampled_from([v for v in pool if isinstance(v, str | int | float) and not isinstance(v, bool)])
    return st.sampled_from(pool) | st.sampled_from(pool) | st.sampled_from(pool) | st.none()


def affixes(seen: dict[str, list[Any]], path: str) -> st.SearchStrategy[str]:
    texts = [v for v in seen.get(path, []) if isinstance(v, str)]
    return st.sampled_from([*AFFIXES, *(t[:2] for t in texts), *(t[-2:] for t in texts)])


@st.composite
def operators(draw: st.DrawFn, seen: dict[str, list[Any]], path: str, depth: int = 0) -> dict[str, Any]:
    choices = ["$eq", "$neq", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists"]
    choices += [] if path == "time" else ["$prefix", "$suffix"]
    choices += ["$not"] if depth < 2 else []
    spec: dict[str, Any] = {}
    for op in draw(st.lists(st.sampled_from(choices), min_size=1, max_size=2, unique=True)):
        if op in ("$eq", "$neq"):
            spec[op] = draw(literals(seen, path, ordered=False))
        elif op in ("$in", "$nin"):
            spec[op] = draw(st.lists(literals(seen, path, ordered=False), max_size=4))
        elif op == "$exists":
            spec[op] = draw(st.booleans())
        elif op in ("$prefix", "$suffix"):
            spec[op] = draw(affixes(seen, path))
        elif op == "$not":
            spec[op] = draw(operators(seen, path, depth + 1))
        else:
            spec[op] = draw(literals(seen, path, ordered=True))
    return spec


@st.composite
def conditions(draw: st.DrawFn, seen: dict[str, list[Any]]) -> dict[str, Any]:
    # Data paths as often as the events have them; envelope fields, time and dead ends less.
    common = [path for path, values in seen.items() if path.startswith("data") for _ in values]
    rare = [*STRING_FIELDS, "time", *MISSING_PATHS]
    weighted = [st.sampled_from(common)] * 2 if common else []
    paths = draw(st.lists(st.one_of(*weighted, st.sampled_from(rare)), min_size=1, max_size=3))
    return {
        path: draw(literals(seen, path, ordered=False) if draw(st.booleans()) else operators(seen, path))
        for path in paths
    }


def filters(seen: dict[str, list[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    # Half are plain conditions: a difference deep in $and/$or/$not is often masked.
    return conditions(seen) | st.recursive(
        conditions(seen),
        lambda children: st.one_of(
            st.lists(children, min_size=1, max_size=3).map(lambda parts: {"$and": parts}),
            st.lists(children, min_size=1, max_size=3).map(lambda parts: {"$or": parts}),
            children.map(lambda part: {"$not": part}),
            st.tuples(children, conditions(seen)).map(lambda pair: pair[1] | pair[0]),
        ),
        max_leaves=5,
    )


# Spark's cost is per job, hardly per event: so many events and a few filters per job. The filters are drawn after the events, from
# the paths and values those have, so that most conditions meet something to compare.
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_spark_and_python_agree_on_random_events(spark: SparkSession, folder: Path, data: st.DataObject) -> None:
    events = data.draw(st.lists(envelopes, min_size=20, max_size=80), label="events")
    raw_filters = data.draw(st.lists(filters(seen_values(events)), min_size=1, max_size=8), label="filters")
    parsed = [parse_filter(raw) for raw in raw_filters]
    got = spark_matches(spark, folder, events, parsed)
    expected = python_matches(events, parsed)
    for raw, spark_rows, python_rows in zip(raw_filters, got, expected, strict=True):
        assert spark_rows == python_rows, raw


# --- Chosen cases ---------------------------------------------------------------------

CHOSEN_EVENTS = [
    event(subject="x' OR 1=1 --", data={"q": "a\\'b\"c", "x') OR 1=1 --": 1, "it's": {"say \"hi\"": True}}),  # 0
    event(subject="order/1", data={"v": None}),  # 1
    event(data={}),  # 2
    event(data={"v": 5, "n": 12345678901234567890}),  # 3
    event(data={"v": "5", "n": "12345678901234567890"}),  # 4
    event(data={"v": True, "items": [{"sku": "A"}, {"sku": "B"}]}),  # 5
    event(data={"v": {"w": 5}, "items": {"0": {"sku": "A"}}}),  # 6
    event(time=datetime(2025, 1, 31, 13, tzinfo=timezone(timedelta(hours=1))), data=[5, "5"]),  # 7
    event(time=datetime(2025, 1, 31, 12, 0, 0, 1, tzinfo=timezone.utc), tenantid="t2", subtenantid="d-1"),  # 8
]
CHOSEN_FILTERS: list[tuple[dict[str, Any], set[int]]] = [
    # SQL-looking text is a value, and quotes in keys stay inside the path.
    ({"subject": "x' OR 1=1 --"}, {0}),
    ({"subject": {"$in": ["' OR ''='", "x' OR 1=1 --"]}}, {0}),
    ({"data.q": "a\\'b\"c"}, {0}),
    ({"data.q": {"$prefix": "a\\'"}}, {0}),
    ({"data.x') OR 1=1 --": 1}, {0}),
    ({"data.x') OR 1=1 --": {"$neq": 1}}, set(range(1, 9))),
    ({'data.it\'s.say "hi"': True}, {0}),
    # Missing, null and types.
    ({"data.v": None}, {0, 1, 2, 7, 8}),
    ({"data.v": {"$neq": None}}, {3, 4, 5, 6}),
    ({"data.v": {"$exists": True}}, {1, 3, 4, 5, 6}),
    ({"data.v": 5}, {3}),
    ({"data.v": "5"}, {4}),
    ({"data.v": True}, {5}),
    ({"data.v": {"$neq": 5}}, {0, 1, 2, 4, 5, 6, 7, 8}),
    ({"data.v": {"$gte": 5}}, {3}),
    ({"data.v": {"$not": {"$gte": 5}}}, {0, 1, 2, 4, 5, 6, 7, 8}),
    ({"data.v": {"$in": [None, "5"]}}, {0, 1, 2, 4, 7, 8}),
    ({"data.v": {"$nin": [5, True]}}, {0, 1, 2, 4, 6, 7, 8}),
    ({"data.v.w": 5}, {6}),
    ({"data.n": {"$gt": 1.2345678901234567e19}}, set()),
    ({"data.n": 12345678901234567890}, {3}),
    ({"data.items[1].sku": "B"}, {5}),
    ({"data.items.0.sku": "A"}, {6}),
    ({"data[0]": 5, "data[1]": "5"}, {7}),
    ({"subtenantid": None}, set(range(8))),
    ({"subtenantid": {"$prefix": ""}}, {8}),
    # Time is an instant, whatever the offset it is written with.
    ({"time": "2025-01-31T12:00:00Z"}, {7}),
    ({"time": {"$gt": "2025-01-31T13:00:00+01:00"}}, {8}),
    ({"time": {"$exists": False}}, set(range(7))),
    ({"$or": [{"tenantid": "t2"}, {"data.v": True}], "$not": {"subtenantid": "d-2"}}, {5, 8}),
]


def test_chosen_cases(spark: SparkSession, folder: Path) -> None:
    parsed = [parse_filter(raw) for raw, _ in CHOSEN_FILTERS]
    expected = [rows for _, rows in CHOSEN_FILTERS]
    assert python_matches(CHOSEN_EVENTS, parsed) == expected
    assert spark_matches(spark, folder, CHOSEN_EVENTS, parsed) == expected
