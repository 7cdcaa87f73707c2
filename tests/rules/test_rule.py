"""Rules as submitted: kinds, the Spark SQL a filter becomes, and the messages that reject a rule."""

from datetime import timedelta

import pytest

from wayline.core.errors import RejectedInput
from wayline.rules.expression import MAX_NESTING
from wayline.rules.rule import RuleKind, compile_rule

LOGINS = """SELECT * FROM events MATCH_RECOGNIZE (
  PARTITION BY data.user ORDER BY event_time MEASURES COUNT(F.*) AS failures
  PATTERN (F{3,} S) WITHIN INTERVAL '5' MINUTE
  DEFINE F AS F.type = 'login.failed', S AS S.type = 'login.ok')"""


def test_the_three_kinds_and_their_partition_keys() -> None:
    assert compile_rule("SELECT id FROM events WHERE type = 'a'").kind == RuleKind.FILTER
    window = compile_rule("SELECT tenantid, COUNT(*) AS n FROM events GROUP BY tenantid, window(event_time, '1 minute')")
    assert (window.kind, window.partition_key, window.stateful) == (RuleKind.WINDOW, (("tenantid",),), True)
    pattern = compile_rule(LOGINS)
    assert (pattern.kind, pattern.partition_key) == (RuleKind.PATTERN, (("data", "user"),))
    assert pattern.time_bound.total_seconds() == 300


def test_a_filter_becomes_spark_sql_with_typed_data_paths() -> None:
    spec = compile_rule(
        "SELECT id, data.amount AS amount FROM events WHERE data.amount >= 100 AND data.vip = TRUE "
        "AND data.region = 'eu'"
    ).filter
    assert spec.where == (
        "TRY_VARIANT_GET(`data`, '$[\\'amount\\']', 'double') >= 100 AND "
        "TRY_VARIANT_GET(`data`, '$[\\'vip\\']', 'boolean') = TRUE AND "
        "TRY_VARIANT_GET(`data`, '$[\\'region\\']', 'string') = 'eu'"
    )
    assert spec.select == (("id", "`id`"), ("amount", "TRY_VARIANT_GET(`data`, '$[\\'amount\\']', 'variant')"))


