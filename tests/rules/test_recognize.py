from datetime import timedelta

import pytest

from tests.rules.streams import rule
from wayline.core.errors import RejectedInput
from wayline.rules import AfterMatchSkip, OutputColumn, SkipTo, parse_match_recognize

FULL = """
SELECT m.tenantid, m.symbol, m.bottom AS lowest, m.n
FROM events MATCH_RECOGNIZE (
  PARTITION BY tenantid, data.symbol
  ORDER BY time
  MEASURES FIRST(A.data.price) AS start_price, FINAL LAST(B.data.price) AS bottom, RUNNING COUNT(B.*) AS n
  ONE ROW PER MATCH
  AFTER MATCH SKIP TO LAST B
  PATTERN (A B+ C)
  WITHIN INTERVAL '5' MINUTE
  DEFINE
    B AS B.data.price < PREV(B.data.price),
    C AS C.data.price > LAST(B.data.price) AND kind = 'trade'
) AS m
"""


def test_a_full_rule_becomes_a_pattern_spec() -> None:
    spec = parse_match_recognize(FULL)
    assert spec.partition_by == (("tenantid",), ("data", "symbol"))
    assert spec.order_by == ("time",)
    assert [measure.name for measure in spec.measures] == ["start_price", "bottom", "n"]
    assert [measure.sql for measure in spec.measures] == ["FIRST(A.data.price)", "LAST(B.data.price)", "COUNT(B.*)"]
    assert spec.skip == AfterMatchSkip(SkipTo.LAST, "B")
    assert str(spec.skip) == "AFTER MATCH SKIP TO LAST B"
    assert str(spec.pattern) == "A B+ C"
    assert spec.within == timedelta(minutes=5)
    assert spec.variables == ("A", "B", "C")
    assert [(define.variable, define.sql) for define in spec.defines] == [
        ("A", "TRUE"),
        ("B", "B.data.price < PREV(B.data.price)"),
        ("C", "C.data.price > LAST(B.data.price) AND kind = 'trade'"),
    ]
    assert spec.select == (
        OutputColumn("tenantid", "tenantid"), OutputColumn("symbol", "symbol"),
        OutputColumn("lowest", "bottom"), OutputColumn("n", "n"),
    )
    assert spec.columns == {("tenantid",), ("data", "symbol"), ("time",), ("data", "price"), ("kind",)}
    # B's PREV reads A's row at the earliest: nothing before the match is kept.
    assert spec.lookback == 0


@pytest.mark.parametrize(("pattern", "define", "lookback"), [
    ("A B", "A AS A.data.price > PREV(A.data.price)", 1),  # A starts the match
    ("A B C", "C AS C.data.price > PREV(C.data.price, 3)", 1),  # C is the third row
    ("A B* C", "C AS C.data.price > PREV(C.data.price)", 0),
    ("A? B", "B AS B.data.price > PREV(B.data.price)", 1),  # B may start the match
    ("A B", "B AS B.data.price > PREV(A.data.price)", 1),  # from A's row, not B's
])
def test_lookback_counts_only_rows_before_the_match(pattern: str, define: str, lookback: int) -> None:
    spec = parse_match_recognize(f"""SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY tenantid
        ORDER BY event_time MEASURES COUNT(*) AS n PATTERN ({pattern}) WITHIN INTERVAL '1' MINUTE DEFINE {define})""")
    assert spec.lookback == lookback


def test_select_star_gives_partition_columns_then_measures() -> None:
    spec = parse_match_recognize(FULL.replace("m.tenantid, m.symbol, m.bottom AS lowest, m.n", "*"))
    assert [column.name for column in spec.select] == ["tenantid", "symbol", "start_price", "bottom", "n"]


def test_defaults() -> None:
    spec = parse_match_recognize("SELECT * FROM events MATCH_RECOGNIZE (ORDER BY t PATTERN (a b) DEFINE a AS x > 1)")
    assert spec.skip == AfterMatchSkip(SkipTo.PAST_LAST_ROW)
    assert spec.within is None
    assert spec.partition_by == ()
    assert spec.measures == ()


