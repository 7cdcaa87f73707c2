"""The streaming matcher against a plain backtracking reading of the standard.

The reference below shares nothing with Wayline's matcher: its patterns are tuples built
here, its conditions are Python functions written here, and it finds each match by
recursive search in preference order over the whole sorted input, as the SQL standard
describes row pattern matching. Hypothesis draws small patterns over two or three
variables, conditions on a small integer field, rows, batch boundaries, watermarks and
snapshot/restore points, and the two must agree exactly: same matches, same rows, same
variables, same measures.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.rules.streams import at, json_round_trip
from wayline.core.errors import RejectedInput
from wayline.rules import PartitionMatcher, parse_match_recognize

# -- patterns, as tuples ---------------------------------------------------------------------
# ("var", name) | ("seq", items) | ("alt", options) | ("rep", body, low, high, greedy)

Node = tuple[Any, ...]


def nullable(node: Node) -> bool:
    kind = node[0]
    if kind == "var":
        return False
    if kind == "seq":
        return all(nullable(item) for item in node[1])
    if kind == "alt":
        return any(nullable(option) for option in node[1])
    return node[2] == 0 or nullable(node[1])


def well_formed(node: Node) -> bool:
    """No quantified body may match zero rows (Wayline, like Oracle, refuses that)."""
    kind = node[0]
    if kind == "var":
        return True
    if kind in ("seq", "alt"):
        return all(well_formed(item) for item in node[1])
    return not nullable(node[1]) and well_formed(node[1])


def render(node: Node) -> str:
    kind = node[0]
    if kind == "var":
        return node[1]
    if kind == "seq":
        return " ".join(f"({render(item)})" if item[0] == "alt" else render(item) for item in node[1])
    if kind == "alt":
        return " | ".join(render(option) for option in node[1])
    _, body, low, high, greedy = node
    text = render(body) if body[0] == "var" else f"({render(body)})"
    if (low, high) == (0, None):
        quantifier = "*"
    elif (low, high) == (1, None):
        quantifier = "+"
    elif (low, high) == (0, 1):
        quantifier = "?"
    elif high is None:
        quantifier = f"{{{low},}}"
    elif low == 0:
        quantifier = f"{{,{high}}}"
    else:
        quantifier = f"{{{low},{high}}}" if low != high else f"{{{low}}}"
    return text + quantifier + ("" if greedy else "?")


def pattern_variables(node: Node) -> set[str]:
    if node[0] == "var":
        return {node[1]}
    if node[0] == "rep":
        return pattern_variables(node[1])
    return set().union(*(pattern_variables(item) for item in node[1]))


NAMES = ["A", "B", "C"]
BOUNDS = [(0, None), (1, None), (0, 1), (2, 2), (1, 3), (2, None), (0, 2)]


@st.composite
def patterns(draw: st.DrawFn, names: list[str]) -> Node:
    leaves = st.sampled_from(names).map(lambda name: ("var", name))

    def extend(children: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
        repeat = st.tuples(children, st.sampled_from(BOUNDS), st.booleans()).map(
            lambda drawn: ("rep", drawn[0], drawn[1][0], drawn[1][1], drawn[2]))
        return st.one_of(
            st.lists(children, min_size=2, max_size=3).map(lambda items: ("seq", tuple(items))),
            st.lists(children, min_size=2, max_size=3).map(lambda items: ("alt", tuple(items))),
            repeat,
        )

    node = draw(st.recursive(leaves, extend, max_leaves=5))
    assume(well_formed(node) and not nullable(node))
    return node


# -- conditions, as SQL text plus the Python that the reference runs -------------------------

@dataclass(frozen=True)
class Frame:
    """What the reference's conditions see: all rows, the match start, labels so far (incl. current)."""

    values: list[int]
    start: int
    labels: list[str]

    @property
    def current(self) -> int:
        return self.start + len(self.labels) - 1

    def rows_of(self, name: str) -> list[int]:
        return [self.start + offset for offset, label in enumerate(self.labels) if label == name]


Test = Callable[[Frame], Any]
OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b, "=": lambda a, b: a == b, "<>": lambda a, b: a != b,
}


def compare(op: str, a: Any, b: Any) -> bool | None:
    return None if a is None or b is None else OPS[op](a, b)


@dataclass(frozen=True)
class Condition:
    sql: str
    holds: Test