def test_a_filter_partition_key_names_the_subject_only() -> None:
    rule = compile_rule("SELECT id FROM events", (("tenantid",),))
    assert rule.partition_key == (("tenantid",),) and not rule.stateful


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT id FROM events WHERE", "SQL syntax error at line 1"),
    ("SELECT nope FROM events", "SELECT: unknown column nope; the events stream has id, source"),
    ("SELECT id FROM events WHERE amount > 1", "WHERE: unknown column amount"),
    ("SELECT id FROM orders", "a rule reads FROM events only, not orders"),
    ("SELECT reflect('java.lang.Runtime', 'getRuntime') AS x FROM events",
     "function REFLECT() is not supported in a rule (line 1, column 8)"),
    ("SELECT id FROM events ORDER BY id", "ORDER is not supported in a filter rule"),
    ("SELECT id FROM events a JOIN events b ON a.id = b.id", "SELECT: id is not qualified by a side of the join"),
    ("SELECT tenantid, COUNT(*) AS n FROM events GROUP BY tenantid",
     "an aggregation rule needs a time bound: GROUP BY window(event_time"),
    ("SELECT COUNT(*) AS n FROM events", "an aggregation rule needs a time bound"),
    ("SELECT tenantid, data.x AS x, COUNT(*) AS n FROM events GROUP BY tenantid, window(event_time, '1 minute')",
     "SELECT x: data.x is neither a GROUP BY key, window.start/window.end, nor inside an aggregate"),
    ("SELECT COUNT(DISTINCT id) AS n FROM events GROUP BY window(event_time, '1 minute')",
     "DISTINCT aggregates are not supported"),
    ("SELECT COUNT(*) AS n FROM events GROUP BY window(event_time, '1 minute', '40 seconds')",
     "the window size must be a whole number of slides"),
    ("SELECT COUNT(*) AS n FROM events GROUP BY window(time, '1 minute')", "the first argument is event_time"),
    ("SELECT COUNT(*) AS n FROM events GROUP BY data.user, sliding_window(event_time, '10 minutes', '1 minute')",
     "GROUP BY sliding_window(event_time, '<size>'): 2 arguments, not 3; a sliding window moves with each event "
     "and takes no slide"),
    ("SELECT COUNT(*) AS n FROM events GROUP BY data.user, sliding_window(event_time)",
     "GROUP BY sliding_window(event_time, '<size>'): 2 arguments, not 1"),
    ("SELECT COUNT(*) AS n FROM events GROUP BY sliding_window(data.at, '1 minute')",
     "GROUP BY sliding_window(event_time, '<size>'): the first argument is event_time"),
    ("SELECT COUNT(*) AS n FROM events GROUP BY sliding_window(event_time, '0 minutes')",
     "sliding_window(...): durations must be positive"),
    ("SELECT COUNT(*) AS n FROM events GROUP BY sliding_window(event_time, 'ten minutes')",
     "sliding_window(...): 'ten' is not a number"),
    ("SELECT COUNT(*) AS n FROM events GROUP BY sliding_window(event_time, '10 fortnights')",
     "sliding_window(...): INTERVAL '10 FORTNIGHTS' is not supported; write INTERVAL '<number>' <unit>"),
    ("SELECT COUNT(*) AS n FROM events GROUP BY sliding_window(event_time, 10)",
     "sliding_window(...): 10 is not a duration such as '5 minutes'"),
    ("SELECT COUNT(*) AS n FROM events GROUP BY window(event_time, '1 minute'), sliding_window(event_time, '1 minute')",
     "GROUP BY: one window(...), sliding_window(...) or session_window(...) per rule"),
    ("SELECT nope, COUNT(*) AS n FROM events GROUP BY data.user, sliding_window(event_time, '1 minute')",
     "SELECT nope: unknown column nope"),
    ("SELECT COUNT(*) AS n FROM events GROUP BY data.user, sliding_window(event_time, '1 minute') HAVING amount > 1",
     "HAVING: unknown column amount"),
    ("SELECT COUNT(*) AS n FROM events GROUP BY data.user, session_window(event_time, '5 minutes', '1 minute')",
     "GROUP BY session_window(event_time, '<gap>'): 2 arguments, not 3"),
    ("SELECT id, COUNT(*) AS n FROM events GROUP BY data.user, session_window(event_time, '5 minutes')",
     "SELECT id: id is neither a GROUP BY key, window.start/window.end, nor inside an aggregate"),
    ("SELECT COUNT(*) AS n FROM events GROUP BY lower(type), sliding_window(event_time, '1 minute')",
     "GROUP BY LOWER(type): group by columns and one sliding_window(...)"),
    ("""SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY tenantid ORDER BY event_time
        PATTERN (A B) DEFINE A AS A.type = 'x')""", "a pattern rule needs a time bound: add WITHIN INTERVAL"),
    ("""SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY tenantid ORDER BY time
        PATTERN (A B) WITHIN INTERVAL '1' MINUTE DEFINE A AS A.type = 'x')""", "ORDER BY time: a pattern rule orders by event_time"),
    ("""SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY tenantid ORDER BY event_time
        PATTERN (A B) WITHIN INTERVAL '1' MINUTE DEFINE A AS A.price > 1)""", "MATCH_RECOGNIZE: unknown column price"),
    ("""SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY tenantid ORDER BY event_time
        ALL ROWS PER MATCH PATTERN (A B) WITHIN INTERVAL '1' MINUTE DEFINE A AS A.type = 'x')""",
     "ALL ROWS PER MATCH is not supported"),
])
def test_bad_rules_are_rejected_with_a_message_that_points_at_the_problem(sql: str, message: str) -> None:
    with pytest.raises(RejectedInput) as caught:
        compile_rule(sql)
    assert message in str(caught.value)