@pytest.mark.parametrize(("within", "expected"), [
    ("INTERVAL '10' SECOND", timedelta(seconds=10)),
    ("INTERVAL '5 minutes'", timedelta(minutes=5)),
    ("INTERVAL '1.5' HOURS", timedelta(minutes=90)),
    ("INTERVAL '250' MILLISECOND", timedelta(milliseconds=250)),
    ("INTERVAL '2' DAY", timedelta(days=2)),
])
def test_within_intervals(within: str, expected: timedelta) -> None:
    assert parse_match_recognize(rule("A B", "A AS TRUE", within=within)).within == expected


@pytest.mark.parametrize(("define", "current_row_only"), [
    ("A.v > 1 AND kind = 'x' OR data.flag", True),
    ("CASE WHEN v IS NULL THEN FALSE ELSE v IN (1, 2) END", True),
    ("A.v > PREV(A.v)", False),
    ("A.v > B.v", False),
    ("A.v > LAST(B.v)", False),
    ("LAST(A.v) > 1", True),  # the current row, under running semantics
    ("COUNT(A.*) < 3", False),
])
def test_each_define_says_whether_it_reads_only_the_current_row(define: str, current_row_only: bool) -> None:
    spec = parse_match_recognize(rule("A B", f"A AS {define}"))
    assert spec.defines[0].reads_only_current_row is current_row_only
    assert spec.defines[1].reads_only_current_row is True  # B is undefined: TRUE


def clause(text: str) -> str:
    """Put one clause into an otherwise valid rule."""
    base = {
        "measures": "", "skip": "", "pattern": "A B+ C", "within": "", "rows": "ONE ROW PER MATCH",
        "define": "A AS A.v > 0, B AS B.v < PREV(B.v), C AS C.v > 0", "order": "ORDER BY t", "tail": "",
    }
    for change in text.split("&"):
        key, _, value = change.partition("=")
        base[key] = value
    return f"""SELECT * FROM events MATCH_RECOGNIZE (
  {base['order']}
  {'MEASURES ' + base['measures'] if base['measures'] else ''}
  {base['rows']}
  {'AFTER MATCH SKIP ' + base['skip'] if base['skip'] else ''}
  PATTERN ({base['pattern']})
  {'WITHIN ' + base['within'] if base['within'] else ''}
  DEFINE {base['define']}
) AS m {base['tail']}"""


