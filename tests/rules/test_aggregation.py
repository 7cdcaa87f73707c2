"""Which window rules the JVM runs, and the Spark SQL they become (no Spark needed)."""

from __future__ import annotations

import pytest

from wayline.rules.aggregation import SLOTS
from wayline.rules.rule import compile_rule

GROUP = "GROUP BY data.user, window(event_time, '1 minute')"


def test_a_tumbling_window_becomes_slots_and_expressions_over_the_folds() -> None:
    rule = compile_rule(
        "SELECT data.user, window.start AS start, window.end AS end, COUNT(*) AS n, SUM(data.amount) AS total, "
        "AVG(data.amount) AS mean, COUNT(data.note) AS notes FROM events WHERE type = 'order' "
        f"{GROUP} HAVING SUM(data.amount) > 10")
    spec = rule.aggregation
    assert spec is not None and not rule.in_processor and rule.stateful
    assert spec.size_us == spec.slide_us == 60_000_000 and spec.windows_per_event == 1
    assert spec.where == "`type` = 'order'"
    # SUM and AVG of one argument share its slot; COUNT(x) has a slot of its own.
    assert len(spec.slots) == 2
    assert "'double'" in spec.slots[0] and "IS NOT NULL THEN 1.0" in spec.slots[1]
    select = dict(spec.select)
    assert select["user"] == "`__key0`" and select["n"] == "`__n`" and select["total"] == "`__sum0`"
    assert select["mean"] == "TRY_DIVIDE(`__sum0`, `__count0`)" and select["notes"] == "`__count1`"
    assert select["end"] == "`__window_end`" and "60000000" in select["start"]
    assert spec.having == "`__sum0` > 10"


def test_a_hopping_window_joins_size_over_slide_windows() -> None:
    rule = compile_rule("SELECT COUNT(*) AS n FROM events GROUP BY window(event_time, '10 minutes', '1 minute')")
    assert rule.aggregation is not None and rule.aggregation.windows_per_event == 10


@pytest.mark.parametrize("sql", [
    # Sliding and session windows keep their Python state.
    "SELECT COUNT(*) AS n FROM events GROUP BY data.user, sliding_window(event_time, '1 minute')",
    "SELECT COUNT(*) AS n FROM events GROUP BY data.user, session_window(event_time, '1 minute')",
    # MIN of strings: Python compares the strings, the JVM would read DOUBLE.
    f"SELECT MIN(type) AS first FROM events {GROUP}",
    # ANSI mode raises on these at run time, which would stop the whole job.
    f"SELECT COUNT(*) AS n FROM events WHERE data.amount / 2 > 1 {GROUP}",
    f"SELECT SUM(data.a) / COUNT(*) AS n FROM events {GROUP}",
    f"SELECT COUNT(*) AS n FROM events WHERE subject > 3 {GROUP}",
    # More distinct arguments than the state has slots.
    "SELECT " + ", ".join(f"SUM(data.a{i}) AS s{i}" for i in range(SLOTS + 1)) + f" FROM events {GROUP}",
])
def test_rules_the_jvm_would_answer_differently_stay_in_python(sql: str) -> None:
    rule = compile_rule(sql)
    assert rule.aggregation is None and rule.in_processor


def test_filters_and_patterns_have_no_aggregation() -> None:
    assert compile_rule("SELECT id FROM events WHERE type = 'x'").aggregation is None
    pattern = compile_rule("SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY data.user ORDER BY event_time "
                           "MEASURES A.id AS a PATTERN (A) WITHIN INTERVAL '1' MINUTE DEFINE A AS A.type = 'x')")
    assert pattern.aggregation is None and pattern.in_processor