@pytest.mark.parametrize("sql", [
    "SELECT '${env:WAYLINE_STATE_DIR}' AS x FROM events",
    "SELECT id FROM events WHERE data.path = '${system:user.home}'",
    "SELECT tenantid, COUNT(*) AS n FROM events WHERE source <> '${spark.app.name}' "
    "GROUP BY tenantid, window(event_time, '1 minute')",
    """SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY tenantid ORDER BY event_time MEASURES A.id AS a
       PATTERN (A) WITHIN INTERVAL '1' MINUTE DEFINE A AS A.type = '${env:HOME}')""",
])
def test_variable_references_are_refused_wherever_they_are(sql: str) -> None:
    with pytest.raises(RejectedInput, match=r"\$\{"):
        compile_rule(sql)


def test_a_partition_key_that_disagrees_with_the_sql_is_rejected() -> None:
    with pytest.raises(RejectedInput, match=r"partition_key: tenantid differs from the key the SQL states \(data.user\)"):
        compile_rule(LOGINS, (("tenantid",),))


def pattern_with(define: str = "A.type = 'a'", within: str = "INTERVAL '5' MINUTE") -> str:
    return f"""SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY tenantid ORDER BY event_time
        MEASURES COUNT(A.*) AS n PATTERN (A B) WITHIN {within} DEFINE A AS {define}, B AS B.type = 'b')"""


@pytest.mark.parametrize("sql", [
    "SELECT * FROM events WHERE " + "(" * 49 + "type = 'x'" + ")" * 49,
    "SELECT * FROM events WHERE " + "(" * 400 + "type = 'x'" + ")" * 400,
    "SELECT * FROM events WHERE " + "NOT " * 3000 + "type = 'x'",
    "SELECT * FROM events WHERE data.x > " + "+".join(["1"] * 3000),
    pattern_with("A.data.x > " + "+".join(["1"] * 3000)),
    pattern_with("A.type = 'a' AND " + "NOT " * 200 + "A.type = 'b'"),
    "SELECT COUNT(*) AS n FROM events GROUP BY tenantid, window(event_time, '1 minute') HAVING COUNT(*) > "
    + "- " * 500 + "1",
])
def test_rules_nested_past_the_limit_are_rejected_not_crashed(sql: str) -> None:
    with pytest.raises(RejectedInput, match="nests too deeply"):
        compile_rule(sql)


def test_long_and_or_chains_are_not_nesting() -> None:
    ors = " OR ".join(f"type = 't{n}'" for n in range(500))
    assert compile_rule(f"SELECT * FROM events WHERE {ors}").filter.where.count(" OR ") == 499
    nested = "(" * (MAX_NESTING - 8) + "type = 'x'" + ")" * (MAX_NESTING - 8)
    assert compile_rule(f"SELECT * FROM events WHERE {nested}").kind == RuleKind.FILTER


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT COUNT(*) AS n FROM events GROUP BY tenantid, window(event_time, '1e20 days')",
     "window(...): 1e20 days is longer than a rule may wait (at most 999,999,999 days)"),
    ("SELECT COUNT(*) AS n FROM events GROUP BY tenantid, window(event_time, 'NaN days')",
     "window(...): 'NaN' is not a finite number"),
    ("SELECT COUNT(*) AS n FROM events GROUP BY tenantid, window(event_time, '-Infinity days')",
     "window(...): '-Infinity' is not a finite number"),
    ("SELECT COUNT(*) AS n FROM events GROUP BY tenantid, sliding_window(event_time, '1e30 milliseconds')",
     "is longer than a rule may wait"),
    (pattern_with(within="INTERVAL '100000000000000000000' DAY"), "WITHIN: 100000000000000000000 days is longer"),
    (pattern_with(within="INTERVAL 'Infinity' DAY"), "WITHIN: 'Infinity' is not a finite number"),
    (pattern_with(within="INTERVAL 'NaN' SECOND"), "WITHIN: 'NaN' is not a finite number"),
])
def test_durations_that_overflow_or_are_not_numbers_are_rejected(sql: str, message: str) -> None:
    with pytest.raises(RejectedInput) as caught:
        compile_rule(sql)
    assert message in str(caught.value)