@pytest.mark.parametrize(("change", "message"), [
    ("pattern=A B+ * C", "PATTERN (A B+ * C): a quantifier cannot follow another quantifier at position 6"),
    ("define=A AS FOO(A.v) > 1", "DEFINE A: function FOO() is not supported (line 8, column 15)"),
    ("define=A AS A.v LIKE 'x%'", "DEFINE A: A.v LIKE 'x%' is not supported (line 8, column 15)"),
    ("define=A AS NEXT(A.v) > 1", "DEFINE A: NEXT() reads rows after the current one"),
    ("define=A AS COUNT(DISTINCT A.v) > 1", "DEFINE A: DISTINCT aggregates are not supported"),
    ("define=A AS LAST(A.v, -1) > 1", "DEFINE A: the offset of LAST(A.v, -1) must be a non-negative integer literal"),
    ("define=A AS LAST(A.v, B.v) > 1", "DEFINE A: the offset of LAST(A.v, B.v) must be a non-negative integer"),
    ("define=A AS PREV(LAST(A.v)) > 1", "DEFINE A: LAST(A.v) is nested inside a navigation or aggregate"),
    ("define=A AS SUM(A.v + B.v) > 1", "DEFINE A: a navigation or aggregate argument must read one pattern variable"),
    ("define=A AS CLASSIFIER() = 'A'", "DEFINE A: CLASSIFIER() is only supported in MEASURES"),
    ("define=A AS v > 1, A AS v > 2", "DEFINE A: A is defined twice"),
    ("define=A AS v > 1, X AS v > 2", "DEFINE X: X does not appear in the PATTERN"),
    ("define=A AS A.* > 1", "DEFINE A: A.* is only allowed in COUNT"),
    ("define=A AS v > ", "SQL syntax error at line 9, column 1"),
    ("measures=A.v, B.v AS y", "MEASURES A.v: a measure needs a name (AS name)"),
    ("measures=A.v AS x, B.v AS x", "MEASURES x: the name is already taken by another output column"),
    ("measures=NEXT(A.v) AS x", "MEASURES x: NEXT() reads rows after the current one"),
    ("measures=REVERSE(A.name) AS x", "MEASURES x: function REVERSE() is not supported (line 3, column"),
    # Named as written: the parser reads TIMESTAMPDIFF and DATEDIFF as one function.
    ("define=A AS TIMESTAMPDIFF(MONTH, A.t, A.u) > 1", "DEFINE A: TIMESTAMPDIFF(MONTH, ...) is not supported; the "
                                                      "unit is one of MICROSECOND, MILLISECOND, SECOND, MINUTE, HOUR, "
                                                      "DAY, WEEK (months and years have no fixed length)"),
    ("define=A AS DATEDIFF(SECOND, A.t, A.u) > 1", "DEFINE A: function DATEDIFF() is not supported (line 8, column 15)"),
    ("define=A AS CAST(A.v AS DATE) IS NULL", "DEFINE A: CAST(A.v AS DATE) is not supported; cast to DOUBLE, BIGINT"),
    ("define=A AS MATCH_ROWTIME() > A.t", "DEFINE A: MATCH_ROWTIME() is only supported in MEASURES"),
    ("rows=ALL ROWS PER MATCH", "ALL ROWS PER MATCH is not supported; use ONE ROW PER MATCH"),
    ("order=ORDER BY t DESC", "MATCH_RECOGNIZE needs ORDER BY the event-time column, ascending"),
    ("order=ORDER BY t, id DESC", "ORDER BY id DESC: the columns after the event-time column order rows of one "
                                  "time, ascending; DESC is not supported (line 2, column 15)"),
    ("order=", "MATCH_RECOGNIZE needs ORDER BY the event-time column, ascending"),
    ("skip=TO FIRST A", "AFTER MATCH SKIP TO FIRST A: that row may be the match's first row"),
    ("skip=TO LAST A", "AFTER MATCH SKIP TO LAST A: that row may be the match's first row"),
    ("skip=TO FIRST X", "AFTER MATCH SKIP TO FIRST X: X does not appear in the PATTERN"),
    ("within=INTERVAL 'soon' MINUTE", "WITHIN: 'soon' is not a number (line 7, column 19)"),
    ("within=INTERVAL '1' WEEK", "WITHIN: INTERVAL '1 WEEK' is not supported; write INTERVAL '<number>' <unit> "
                                 "with unit one of MILLISECOND, SECOND, MINUTE, HOUR, DAY (line 7, column 19)"),
    ("within=INTERVAL '0' SECOND", "WITHIN INTERVAL '0' SECOND: the interval must be positive"),
    ("within=5 MINUTES", "WITHIN 5 MINUTES: expected an interval such as INTERVAL '5' MINUTE (line 7, column 3)"),
    ("tail=WHERE m.x > 1", "WHERE m.x: the WHERE around MATCH_RECOGNIZE reads its output columns, the PARTITION "
                           "BY columns and measures (none); conditions on the events go in DEFINE (line 9, column 14)"),
    ("measures=A.v AS x&tail=WHERE PREV(x) > 1", "WHERE: PREV(x) reads the match's rows; compute it in MEASURES"),
    ("within=INTERVAL '5' DAY TO SECOND", "WITHIN: '5' is not a DAY TO SECOND interval ('d hh:mm:ss') (line 7, column 19)"),
    ("skip=TO X", "AFTER MATCH SKIP TO LAST X: X does not appear in the PATTERN"),
])
def test_unsupported_rules_are_rejected_precisely(change: str, message: str) -> None:
    with pytest.raises(RejectedInput) as raised:
        parse_match_recognize(clause(change))
    assert str(raised.value).startswith(message), str(raised.value)


@pytest.mark.parametrize(("pattern", "skip", "message"), [
    ("A B* C", "TO LAST B", "a match may contain no B row, and then there is no row to skip to"),
    ("(A | B) C", "TO FIRST A", "a match may contain no A row"),
    ("A+ C", "TO LAST A", "that row may be the match's first row"),
    ("B? A C", "TO FIRST A", "that row may be the match's first row"),
])
def test_skips_that_fail_at_run_time_in_the_standard_are_refused(pattern: str, skip: str, message: str) -> None:
    with pytest.raises(RejectedInput, match=message):
        parse_match_recognize(rule(pattern, "A AS TRUE", skip=skip))


