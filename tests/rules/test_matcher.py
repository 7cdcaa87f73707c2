"""Row pattern matching, case by case, with the matches worked out by hand."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.rules.streams import at, by_kind, json_round_trip, kinds, prices, rule, run, spans, timed
from wayline.core.errors import GiveUp
from wayline.rules import PartitionMatcher, parse_match_recognize

KIND_DEFINES = "A AS kind IN ('a', 'x'), B AS kind IN ('b', 'x'), C AS kind IN ('c', 'x')"


# -- classic patterns ------------------------------------------------------------------------

V_SHAPE = rule(
    "STRT DOWN+ UP+",
    "DOWN AS DOWN.price < PREV(DOWN.price), UP AS UP.price > PREV(UP.price)",
    measures="STRT.price AS start_price, LAST(DOWN.price) AS bottom_price, LAST(UP.price) AS end_price",
)


def test_v_shape_price_drop_and_recovery() -> None:
    matches = run(V_SHAPE, prices(10, 8, 6, 7, 9, 8, 5, 6, 4))
    assert spans(matches) == [(0, "STRT DOWN DOWN UP UP"), (5, "STRT DOWN UP")]
    assert [dict(match.measures) for match in matches] == [
        {"start_price": 10, "bottom_price": 6, "end_price": 9},
        {"start_price": 8, "bottom_price": 5, "end_price": 6},
    ]
    assert [match.number for match in matches] == [1, 2]


def test_a_greedy_match_is_emitted_once_the_row_that_ends_it_arrives() -> None:
    rows = prices(10, 8, 6, 7, 9, 8, 5, 6, 4)
    matcher = PartitionMatcher(parse_match_recognize(V_SHAPE))
    assert matcher.feed(rows[:5]) == []  # the recovery may still go on
    assert spans(matcher.feed(rows[5:6])) == [(0, "STRT DOWN DOWN UP UP")]
    assert matcher.feed(rows[6:8]) == []
    assert spans(matcher.feed(rows[8:])) == [(5, "STRT DOWN UP")]
    assert matcher.finish() == []


FAILED_LOGINS = """
    SELECT * FROM events MATCH_RECOGNIZE (
      PARTITION BY user
      ORDER BY t
      MEASURES FIRST(F.t) AS first_failure, S.t AS success_at, COUNT(F.*) AS failures
      ONE ROW PER MATCH
      AFTER MATCH SKIP PAST LAST ROW
      PATTERN (F{3,} S)
      WITHIN INTERVAL '5' MINUTE
      DEFINE F AS F.outcome = 'failure', S AS S.outcome = 'success'
    )