def test_the_longest_duration_still_compiles() -> None:
    rule = compile_rule("SELECT COUNT(*) AS n FROM events GROUP BY tenantid, window(event_time, '999999999 days')")
    assert rule.time_bound == timedelta(days=999_999_999)


QUOTED_KEYS = 'SELECT data."it\'s" AS it FROM events WHERE data."say ""hi""" = \'x\''


def test_a_data_key_with_a_quote_is_quoted_with_the_other_quote() -> None:
    spec = compile_rule(QUOTED_KEYS).filter
    assert spec.where == 'TRY_VARIANT_GET(`data`, \'$[\\\'say "hi"\\\']\', \'string\') = \'x\''
    assert spec.select == (("it", 'TRY_VARIANT_GET(`data`, \'$["it\\\'s"]\', \'variant\')'),)


@pytest.mark.parametrize(("sql", "message"), [
    ('SELECT * FROM events WHERE data."it\'s ""x""" = \'y\'',
     'WHERE: the key \'it\\\'s "x"\' of data.it\'s "x" contains both \' and ", which Spark\'s JSON paths cannot quote'),
    ('SELECT data."a b" AS k, COUNT(*) AS n FROM events GROUP BY data."a b", window(event_time, \'1 minute\')',
     "partition_key: 'data.a b' is not a column name or a data.<path>"),
])
def test_data_paths_the_job_could_not_read_are_rejected_at_submit_time(sql: str, message: str) -> None:
    with pytest.raises(RejectedInput) as caught:
        compile_rule(sql)
    assert message in str(caught.value)


@pytest.mark.integration
def test_a_filter_rule_on_keys_with_quotes_runs_in_spark(spark) -> None:
    from pyspark.sql import functions as F

    spec = compile_rule(QUOTED_KEYS + ' AND data."it\'s" > 1').filter
    documents = ['{"it\'s": 2, "say \\"hi\\"": "x"}', '{"it\'s": 0, "say \\"hi\\"": "x"}', '{"other": 1}']
    frame = spark.createDataFrame([(d,) for d in documents], "json string").select(F.parse_json("json").alias("data"))
    rows = frame.where(F.expr(spec.where)).select(*(F.expr(e).cast("string").alias(n) for n, e in spec.select)).collect()
    assert [row["it"] for row in rows] == ["2"]


@pytest.mark.parametrize(("sql", "warned"), [
    ("SELECT id FROM events WHERE data.a < data.b", ["data.a < data.b"]),
    ("SELECT id FROM events WHERE (data.a) >= data.b OR data.c BETWEEN data.lo AND data.hi",
     ["(data.a) >= data.b", "data.c BETWEEN data.lo AND data.hi"]),
    # A number makes the path a DOUBLE; equality of text is equality; a cast says the type.
    ("SELECT id FROM events WHERE data.a < 5 AND data.a = data.b AND data.c BETWEEN data.lo AND 9", []),
    ("SELECT id FROM events WHERE TRY_CAST(data.a AS DOUBLE) < TRY_CAST(data.b AS DOUBLE)", []),
    # The JVM's window aggregation reads data.* as filters do; the Python path (MIN of a
    # string column stays there) and pattern rules compare the JSON's own values.
    ("SELECT tenantid, COUNT(*) AS n FROM events WHERE data.a < data.b "
     "GROUP BY tenantid, window(event_time, '1 minute')", ["data.a < data.b"]),
    ("SELECT tenantid, MIN(type) AS n FROM events WHERE data.a < data.b "
     "GROUP BY tenantid, window(event_time, '1 minute')", []),
    ("SELECT * FROM events MATCH_RECOGNIZE (ORDER BY event_time MEASURES A.id AS i PATTERN (A) "
     "WITHIN INTERVAL '1' MINUTE DEFINE A AS A.data.a < A.data.b)", []),
])
def test_data_paths_ordered_against_each_other_compile_with_a_warning(sql: str, warned: list[str]) -> None:
    warnings = compile_rule(sql).warnings
    assert [warning.split(": data.* paths")[0] for warning in warnings] == warned
    assert all("compare as text ('10' < '9'); to compare numbers, write TRY_CAST(" in w for w in warnings)