def atoms(name: str, names: list[str]) -> st.SearchStrategy[Condition]:
    ops = st.sampled_from(sorted(OPS))
    small = st.integers(0, 4)

    def constant(op: str, c: int) -> Condition:
        return Condition(f"{name}.v {op} {c}", lambda f: compare(op, f.values[f.current], c))

    def previous(op: str) -> Condition:
        return Condition(f"{name}.v {op} PREV({name}.v)", lambda f: compare(
            op, f.values[f.current], f.values[f.current - 1] if f.current >= 1 else None))

    def last(op: str, other: str, offset: int) -> Condition:
        def holds(f: Frame) -> Any:
            rows = f.rows_of(other)
            return compare(op, f.values[f.current], f.values[rows[-1 - offset]] if len(rows) > offset else None)
        return Condition(f"{name}.v {op} LAST({other}.v, {offset})", holds)

    def first(op: str, other: str) -> Condition:
        def holds(f: Frame) -> Any:
            rows = f.rows_of(other)
            return compare(op, f.values[f.current], f.values[rows[0]] if rows else None)
        return Condition(f"{name}.v {op} FIRST({other}.v)", holds)

    def total(op: str, other: str, c: int) -> Condition:
        def holds(f: Frame) -> Any:
            rows = f.rows_of(other)
            return compare(op, sum(f.values[row] for row in rows) if rows else None, c + 3)
        return Condition(f"SUM({other}.v) {op} {c + 3}", holds)

    def count(op: str, other: str, c: int) -> Condition:
        return Condition(f"COUNT({other}.*) {op} {c}", lambda f: compare(op, len(f.rows_of(other)), c))

    others = st.sampled_from(names)
    return st.one_of(
        st.builds(constant, ops, small),
        st.builds(previous, ops),
        st.builds(last, ops, others, st.integers(0, 1)),
        st.builds(first, ops, others),
        st.builds(total, ops, others, small),
        st.builds(count, ops, others, small),
    )


def both(left: Condition, right: Condition, conjunction: bool) -> Condition:
    def holds(f: Frame) -> Any:
        a, b = left.holds(f), right.holds(f)
        if conjunction:
            return False if a is False or b is False else (None if a is None or b is None else True)
        return True if a is True or b is True else (None if a is None or b is None else False)
    return Condition(f"({left.sql}) {'AND' if conjunction else 'OR'} ({right.sql})", holds)


def conditions(name: str, names: list[str]) -> st.SearchStrategy[Condition | None]:
    atom = atoms(name, names)
    return st.one_of(
        st.none(),  # no DEFINE: always true
        atom,
        st.builds(both, atom, atom, st.booleans()),
    )


# -- measures, likewise --------------------------------------------------------------------------

def measures(names: list[str]) -> list[tuple[str, str, Callable[[Frame, int], Any]]]:
    out: list[tuple[str, str, Callable[[Frame, int], Any]]] = [
        ("n", "COUNT(*)", lambda f, number: len(f.labels)),
        ("cls", "CLASSIFIER()", lambda f, number: f.labels[-1]),
        ("num", "MATCH_NUMBER()", lambda f, number: number),
        ("before_end", "PREV(v, 2)", lambda f, number: f.values[f.current - 2] if f.current >= 2 else None),
    ]
    for name in names:
        low = name.lower()

        def first(f: Frame, number: int, name: str = name) -> Any:
            rows = f.rows_of(name)
            return f.values[rows[0]] if rows else None

        def last_but_one(f: Frame, number: int, name: str = name) -> Any:
            rows = f.rows_of(name)
            return f.values[rows[-2]] if len(rows) > 1 else None

        def total(f: Frame, number: int, name: str = name) -> Any:
            rows = f.rows_of(name)
            return sum(f.values[row] for row in rows) if rows else None

        def before_last(f: Frame, number: int, name: str = name) -> Any:
            rows = f.rows_of(name)
            return f.values[rows[-1] - 1] if rows and rows[-1] >= 1 else None

        out += [
            (f"first_{low}", f"FIRST({name}.v)", first),
            (f"last1_{low}", f"LAST({name}.v, 1)", last_but_one),
            (f"sum_{low}", f"SUM({name}.v)", total),
            (f"count_{low}", f"COUNT({name}.*)", lambda f, number, name=name: len(f.rows_of(name))),
            (f"prev_{low}", f"PREV({name}.v)", before_last),
        ]
    return out