@pytest.mark.parametrize(("pattern", "skip"), [
    ("A A+ C", "TO LAST A"), ("A B+ C", "TO FIRST B"), ("X (A | B) A C", "TO LAST A"),
])
def test_skips_that_always_advance_are_accepted(pattern: str, skip: str) -> None:
    assert parse_match_recognize(rule(pattern, "A AS TRUE", skip=skip)).skip.variable == skip.split()[-1]


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT * FROM events", "a pattern rule is SELECT ... FROM events MATCH_RECOGNIZE (...)"),
    ("INSERT INTO x VALUES (1)", "a pattern rule is SELECT ... FROM events MATCH_RECOGNIZE (...)"),
    ("SELECT 1; SELECT 2", "a rule is exactly one SELECT statement, not 2"),
    ("SELECT * FROM orders MATCH_RECOGNIZE (ORDER BY t PATTERN (A) DEFINE A AS TRUE)",
     "a pattern rule reads FROM events, not orders"),
    ("SELECT * FROM events MATCH_RECOGNIZE (ORDER BY t DEFINE A AS TRUE)", "MATCH_RECOGNIZE needs a PATTERN"),
    ("SELECT x FROM events MATCH_RECOGNIZE (ORDER BY t MEASURES A.v AS y PATTERN (A) DEFINE A AS TRUE)",
     "SELECT x: x is neither a PARTITION BY column nor a measure (y)"),
    ("SELECT * FROM events MATCH_RECOGNIZE (ORDER BY t PATTERN (A) DEFINE A AS 'it''s)",
     "SQL syntax error"),
])
def test_rules_that_are_not_one_pattern_query_are_rejected(sql: str, message: str) -> None:
    with pytest.raises(RejectedInput) as raised:
        parse_match_recognize(sql)
    assert str(raised.value).startswith(message), str(raised.value)


def test_a_pattern_error_names_the_pattern_text_as_written() -> None:
    with pytest.raises(RejectedInput, match=r"PATTERN \(A \(B \| \)\): unexpected '\)' at position 8"):
        parse_match_recognize(rule("A (B | )", "A AS TRUE"))


def test_a_bare_name_is_a_column_even_when_a_variable_has_that_name() -> None:
    spec = parse_match_recognize(rule("A B", "B AS a > 1 AND A.a < 1"))
    assert spec.columns == {("t",), ("a",)}


def test_within_inside_a_string_is_left_alone() -> None:
    spec = parse_match_recognize(rule("A", "A AS note = ') WITHIN '"))
    assert spec.within is None


def test_order_by_may_go_on_after_the_event_time_column() -> None:
    spec = parse_match_recognize(clause("order=ORDER BY t, data.seq, id NULLS FIRST"))
    assert (spec.order_by, spec.then_by) == (("t",), ((("data", "seq"), False), (("id",), True)))
    assert {("data", "seq"), ("id",)} <= spec.columns


@pytest.mark.parametrize(("within", "length"), [
    ("INTERVAL '0 00:00:05' DAY TO SECOND", timedelta(seconds=5)),
    ("INTERVAL '1 02:03:04.5' DAY TO SECOND", timedelta(days=1, hours=2, minutes=3, seconds=4.5)),
    ("INTERVAL '01:30' HOUR TO MINUTE", timedelta(hours=1, minutes=30)),
    ("INTERVAL '2:05' MINUTE TO SECOND", timedelta(minutes=2, seconds=5)),
])
def test_within_takes_the_standard_s_day_time_spans(within: str, length: timedelta) -> None:
    assert parse_match_recognize(clause(f"within={within}")).within == length


def test_skip_to_a_variable_is_skip_to_its_last_row() -> None:
    # Blanked out before parsing, so places after it are still where the user wrote them.
    spec = parse_match_recognize(clause("skip=TO B"))
    assert spec.skip == AfterMatchSkip(SkipTo.LAST, "B")
    with pytest.raises(RejectedInput, match=r"\(line 8, column 15\)"):
        parse_match_recognize(clause("skip=TO B&define=A AS FOO(A.v) > 1"))


def test_a_where_around_match_recognize_tests_the_output_columns() -> None:
    spec = parse_match_recognize(clause("measures=COUNT(B.*) AS n, LAST(B.v) AS low&tail=WHERE m.n >= 2 AND low < 0"))
    assert spec.where == "m.n >= 2 AND low < 0"
    assert [spec.keeps({"n": n, "low": low}) for n, low in ((2, -1), (1, -1), (3, 0), (3, None))] == [
        True, False, False, False]
    assert parse_match_recognize(clause("measures=A.v AS x")).keeps({"x": 1})  # no WHERE: every match