"""


def logins(*events: tuple[float, str]) -> list[dict[str, object]]:
    return [{"user": "u1", "t": at(minutes * 60), "outcome": outcome} for minutes, outcome in events]


def test_three_failed_logins_then_a_success_within_five_minutes() -> None:
    rows = logins(
        (0, "failure"), (1, "failure"), (2, "failure"), (3, "success"),
        (10, "failure"), (11, "failure"), (13, "failure"), (16, "success"),  # 6 minutes: too slow
        (20, "failure"), (21, "failure"), (22, "failure"), (23, "failure"), (24, "success"),
    )
    matches = run(FAILED_LOGINS, rows)
    assert [dict(match.measures) for match in matches] == [
        {"first_failure": at(0), "success_at": at(180), "failures": 3},
        {"first_failure": at(1200), "success_at": at(1440), "failures": 4},
    ]


@pytest.mark.parametrize(("success_after", "found"), [(299.999, 1), (300, 0)])
def test_within_is_half_open(success_after: float, found: int) -> None:
    rows = logins((0, "failure"), (1, "failure"), (2, "failure"))
    rows.append({"user": "u1", "t": at(success_after), "outcome": "success"})
    assert len(run(FAILED_LOGINS, rows)) == found


# -- preference: greedy, reluctant, alternation ----------------------------------------------

@pytest.mark.parametrize(("pattern", "labels"), [
    ("A B+ C*", "A B B B"),
    ("A B+? C*", "A B C C"),
    ("A B+? C*?", "A B"),
    ("A B{2,3}? C*?", "A B B"),
    ("A B* C", "A B B C"),
    ("A B*? C", "A C"),
])
def test_greedy_takes_as_many_rows_as_it_can_and_reluctant_as_few(pattern: str, labels: str) -> None:
    assert spans(run(rule(pattern, "A AS kind = 'a'"), kinds("axxx"))) == [(0, labels)]


def test_a_reluctant_match_is_emitted_at_once_and_a_greedy_one_waits() -> None:
    reluctant = PartitionMatcher(parse_match_recognize(rule("A B+?", "A AS kind = 'a', B AS kind = 'x'")))
    assert spans(reluctant.feed(kinds("ax"))) == [(0, "A B")]
    greedy = PartitionMatcher(parse_match_recognize(rule("A B+", "A AS kind = 'a', B AS kind = 'x'")))
    rows = kinds("axxc")
    assert greedy.feed(rows[:3]) == []
    assert spans(greedy.feed(rows[3:])) == [(0, "A B B")]


def test_greedy_quantifiers_backtrack_where_flink_does_not() -> None:
    """The example from docs/rules-semantics.md: Flink 2.3 finds nothing here."""
    sql = rule("A+ B C", "A AS A.price > 12, B AS B.kind = 'down', C AS C.kind = 'flat'",
               measures="FIRST(A.price) AS a, B.price AS b, C.price AS c")
    rows = timed([{"price": 15, "kind": "up"}, {"price": 16, "kind": "down"}, {"price": 11, "kind": "flat"}])
    matches = run(sql, rows)
    assert spans(matches) == [(0, "A B C")]
    assert dict(matches[0].measures) == {"a": 15, "b": 16, "c": 11}


@pytest.mark.parametrize(("pattern", "labels"), [
    ("(A | B C) C", "A C"),  # the left alternative wins although a longer match exists
    ("(B C | A) C", "B C C"),
])
def test_alternatives_are_preferred_left_to_right(pattern: str, labels: str) -> None:
    define = "A AS v > 0, B AS v > 0, C AS v > 0"
    assert spans(run(rule(pattern, define), timed({"v": 1} for _ in range(3)))) == [(0, labels)]


def test_an_alternative_that_fails_later_gives_way_to_the_next() -> None:
    assert spans(run(rule("(A A | A) B", "A AS kind = 'a', B AS kind = 'b'"), kinds("ab"))) == [(0, "A B")]


@pytest.mark.parametrize(("pattern", "word", "expected"), [
    ("(A B)+ C", "ababc", [(0, "A B A B C")]),
    ("(A B){2} C", "abababc", [(2, "A B A B C")]),
    ("A (B | C)* D", "abcbd", [(0, "A B C B D")]),
    ("A (B C | C)+ D", "abccd", [(0, "A B C C D")]),
])
def test_groups_and_alternation(pattern: str, word: str, expected: list[tuple[int, str]]) -> None:
    assert spans(run(rule(pattern, by_kind(pattern)), kinds(word))) == expected


@pytest.mark.parametrize(("pattern", "word", "expected"), [
    ("A{2} B", "aaaab", [(2, "A A B")]),
    ("A{2,} B", "aaaab", [(0, "A A A A B")]),
    ("A{1,3} B", "aaaab", [(1, "A A A B")]),
    ("A{,2} B", "aaaab", [(2, "A A B")]),
    ("A{,2} B", "b", [(0, "B")]),
    ("A{2,3}? B", "aaaab", [(1, "A A A B")]),
    ("A{2,}? B", "aaaab", [(0, "A A A A B")]),
])
def test_bounded_quantifiers(pattern: str, word: str, expected: list[tuple[int, str]]) -> None:
    assert spans(run(rule(pattern, "A AS kind = 'a', B AS kind = 'b'"), kinds(word))) == expected


# -- AFTER MATCH SKIP --------------------------------------------------------------------------

@pytest.mark.parametrize(("skip", "expected"), [
    ("PAST LAST ROW", [(0, "A B C"), (3, "A B B B C")]),
    ("TO NEXT ROW", [(0, "A B C"), (2, "A A B B B C"), (3, "A B B B C"), (5, "A B C")]),
    ("TO FIRST B", [(0, "A B C"), (2, "A A B B B C"), (5, "A B C")]),
    ("TO LAST B", [(0, "A B C"), (2, "A A B B B C")]),
])
def test_every_skip_mode(skip: str, expected: list[tuple[int, str]]) -> None:
    # Rows a b x a b x b c; x can be any variable, so where the next search starts matters.
    assert spans(run(rule("A+ B+ C", KIND_DEFINES, skip=skip), kinds("abxabxbc"))) == expected


# -- WITHIN and the watermark ------------------------------------------------------------------

def within_rule(pattern: str) -> str:
    return rule(pattern, by_kind(pattern), within="INTERVAL '1' MINUTE")


def test_the_watermark_closes_a_greedy_match_when_its_window_ends() -> None:
    matcher = PartitionMatcher(parse_match_recognize(within_rule("A B+")))
    rows = [{"t": at(0), "kind": "a"}, {"t": at(10), "kind": "b"}, {"t": at(20), "kind": "b"}]
    assert matcher.feed(rows) == []
    assert matcher.advance_watermark(at(59.9)) == []
    assert spans(matcher.advance_watermark(at(60))) == [(0, "A B B")]
    assert matcher.size.rows == 0


def test_a_partial_match_older_than_within_is_dropped() -> None:
    matcher = PartitionMatcher(parse_match_recognize(within_rule("A B C")))
    assert matcher.feed([{"t": at(0), "kind": "a"}, {"t": at(10), "kind": "b"}]) == []
    assert (matcher.size.rows, matcher.size.threads) == (2, 1)
    assert matcher.feed([], watermark=at(61)) == []
    assert (matcher.size.rows, matcher.size.threads, matcher.size.total) == (0, 0, 0)


def test_a_row_past_the_window_ends_the_partial_match_and_may_start_another() -> None:
    rows = [{"t": at(0), "kind": "a"}, {"t": at(10), "kind": "b"}, {"t": at(70), "kind": "a"},
            {"t": at(80), "kind": "b"}, {"t": at(90), "kind": "c"}]
    assert spans(run(within_rule("A B C"), rows)) == [(2, "A B C")]


def test_out_of_order_rows_wait_for_the_watermark() -> None:
    spec = parse_match_recognize(within_rule("A B+ C"))
    matcher = PartitionMatcher(spec, reorder=True)
    c, b2, a, b1 = ({"t": at(s), "kind": k} for s, k in [(4, "c"), (3, "b"), (1, "a"), (2, "b")])
    assert matcher.feed([c, b2], watermark=at(0)) == []
    assert matcher.feed([a, b1], watermark=at(3)) == []  # c and the second b are not yet safe
    assert (matcher.size.rows, matcher.size.pending) == (2, 2)
    assert spans(matcher.feed([], watermark=at(5))) == [(0, "A B B C")]


def test_rows_older_than_the_watermark_are_dropped_and_counted() -> None:
    for reorder in (False, True):
        matcher = PartitionMatcher(parse_match_recognize(within_rule("A B")), reorder=reorder)
        matcher.feed([{"t": at(10), "kind": "a"}], watermark=at(5))
        matcher.feed([{"t": at(4), "kind": "b"}, {"t": None, "kind": "b"}])
        assert matcher.dropped == 2


def test_in_order_mode_drops_a_row_older_than_the_latest() -> None:
    matcher = PartitionMatcher(parse_match_recognize(within_rule("A B")))
    assert matcher.feed([{"t": at(10), "kind": "a"}, {"t": at(9), "kind": "b"}, {"t": at(11), "kind": "b"}])
    assert matcher.dropped == 1


# -- navigation and aggregates -----------------------------------------------------------------

def test_first_and_last_with_offsets_in_measures() -> None:
    measures = ", ".join([
        "FIRST(A.v) AS f0", "FIRST(A.v, 1) AS f1", "FIRST(A.v, 9) AS f9", "LAST(A.v) AS l0",
        "LAST(A.v, 2) AS l2", "LAST(B.v, 1) AS lb1", "B.v AS b", "v AS last_row", "FIRST(v) AS first_row",
        "LAST(v, 1) AS before_last_row", "A.v * 10 + B.v AS mixed",
    ])
    sql = rule("A+ B", "A AS kind = 'a', B AS kind = 'b'", measures=measures)
    rows = timed({"kind": kind, "v": v} for kind, v in zip("aaaab", range(1, 6), strict=True))
    assert dict(run(sql, rows)[0].measures) == {
        "f0": 1, "f1": 2, "f9": None, "l0": 4, "l2": 2, "lb1": None, "b": 5, "last_row": 5,
        "first_row": 1, "before_last_row": 4, "mixed": 45,
    }


@pytest.mark.parametrize(("last_value", "found"), [(11, 1), (12, 0)])
def test_first_and_last_with_offsets_in_define(last_value: int, found: int) -> None:
    sql = rule("A{3} B", "B AS B.v = LAST(A.v, 2) + 10 AND FIRST(A.v, 1) = 2")
    rows = timed({"v": v} for v in (1, 2, 3, last_value))
    assert len(run(sql, rows)) == found


def test_prev_reads_rows_before_the_match() -> None:
    rising = rule("UP{3}", "UP AS UP.v > PREV(UP.v)")
    assert spans(run(rising, timed({"v": v} for v in (5, 1, 2, 3, 4)))) == [(2, "UP UP UP")]
    echo = rule("A A", "A AS A.v = PREV(A.v, 2)")
    assert spans(run(echo, timed({"v": v} for v in (1, 2, 1, 2)))) == [(2, "A A")]


@pytest.mark.parametrize(("first", "found"), [(3, [(1, "A B")]), (7, [])])
def test_prev_of_another_variable_steps_back_from_its_last_row(first: int, found: list[tuple[int, str]]) -> None:
    sql = rule("A B", "B AS B.v > PREV(A.v)")
    assert spans(run(sql, timed({"v": v} for v in (first, 1, 5)))) == found


def test_another_variable_in_define_means_its_last_row_so_far() -> None:
    sql = rule("A+ B", "A AS A.kind = 'a', B AS B.kind = 'b' AND B.v > A.v")
    rows = timed({"kind": kind, "v": v} for kind, v in [("a", 1), ("a", 9), ("b", 5), ("a", 1), ("b", 5)])
    assert spans(run(sql, rows)) == [(3, "A B")]


def test_aggregates_in_define() -> None:
    sql = rule("A+ B", "A AS SUM(A.v) <= 10, B AS B.v > AVG(A.v) AND COUNT(A.*) >= 2 AND B.v >= MAX(A.v)",
               measures="SUM(A.v) AS total, MIN(A.v) AS low, COUNT(*) AS n")
    matches = run(sql, timed({"v": v} for v in (4, 5, 3, 6)))
    # From row 0, A takes 4 and 5 (sum 9) but 3 is not above their average, and A=[4], B=5
    # has one A only; from row 1, A takes 5 and 3 (sum 8) and B=6 passes every test.
    assert spans(matches) == [(1, "A A B")]
    assert dict(matches[0].measures) == {"total": 8, "low": 3, "n": 3}


def test_case_null_logic_and_nested_columns() -> None:
    sql = rule(
        "A B", "A AS A.data.level IS NOT NULL AND A.data.level BETWEEN 1 AND 3, "
        "B AS (B.data.flag OR B.data.missing = 1) AND B.data.code IN ('x', 'y')",
        measures="CASE WHEN A.data.level > 2 THEN 'high' ELSE 'low' END AS level, "
                 "CASE B.data.code WHEN 'x' THEN 1 WHEN 'y' THEN 2 END AS code, A.data.level / 2 AS half",
    )
    rows = timed([{"data": {"level": 3}}, {"data": {"flag": True, "code": "y"}}])
    assert [dict(match.measures) for match in run(sql, rows)] == [{"level": "high", "code": 2, "half": 1.5}]


def test_interval_arithmetic_on_times() -> None:
    sql = rule("A B", "B AS B.t - A.t <= INTERVAL '2' SECOND")
    rows = [{"t": at(0)}, {"t": at(3)}, {"t": at(4)}]
    assert spans(run(sql, rows)) == [(1, "A B")]


# -- failures at run time ------------------------------------------------------------------------

def test_division_by_zero_gives_up() -> None:
    matcher = PartitionMatcher(parse_match_recognize(rule("A", "A AS 10 / A.v > 1")))
    with pytest.raises(GiveUp, match=r"DEFINE A: cannot evaluate 10 / A.v: division by zero"):
        matcher.feed(timed([{"v": 0}]))


def test_comparing_values_of_different_types_gives_up() -> None:
    matcher = PartitionMatcher(parse_match_recognize(rule("A", "A AS A.v > 1")))
    with pytest.raises(GiveUp, match=r"DEFINE A: cannot evaluate A.v > 1 on 'x'"):
        matcher.feed(timed([{"v": "x"}]))


def test_an_event_time_that_is_not_a_timestamp_gives_up() -> None:
    matcher = PartitionMatcher(parse_match_recognize(rule("A", "A AS TRUE")))
    with pytest.raises(GiveUp, match="ORDER BY t must be a timestamp"):
        matcher.feed([{"t": 5}])


def test_too_many_ways_to_match_gives_up_instead_of_running_out_of_memory() -> None:
    # Every subset of rows mapped to A has its own SUM, so no two threads are alike.
    sql = rule("(A | B)+ C", "C AS SUM(A.v) = -1")
    matcher = PartitionMatcher(parse_match_recognize(sql), max_threads=50)
    with pytest.raises(GiveUp, match="more than 50 ways of matching"):
        matcher.feed(timed({"v": 2 ** n} for n in range(10)))


# -- state -------------------------------------------------------------------------------------

def test_state_survives_a_snapshot_in_the_middle_of_a_match() -> None:
    spec = parse_match_recognize(V_SHAPE)
    rows = prices(10, 8, 6, 7, 9, 8, 5, 6, 4)
    first = PartitionMatcher(spec)
    assert first.feed(rows[:4]) == []
    second = PartitionMatcher(spec, first.snapshot())
    assert spans(second.feed(rows[4:]) + second.finish()) == [(0, "STRT DOWN DOWN UP UP"), (5, "STRT DOWN UP")]


def test_only_rows_of_live_partial_matches_are_kept() -> None:
    matcher = PartitionMatcher(parse_match_recognize(rule("A B", "A AS kind = 'a', B AS kind = 'b'")))
    matcher.feed(kinds("c" * 10_000))
    assert matcher.size.rows == 0
    matcher.feed([{"t": at(20_000), "kind": "a"}])
    assert matcher.size.rows == 1
    # PREV(v, 3) needs three rows before any start
    looking_back = PartitionMatcher(parse_match_recognize(rule("A", "A AS A.v > PREV(A.v, 3)")))
    looking_back.feed(timed({"v": 0} for _ in range(100)))
    assert looking_back.size.rows == 3


def test_matching_continues_after_finish_with_new_rows() -> None:
    matcher = PartitionMatcher(parse_match_recognize(rule("A B+", "A AS kind = 'a', B AS kind = 'b'")))
    matcher.feed(kinds("abb"))
    assert spans(matcher.finish()) == [(0, "A B B")]
    assert spans(matcher.feed([{"t": at(9), "kind": "a"}, {"t": at(10), "kind": "b"}]) + matcher.finish()) == [
        (3, "A B"),
    ]


def test_match_end_is_its_last_row() -> None:
    match = run(rule("A B+", "A AS kind = 'a', B AS kind = 'b'"), kinds("cabb"))[0]
    assert (match.start, match.end) == (1, 3)


def test_rows_may_carry_time_zone_naive_timestamps() -> None:
    rows = [{"t": (at(0) + timedelta(seconds=s)).replace(tzinfo=None), "kind": k} for s, k in [(0, "a"), (1, "b")]]
    assert spans(run(rule("A B", "A AS kind = 'a', B AS kind = 'b'"), rows)) == [(0, "A B")]


def test_a_count_lapse_numbers_a_match_long_after_the_previous_one_afresh() -> None:
    numbered = parse_match_recognize(rule("A B", by_kind("A B"), measures="MATCH_NUMBER() AS n"))
    # Matches at 0-1 s, 3-4 s, then 10-11 s: 6 s after the previous match ended.
    rows = [{**row, "t": at(seconds)} for row, seconds in zip(kinds("ababab"), (0, 1, 3, 4, 10, 11), strict=True)]
    forever = PartitionMatcher(numbered)
    assert [m.measures["n"] for m in forever.feed(rows) + forever.finish()] == [1, 2, 3]
    lapsing = PartitionMatcher(numbered, count_lapse=timedelta(seconds=6))
    assert [m.measures["n"] for m in lapsing.feed(rows[:4])] == [1, 2]
    # Nothing is kept but the count, which lapses 6 s after the last match's end.
    assert (lapsing.size.total, lapsing.wake_at) == (0, lapsing.snapshot()["last_match"] + 6_000_000)
    resumed = PartitionMatcher(numbered, lapsing.snapshot(), count_lapse=timedelta(seconds=6))
    assert [m.measures["n"] for m in resumed.feed(rows[4:]) + resumed.finish()] == [1]
    assert PartitionMatcher(numbered, lapsing.snapshot(), count_lapse=timedelta(seconds=7)).feed(rows[4:]) \
        [0].measures["n"] == 3


def test_further_order_by_columns_order_the_rows_of_one_time() -> None:
    # Rows of one time, arriving out of their seq order: A then B only in seq order.
    sql = rule("A B", by_kind("A B"), measures="A.id AS a, B.id AS b").replace("ORDER BY t", "ORDER BY t, seq")
    spec = parse_match_recognize(sql)
    rows = [{"t": at(0), "seq": seq, "kind": kind, "id": f"r{seq}"} for seq, kind in ((2, "b"), (1, "a"), (3, "b"))]
    assert [dict(m.measures) for m in run(sql, rows)] == [{"a": "r1", "b": "r2"}]
    # Without the column the rows keep their arrival order: b, a, b.
    assert [dict(m.measures) for m in run(sql.replace("ORDER BY t, seq", "ORDER BY t"), rows)] == [
        {"a": "r1", "b": "r3"}]
    # The rows wait in order through a snapshot in plain data, and NULLs come last unless told.
    matcher = PartitionMatcher(spec)
    assert matcher.feed(rows[:2]) == []
    resumed = PartitionMatcher(spec, json_round_trip(matcher.snapshot()))
    assert [dict(m.measures) for m in resumed.feed(rows[2:]) + resumed.finish()] == [{"a": "r1", "b": "r2"}]
    unnumbered = [{"t": at(0), "seq": 1, "kind": "b", "id": "r1"}, {"t": at(0), "seq": None, "kind": "a", "id": "r0"}]
    assert run(sql, unnumbered) == []  # b, then a
    first = sql.replace("ORDER BY t, seq", "ORDER BY t, seq NULLS FIRST")
    assert [dict(m.measures) for m in run(first, unnumbered)] == [{"a": "r0", "b": "r1"}]


def test_an_order_by_column_that_cannot_be_ordered_stops_the_rule() -> None:
    sql = rule("A", "A AS TRUE").replace("ORDER BY t", "ORDER BY t, seq")
    matcher = PartitionMatcher(parse_match_recognize(sql))
    with pytest.raises(GiveUp, match=r"ORDER BY seq: cannot order by \{'n': 1\}"):
        matcher.feed([{"t": at(0), "seq": {"n": 1}}])


def test_scalar_functions_casts_and_timestampdiff_as_flink_evaluates_them() -> None:
    sql = rule(
        "A B",
        "A AS ABS(A.v) > 2 AND LOWER(A.k) = 'x' AND COALESCE(A.n, 0) = 0, "
        "B AS CAST(B.s AS DOUBLE) > 1.5 AND TIMESTAMPDIFF(SECOND, A.t, B.t) >= 90",
        measures="MATCH_ROWTIME() AS rt, TIMESTAMPDIFF(MINUTE, FIRST(A.t), LAST(B.t)) AS minutes, "
                 "TIMESTAMPDIFF(MINUTE, LAST(B.t), FIRST(A.t)) AS back, UPPER(B.k) AS k, "
                 "TRY_CAST(B.k AS INT) AS bad, CAST(B.s AS BIGINT) AS whole, CAST(A.v AS STRING) AS text, "
                 "TIMESTAMPDIFF(SECOND, CAST(A.when AS TIMESTAMP), B.t) AS since",
    )
    rows = [{"t": at(0), "v": -3, "k": "X", "s": "0", "n": None, "when": "2026-03-01T08:59:00+00:00"},
            {"t": at(119), "v": 0, "k": "abc", "s": "2"}]
    [match] = run(sql, rows)
    # Whole units, toward zero either way: 119 s is one minute.
    assert dict(match.measures) == {"rt": at(119), "minutes": 1, "back": -1, "k": "ABC", "bad": None, "whole": 2,
                                    "text": "-3", "since": 179}
    assert run(sql, [rows[0], {**rows[1], "t": at(89)}]) == []  # 89 s: not yet 90


@pytest.mark.parametrize(("define", "error"), [
    ("A AS CAST(A.s AS DOUBLE) > 1", r"cannot evaluate CAST\(A.s AS DOUBLE\) on 'abc'"),
    ("A AS ABS(A.s) > 1", r"cannot evaluate ABS\(A.s\): ABS of 'abc'"),
    ("A AS TIMESTAMPDIFF(SECOND, A.s, A.t) > 1", "'abc' and .* are not both timestamps"),
])
def test_a_function_on_a_value_of_the_wrong_type_stops_the_rule(define: str, error: str) -> None:
    with pytest.raises(GiveUp, match=error):
        run(rule("A", define), [{"t": at(0), "s": "abc"}])