# -- the reference matcher -------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    pattern: Node
    names: list[str]
    defines: dict[str, Condition]
    skip: tuple[str, str | None]
    within: int | None  # seconds
    values: list[int]
    times: list[int]  # seconds, strictly increasing

    def sql(self) -> str:
        measure_list = ", ".join(f"{sql} AS {name}" for name, sql, _ in measures(self.names))
        define_list = ", ".join(f"{name} AS {condition.sql}" for name, condition in self.defines.items())
        skip = self.skip[0] + (f" {self.skip[1]}" if self.skip[1] else "")
        return (
            "SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY k ORDER BY t "
            f"MEASURES {measure_list} ONE ROW PER MATCH AFTER MATCH SKIP {skip} "
            f"PATTERN ({render(self.pattern)}) "
            + (f"WITHIN INTERVAL '{self.within}' SECOND " if self.within else "")
            + (f"DEFINE {define_list}" if define_list else "")
            + ")"
        )

    def rows(self) -> list[dict[str, Any]]:
        return [{"k": "p", "t": at(time), "v": value} for time, value in zip(self.times, self.values, strict=True)]


def preferred_match(case: Case, start: int) -> list[str] | None:
    """The labels of the first match from ``start`` in the standard's preference order."""
    return _Preference(case, start).match(case.pattern, start, [], lambda position, labels: labels)


Then = Callable[[int, list[str]], Any]


class _Preference:
    """A backtracking search from ``start``: each node tries its choices in the standard's
    preference order and hands each to ``then``, the rest of the pattern; the first result
    that is not None wins."""

    def __init__(self, case: Case, start: int) -> None:
        self.case = case
        self.start = start

    def fits(self, position: int) -> bool:
        if position >= len(self.case.values):
            return False
        times = self.case.times
        return self.case.within is None or times[position] - times[self.start] < self.case.within

    def match(self, node: Node, position: int, labels: list[str], then: Then) -> Any:
        kind = node[0]
        if kind == "var":
            return self.variable(node[1], position, labels, then)
        if kind == "seq":
            return self.sequence(node[1], position, labels, then)
        if kind == "alt":
            return self.alternation(node[1], position, labels, then)
        return self.quantified(node, position, labels, then)

    def variable(self, name: str, position: int, labels: list[str], then: Then) -> Any:
        if not self.fits(position):
            return None
        labelled = labels + [name]
        condition = self.case.defines.get(name)
        if condition is not None and condition.holds(Frame(self.case.values, self.start, labelled)) is not True:
            return None
        return then(position + 1, labelled)

    def sequence(self, items: list[Node], position: int, labels: list[str], then: Then) -> Any:
        def step(index: int, at_: int, so_far: list[str]) -> Any:
            if index == len(items):
                return then(at_, so_far)
            return self.match(items[index], at_, so_far, lambda p, l: step(index + 1, p, l))
        return step(0, position, labels)

    def alternation(self, options: list[Node], position: int, labels: list[str], then: Then) -> Any:
        for option in options:
            found = self.match(option, position, labels, then)
            if found is not None:
                return found
        return None

    def quantified(self, node: Node, position: int, labels: list[str], then: Then) -> Any:
        _, body, low, high, greedy = node

        def iterate(count: int, at_: int, so_far: list[str]) -> Any:
            def more() -> Any:
                if high is not None and count >= high:
                    return None
                return self.match(body, at_, so_far, lambda p, l: iterate(count + 1, p, l))

            def stop() -> Any:
                return then(at_, so_far) if count >= low else None
            for attempt in ((more, stop) if greedy else (stop, more)):
                found = attempt()
                if found is not None:
                    return found
            return None
        return iterate(0, position, labels)


def reference(case: Case) -> list[tuple[int, tuple[str, ...], dict[str, Any]]]:
    out = []
    start = 0
    while start < len(case.values):
        labels = preferred_match(case, start)
        if labels is None:
            start += 1
            continue
        frame = Frame(case.values, start, labels)
        number = len(out) + 1
        out.append((start, tuple(labels), {name: compute(frame, number) for name, _, compute in measures(case.names)}))
        how, variable = case.skip
        if how == "PAST LAST ROW":
            start = frame.current + 1
        elif how == "TO NEXT ROW":
            start += 1
        else:
            rows = frame.rows_of(variable)  # type: ignore[arg-type]
            # The standard fails here at run time; Wayline must have refused such a rule.
            assert rows, f"SKIP {how} {variable}: no such row in {labels}"
            target = rows[0] if how == "TO FIRST" else rows[-1]
            assert target != start, f"SKIP {how} {variable} would not advance past {start}"
            start = target
    return out


