"""The filter language in pure Python: parsing, every operator's meaning, and the errors customers see."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wayline.core.errors import RejectedInput
from wayline.registry.filter import (
    DEEPEST,
    MAX_DEPTH,
    MAX_LIST_VALUES,
    MAX_OPERATORS,
    Affix,
    And,
    Compare,
    Exists,
    FilterLimits,
    In,
    Not,
    Or,
    Path,
    Value,
    evaluate,
    parse_filter,
)

T0 = datetime(2025, 1, 31, 12, 0, tzinfo=timezone.utc)

EVENT: dict[str, Any] = {
    "id": "evt-1",
    "source": "/shop",
    "type": "order.created",
    "specversion": "1.0",
    "subject": "order/42",
    "time": T0,
    "datacontenttype": "application/json",
    "tenantid": "t-2",
    "subtenantid": None,
    "data": {
        "amount": 150,
        "price": 9.5,
        "currency": "EUR",
        "paid": True,
        "note": None,
        "code": "5",
        "order": {"items": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}], "0": "zero"},
        "it's": "apostrophe",
        'say "hi"': "quotes",
        "big": 2**53 + 1,
    },
}


def matches(filter_json: object, event: dict[str, Any] = EVENT) -> bool:
    return evaluate(parse_filter(filter_json), event)


def parse_path(text: str) -> Path:
    found = parse_filter({text: {"$exists": True}})
    assert isinstance(found, Exists)
    return found.path


# --- Parsing -------------------------------------------------------------------------


def test_a_bare_value_is_eq_and_keys_are_anded() -> None:
    assert parse_filter({"data.amount": 100, "subject": {"$prefix": "order/"}}) == And((
        Compare(Path("data", ("amount",)), "$eq", Value("number", 100.0)),
        Affix(Path("subject"), "$prefix", "order/"),
    ))


def test_negative_operators_are_negations_of_positive_ones() -> None:
    amount = Path("data", ("amount",))
    assert parse_filter({"data.amount": {"$neq": 5}}) == Not(Compare(amount, "$eq", Value("number", 5.0)))
    assert parse_filter({"data.amount": {"$nin": [5, "5"]}}) == Not(
        In(amount, (Value("number", 5.0), Value("string", "5")))
    )
    assert parse_filter({"data.amount": {"$exists": False}}) == Not(Exists(amount))


def test_several_operators_on_one_field_are_anded() -> None:
    amount = Path("data", ("amount",))
    assert parse_filter({"data.amount": {"$gt": 0, "$lte": 100}}) == And((
        Compare(amount, "$gt", Value("number", 0.0)),
        Compare(amount, "$lte", Value("number", 100.0)),
    ))


def test_logical_operators_nest() -> None:
    assert parse_filter({"$or": [{"type": "a"}, {"$not": {"type": "b"}}]}) == Or((
        Compare(Path("type"), "$eq", Value("string", "a")),
        Not(Compare(Path("type"), "$eq", Value("string", "b"))),
    ))
    assert parse_filter({"data.x": {"$not": {"$gt": 5}}}) == Not(
        Compare(Path("data", ("x",)), "$gt", Value("number", 5.0))
    )


def test_the_empty_filter_matches_everything() -> None:
    assert parse_filter({}) == And(())
    assert matches({}, {})


@pytest.mark.parametrize(
    ("text", "steps"),
    [
        ("data.amount", ("amount",)),
        ("data.order.items[0].sku", ("order", "items", 0, "sku")),
        ("data[2]", (2,)),
        ("data.order.0", ("order", "0")),
        ("data.it's", ("it's",)),
        ('data.say "hi"', ('say "hi"',)),
        ("data.$ref", ("$ref",)),
        ("data.a b.ü", ("a b", "ü")),
    ],
)
def test_data_paths(text: str, steps: tuple[str | int, ...]) -> None:
    path = parse_path(text)
    assert path == Path("data", steps)
    assert str(path) == text


def test_a_literal_keeps_its_json_type() -> None:
    # Python's True == 1 must not make these filters equal (the snapshot deduplicates filters).
    assert parse_filter({"data.x": True}) != parse_filter({"data.x": 1})
    assert parse_filter({"data.x": 1}) == parse_filter({"data.x": 1.0})
    assert parse_filter({"data.x": -0.0}) == parse_filter({"data.x": 0})


def test_time_literals_are_rfc3339_instants() -> None:
    parsed = parse_filter({"time": {"$gte": "2025-01-31T13:00:00.000250+01:00"}})
    assert parsed == Compare(Path("time"), "$gte", Value("time", T0 + timedelta(microseconds=250)))
    assert parse_filter({"time": "2025-01-31t12:00:00z"}) == Compare(Path("time"), "$eq", Value("time", T0))


def test_filters_are_hashable_values() -> None:
    raw = {"$or": [{"data.a": {"$in": [1, "x", None]}}, {"time": {"$lt": "2025-01-01T00:00:00Z"}}]}
    assert hash(parse_filter(raw)) == hash(parse_filter(raw))


# --- Operators -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filter_json", "expected"),
    [
        ({"data.currency": "EUR"}, True),
        ({"data.currency": {"$eq": "USD"}}, False),
        ({"data.currency": {"$neq": "USD"}}, True),
        ({"data.amount": {"$gt": 149}}, True),
        ({"data.amount": {"$gt": 150}}, False),
        ({"data.amount": {"$gte": 150}}, True),
        ({"data.amount": {"$lt": 150.5}}, True),
        ({"data.amount": {"$lte": 149.99}}, False),
        ({"data.price": 9.5}, True),
        ({"data.currency": {"$gt": "EU"}}, True),
        ({"data.currency": {"$lt": "EUR"}}, False),
        ({"data.currency": {"$in": ["USD", "EUR"]}}, True),
        ({"data.currency": {"$in": []}}, False),
        ({"data.currency": {"$nin": ["USD", "GBP"]}}, True),
        ({"data.currency": {"$nin": []}}, True),
        ({"data.currency": {"$prefix": "EU"}}, True),
        ({"data.currency": {"$prefix": "eu"}}, False),
        ({"data.currency": {"$suffix": "UR"}}, True),
        ({"data.currency": {"$prefix": ""}}, True),
        ({"data.currency": {"$exists": True}}, True),
        ({"data.currency": {"$exists": False}}, False),
        ({"data.paid": True}, True),
        ({"data.paid": {"$neq": False}}, True),
        ({"data.amount": {"$not": {"$gt": 100}}}, False),
        ({"data.amount": {"$not": {"$gt": 100, "$lt": 120}}}, True),
        ({"$and": [{"data.currency": "EUR"}, {"data.amount": 150}]}, True),
        ({"$and": [{"data.currency": "EUR"}, {"data.amount": 151}]}, False),
        ({"$or": [{"data.currency": "USD"}, {"data.amount": 150}]}, True),
        ({"$or": [{"data.currency": "USD"}, {"data.amount": 151}]}, False),
        ({"$not": {"data.currency": "USD"}}, True),
        ({"data.order.items[1].sku": "B-7"}, True),
        ({"data.order.items[0].qty": {"$gte": 2}}, True),
        ({"data.order.0": "zero"}, True),
        ({"data.it's": "apostrophe"}, True),
        ({'data.say "hi"': {"$suffix": "tes"}}, True),
        ({"type": {"$prefix": "order."}}, True),
        ({"subject": {"$suffix": "/42"}}, True),
        ({"tenantid": {"$in": ["t-1", "t-2"]}}, True),
        ({"tenantid": {"$gt": "t-10"}}, True),
        ({"source": "/shop", "id": "evt-1"}, True),
        ({"time": "2025-01-31T13:00:00+01:00"}, True),
        ({"time": {"$gt": "2025-01-31T11:59:59.999999Z"}}, True),
        ({"time": {"$lt": "2025-01-31T12:00:00Z"}}, False),
        ({"time": {"$in": ["2024-01-01T00:00:00Z", "2025-01-31T12:00:00Z"]}}, True),
        (
            {"data.amount": {"$gte": 100}, "subject": {"$prefix": "order/"},
             "$or": [{"data.currency": "EUR"}, {"data.currency": {"$in": ["USD", "GBP"]}}]},
            True,
        ),
    ],
)
def test_operator(filter_json: dict[str, Any], expected: bool) -> None:
    assert matches(filter_json) is expected


@pytest.mark.parametrize(
    ("filter_json", "expected"),
    [
        # Comparisons never convert between JSON types.
        ({"data.code": 5}, False),
        ({"data.code": "5"}, True),
        ({"data.amount": "150"}, False),
        ({"data.amount": {"$gt": "1"}}, False),
        ({"data.code": {"$lt": 9}}, False),
        ({"data.paid": 1}, False),
        ({"data.amount": True}, False),
        ({"data.code": {"$neq": 5}}, True),
        ({"data.code": {"$nin": [5, True]}}, True),
        ({"data.amount": {"$prefix": "1"}}, False),
        ({"data.order": {"$prefix": "{"}}, False),
        ({"data.order.items": {"$neq": "x"}}, True),
        # Numbers are 64-bit floats: 2**53 + 1 rounds to 2**53.
        ({"data.big": 2**53}, True),
        ({"data.big": {"$gt": 2**53}}, False),
    ],
)
def test_types(filter_json: dict[str, Any], expected: bool) -> None:
    assert matches(filter_json) is expected


@pytest.mark.parametrize(
    ("path", "eq_null", "neq_null", "exists", "eq_5", "neq_5", "gt_5", "not_gt_5", "nin_5", "in_null"),
    [
        ("data.note", True, False, True, False, True, False, True, True, True),   # JSON null
        ("data.nothing", True, False, False, False, True, False, True, True, True),  # absent key
        ("data.currency.x", True, False, False, False, True, False, True, True, True),  # step into a string
        ("data.order.items[5]", True, False, False, False, True, False, True, True, True),  # past the end
        ("data.order[0]", True, False, False, False, True, False, True, True, True),  # index into an object
        ("data.order.items.0", True, False, False, False, True, False, True, True, True),  # key into an array
        ("data.amount", False, True, True, False, True, True, False, True, False),  # present: 150
    ],
)
def test_missing_and_null(
    path: str, eq_null: bool, neq_null: bool, exists: bool, eq_5: bool, neq_5: bool,
    gt_5: bool, not_gt_5: bool, nin_5: bool, in_null: bool,
) -> None:
    assert matches({path: None}) is eq_null
    assert matches({path: {"$neq": None}}) is neq_null
    assert matches({path: {"$exists": True}}) is exists
    assert matches({path: 5}) is eq_5
    assert matches({path: {"$neq": 5}}) is neq_5
    assert matches({path: {"$gt": 5}}) is gt_5
    assert matches({path: {"$not": {"$gt": 5}}}) is not_gt_5
    assert matches({path: {"$nin": [5]}}) is nin_5
    assert matches({path: {"$in": [5, None]}}) is in_null


def test_absent_envelope_attributes_are_missing() -> None:
    assert matches({"subtenantid": None})
    assert matches({"subtenantid": {"$exists": False}})
    assert matches({"subtenantid": {"$neq": "d-1"}})
    assert not matches({"subtenantid": {"$prefix": ""}})
    assert matches({"data.amount": {"$exists": False}}, {**EVENT, "data": None})
    assert matches({"time": None}, {**EVENT, "time": None})
    assert not matches({"time": {"$lt": "2999-01-01T00:00:00Z"}}, {**EVENT, "time": None})


def test_a_present_empty_string_is_a_value() -> None:
    assert matches({"subject": {"$exists": True}}, {**EVENT, "subject": ""})
    assert matches({"data.s": ""}, {**EVENT, "data": {"s": ""}})


def test_sql_looking_values_are_plain_strings() -> None:
    event = {**EVENT, "subject": "x' OR 1=1 --", "data": {"q": "a\\'b\"c", "x') OR 1=1 --": 1}}
    assert matches({"subject": "x' OR 1=1 --"}, event)
    assert not matches({"subject": "x' OR 1=1 --"})
    assert matches({"data.q": "a\\'b\"c"}, event)
    assert not matches({"data.q": "a'b\"c"}, event)
    assert matches({"data.x') OR 1=1 --": 1}, event)


# --- Errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filter_json", "message"),
    [
        ([], 'filter: expected a filter object, got a list'),
        ({"$or": [{"data.currency": "EUR"}, {"data.currency": {"$inn": ["USD"]}}]},
         '$or[1].data.currency: unknown operator "$inn"'),
        ({"$xor": []}, 'filter: unknown operator "$xor"'),
        ({"$and": [{"$gt": 5}]}, '$and[0]: operator "$gt" needs a field: {"data.status": {"$gt": ...}}'),
        ({"$and": []}, "$and: expected a non-empty list of filter objects, got a list"),
        ({"$or": {"type": "a"}}, "$or: expected a non-empty list of filter objects, got an object"),
        ({"$and": [{}]}, "$and[0]: empty filter object ({} matches everything only as a whole filter)"),
        ({"$not": [1]}, "$not: expected a filter object, got a list"),
        ({"tenant": "t-1"}, "tenant: unknown field; use one of id, source, type, subject, tenantid, "
                            "subtenantid, time or a data.<key> path"),
        ({"database.x": 1}, "database.x: unknown field; use one of id, source, type, subject, tenantid, "
                            "subtenantid, time or a data.<key> path"),
        ({"data": {"$exists": True}}, "data: name a value inside data, e.g. data.amount"),
        ({"data..x": 1}, 'data..x: invalid path at character 5: expected ".key" (a key without . [ ]) '
                         "or [index] (0 to 999999)"),
        ({"data.x[a]": 1}, 'data.x[a]: invalid path at character 7: expected ".key" (a key without . [ ]) '
                           "or [index] (0 to 999999)"),
        ({"data.x[1234567]": 1}, 'data.x[1234567]: invalid path at character 7: expected ".key" '
                                 "(a key without . [ ]) or [index] (0 to 999999)"),
        ({"data.it's \"x\"": 1}, 'data.it\'s "x": the key "it\'s \\"x\\"" contains both \' and ", '
                                 "which Spark paths cannot quote"),
        ({"data.x": {}}, 'data.x: empty operator object; expected operators such as {"$eq": ...}'),
        ({"data.x": {"y": 1}}, 'data.x: unknown operator "y"; objects cannot be compared whole, write the '
                               'member\'s full path instead (e.g. "data.x.y")'),
        ({"data.x": {"$or": [{"$eq": 1}]}},
         'data.x: "$or" combines whole filters: put it beside fields, not under one'),
        ({"data.x": [1, 2]}, "data.x: expected a single value, got a list (use $in for a list of values)"),
        ({"data.x": {"$eq": {"a": 1}}},
         "data.x.$eq: expected a single value, got an object (use $in for a list of values)"),
        ({"data.x": {"$gt": True}}, "data.x.$gt: true and false cannot be ordered; use $eq or $neq"),
        ({"data.x": {"$lte": None}}, "data.x.$lte: null cannot be ordered; use $eq, $neq or $exists"),
        ({"data.x": {"$in": "EUR"}}, 'data.x.$in: expected a list of values, got "EUR"'),
        ({"data.x": {"$nin": [1, [2]]}},
         "data.x.$nin[1]: expected a single value, got a list (use $in for a list of values)"),
        ({"data.x": {"$exists": 1}}, "data.x.$exists: expected true or false, got 1"),
        ({"data.x": {"$prefix": 1}}, "data.x.$prefix: expected a string, got 1"),
        ({"data.x": {"$not": 5}}, 'data.x.$not: expected an object of operators such as {"$gt": 5}, got 5'),
        ({"data.x": {"$not": {"$gtt": 5}}}, 'data.x.$not: unknown operator "$gtt"'),
        ({"data.x": float("nan")}, "data.x: nan is not a finite 64-bit number"),
        ({"data.x": 10**400}, f"data.x: {'1' + '0' * 56}... is not a finite 64-bit number"),
        ({"data.x": "\ud800"}, "data.x: the string is not valid Unicode (a lone surrogate)"),
        ({"data.x": {1, 2}}, "data.x: expected a JSON value, got a set"),
        ({"subject": 5}, "subject: subject is a string; expected a string, got 5"),
        ({"tenantid": {"$in": ["t-1", True]}}, "tenantid.$in[1]: tenantid is a string; expected a string, got true"),
        ({"time": {"$gt": "2025-01-31"}}, 'time.$gt: time compares with RFC 3339 timestamps such as '
                                          '"2025-01-31T12:00:00Z", got "2025-01-31"'),
        ({"time": "2025-01-31T12:00:00"}, 'time: time compares with RFC 3339 timestamps such as '
                                          '"2025-01-31T12:00:00Z", got "2025-01-31T12:00:00"'),
        ({"time": "2025-02-30T12:00:00Z"}, 'time: time compares with RFC 3339 timestamps such as '
                                           '"2025-01-31T12:00:00Z", got "2025-02-30T12:00:00Z"'),
        ({"time": 1738324800}, 'time: time compares with RFC 3339 timestamps such as '
                               '"2025-01-31T12:00:00Z", got 1738324800'),
        ({"time": {"$prefix": "2025"}}, "time.$prefix: time is a timestamp, not a string"),
        ({1: "a"}, "filter: keys must be strings, got 1"),
    ],
)
def test_invalid_filters_say_what_and_where(filter_json: Any, message: str) -> None:
    with pytest.raises(RejectedInput) as caught:
        parse_filter(filter_json)
    assert str(caught.value) == message


def nested(levels: int) -> dict[str, Any]:
    filter_json: dict[str, Any] = {"type": "a"}
    for _ in range(levels - 1):
        filter_json = {"$not": filter_json}
    return filter_json


def test_depth_is_bounded() -> None:
    parse_filter(nested(MAX_DEPTH))
    with pytest.raises(RejectedInput, match=f"filters nest more than {MAX_DEPTH} levels deep"):
        parse_filter(nested(MAX_DEPTH + 1))
    # A hostile depth fails fast rather than exhausting Python's recursion limit.
    with pytest.raises(RejectedInput, match=r"^\$not\.\$not\.\$not\.\$not\.\$not\.\$not\.\$not\.\$not: "):
        parse_filter(nested(100_000))


def test_depth_counts_field_level_not() -> None:
    field: dict[str, Any] = {"$eq": 1}
    for _ in range(MAX_DEPTH - 1):
        field = {"$not": field}
    parse_filter({"data.x": field})
    with pytest.raises(RejectedInput, match="filters nest more than"):
        parse_filter({"data.x": {"$not": field}})


def test_a_whole_filter_is_bounded_in_bytes_though_each_part_is_within_its_limits() -> None:
    limits = FilterLimits(max_bytes=65_536, max_depth=MAX_DEPTH)
    # 100 lists of 500 values of 1,000 characters each pass every per-operator limit: 50 MB.
    huge = {"data.x": {"$in": ["x" * 1000] * 70}}
    parse_filter(huge)
    with pytest.raises(RejectedInput, match=r"^filter: the filter is 70,\d{3} bytes of JSON; at most 65,536 bytes"):
        limits.check(huge)
    assert limits.check({"data.x": {"$in": ["x" * 1000] * 50}}) == parse_filter({"data.x": {"$in": ["x" * 1000] * 50}})
    # Bytes, not characters: multi-byte text counts as what it costs.
    with pytest.raises(RejectedInput, match="bytes of JSON"):
        FilterLimits(max_bytes=100, max_depth=MAX_DEPTH).check({"data.x": "ü" * 45})


def test_depth_is_a_setting_and_stored_filters_parse_at_the_deepest() -> None:
    with pytest.raises(RejectedInput, match="filters nest more than 3 levels deep"):
        FilterLimits(max_bytes=65_536, max_depth=3).check(nested(4))
    deep = nested(12)
    FilterLimits(max_bytes=65_536, max_depth=12).check(deep)
    # A deployment that allowed 12 levels stored this filter: the snapshot must still read it.
    assert parse_filter(deep, DEEPEST) == FilterLimits(max_bytes=65_536, max_depth=12).check(deep)


def test_size_is_bounded() -> None:
    parse_filter({"$or": [{"data.x": i} for i in range(MAX_OPERATORS - 1)]})
    with pytest.raises(RejectedInput, match=rf"^\$or\[{MAX_OPERATORS - 1}\]\.data\.x: the filter has more than"):
        parse_filter({"$or": [{"data.x": i} for i in range(MAX_OPERATORS)]})
    parse_filter({"data.x": {"$in": list(range(MAX_LIST_VALUES))}})
    with pytest.raises(RejectedInput, match=rf"data\.x\.\$in: more than {MAX_LIST_VALUES} values"):
        parse_filter({"data.x": {"$in": list(range(MAX_LIST_VALUES + 1))}})
    with pytest.raises(RejectedInput, match="strings are limited to 1000 characters"):
        parse_filter({"subject": "x" * 1001})
    with pytest.raises(RejectedInput, match="the path is longer than 256 characters"):
        parse_filter({"data." + "x" * 300: 1})
    with pytest.raises(RejectedInput, match="the path has more than 32 steps"):
        parse_filter({"data" + ".x" * 33: 1})


def test_error_locations_are_kept_short() -> None:
    with pytest.raises(RejectedInput) as caught:
        parse_filter({"k" * 5000: 1})
    assert len(str(caught.value)) < 200


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    | st.sampled_from(["$eq", "$in", "$not", "$or", "$and", "$gt", "$exists", "data.x", "type", "time"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["$eq", "$neq", "$in", "$nin", "$not", "$or", "$and", "$gt", "$exists", "$prefix",
                         "data.x", "data.x[0]", "data", "type", "time", "subject", "x"]) | st.text(max_size=6),
        children, max_size=4,
    ),
    max_leaves=20,
)


@settings(max_examples=400)
@given(json_values)
def test_any_json_either_parses_or_is_rejected(raw: object) -> None:
    try:
        parsed = parse_filter(raw)
    except RejectedInput:
        return
    evaluate(parsed, EVENT)