@st.composite
def cases(draw: st.DrawFn) -> Case:
    names = NAMES[: draw(st.integers(2, 3))]
    pattern = draw(patterns(names))
    used = sorted(pattern_variables(pattern))
    defines = {}
    for name in used:
        condition = draw(conditions(name, used))
        if condition is not None:
            defines[name] = condition
    skip = draw(st.sampled_from([
        ("PAST LAST ROW", None), ("TO NEXT ROW", None),
        ("TO FIRST", draw(st.sampled_from(used))), ("TO LAST", draw(st.sampled_from(used))),
    ]))
    count = draw(st.integers(4, 30))
    values = draw(st.lists(st.integers(0, 4), min_size=count, max_size=count))
    gaps = draw(st.lists(st.integers(1, 2), min_size=count, max_size=count))
    times = [sum(gaps[: index + 1]) for index in range(count)]
    within = draw(st.sampled_from([None, None, 3, 6]))
    return Case(pattern, used, defines, skip, within, values, times)


def spec_for(case: Case) -> Any:
    try:
        return parse_match_recognize(case.sql())
    except RejectedInput as exc:
        # Only the skip target may be refused: it would fail at run time in the standard.
        assert "AFTER MATCH SKIP" in str(exc), str(exc)
        assume(False)


def observed(matches: list[Any]) -> list[tuple[int, tuple[str, ...], dict[str, Any]]]:
    return [(match.start, match.labels, dict(match.measures)) for match in matches]


PLAIN = (dict, list, tuple, str, int, float, bool, type(None), datetime)


def assert_plain(value: Any) -> None:
    assert isinstance(value, PLAIN), type(value)
    if isinstance(value, dict):
        for key, item in value.items():
            assert isinstance(key, str)
            assert_plain(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            assert_plain(item)


PROPERTY_SETTINGS = settings(max_examples=300, deadline=None,
                             suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])


@pytest.mark.slow
@PROPERTY_SETTINGS
@given(case=cases(), seed=st.integers(0, 2**32 - 1))
def test_micro_batches_in_order_agree_with_the_reference(case: Case, seed: int) -> None:
    spec = spec_for(case)
    rng = random.Random(seed)
    rows = case.rows()
    matcher = PartitionMatcher(spec)
    found = []
    index = 0
    while index < len(rows):
        size = rng.randint(1, 5)
        batch = rows[index:index + size]
        index += size
        # Any watermark up to the next row's time is truthful.
        watermark = None
        if rng.random() < 0.5:
            upper = rows[index]["t"] if index < len(rows) else batch[-1]["t"] + timedelta(seconds=30)
            watermark = batch[-1]["t"] + (upper - batch[-1]["t"]) * rng.random()
        found += matcher.feed(batch, watermark)
        if rng.random() < 0.3:
            state = matcher.snapshot()
            assert_plain(state)
            matcher = PartitionMatcher(spec, json_round_trip(state))
    found += matcher.finish()
    assert observed(found) == reference(case)
    assert matcher.dropped == 0


@pytest.mark.slow
@PROPERTY_SETTINGS
@given(case=cases(), seed=st.integers(0, 2**32 - 1), delay=st.integers(1, 4))
def test_out_of_order_rows_within_the_watermark_agree_with_the_reference(case: Case, seed: int, delay: int) -> None:
    spec = spec_for(case)
    rng = random.Random(seed)
    rows = case.rows()
    # Each row arrives up to ``delay`` seconds late; the watermark trails the newest time by ``delay``.
    arrival = sorted(rows, key=lambda row: row["t"] + timedelta(seconds=rng.random() * delay))
    matcher = PartitionMatcher(spec, reorder=True)
    found = []
    newest = None
    index = 0
    while index < len(arrival):
        size = rng.randint(1, 6)
        batch = arrival[index:index + size]
        index += size
        newest = max([row["t"] for row in batch] + ([newest] if newest else []))
        found += matcher.feed(batch, newest - timedelta(seconds=delay))
        if rng.random() < 0.3:
            matcher = PartitionMatcher(spec, json_round_trip(matcher.snapshot()), reorder=True)
    found += matcher.finish()
    assert observed(found) == reference(case)
    assert matcher.dropped == 0



