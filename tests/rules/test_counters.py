"""How one micro-batch's outcome adds to the rules job's counters."""

from __future__ import annotations

import orjson

from wayline.rules.counters import EMIT, FAILURE, METRICS, JobCounters, Report
from wayline.rules.engine import ActiveRule
from wayline.rules.rule import compile_rule

FILTER = ActiveRule("rc_filter", 1, "big-orders", compile_rule("SELECT id FROM events WHERE type = 'a'"),
                    "out.f", "alert.f", 100, 1000)
# A window the Python processor runs (a sliding one), and one the JVM aggregates.
WINDOW = ActiveRule("rc_window", 3, "per-minute", compile_rule(
    "SELECT tenantid, COUNT(*) AS n FROM events GROUP BY tenantid, sliding_window(event_time, '1 minute')"),
    "out.w", "alert.w", 100, 1000)
JVM_WINDOW = ActiveRule("rc_jvm", 1, "tumbling", compile_rule(
    "SELECT tenantid, COUNT(*) AS n FROM events GROUP BY tenantid, window(event_time, '1 minute')"),
    "out.j", "alert.j", 100, 1000)
BY_KEY = {FILTER.state_key: FILTER, WINDOW.state_key: WINDOW}


def metrics(rule: ActiveRule, *, rows: int, micros: int, state: int, late: int, emitted: int) -> Report:
    value = orjson.dumps({"rows": rows, "micros": micros, "state": state, "late": late}).decode()
    return Report(METRICS, rule.state_key, value, emitted)


def test_a_batch_counts_the_filters_input_and_matches_and_the_stateful_rules_reports() -> None:
    counters = JobCounters()
    reports = [metrics(WINDOW, rows=40, micros=900, state=5, late=2, emitted=3),
               metrics(WINDOW, rows=10, micros=100, state=2, late=0, emitted=1)]
    counters.account(120, {FILTER.state_key: 7}, reports, {}, BY_KEY)
    counters.account(30, {FILTER.state_key: 1}, [metrics(WINDOW, rows=5, micros=50, state=4, late=0, emitted=0)],
                     {}, BY_KEY)
    assert (counters.batches, counters.events) == (2, 150)
    filtered, windowed = counters.rules[FILTER.id], counters.rules[WINDOW.id]
    assert (filtered.name, filtered.input, filtered.matches) == ("big-orders", 150, 8)
    assert (windowed.input, windowed.matches, windowed.micros, windowed.late) == (55, 4, 1050, 2)
    assert windowed.state == 4, "state is a gauge: the last batch's entries, summed over its groups"


def test_a_window_the_jvm_runs_counts_like_a_filter_every_event_in_and_its_emitted_windows() -> None:
    counters = JobCounters()
    by_key = BY_KEY | {JVM_WINDOW.state_key: JVM_WINDOW}
    counters.account(120, {FILTER.state_key: 7, JVM_WINDOW.state_key: 3}, [], {}, by_key)
    counters.account(30, {JVM_WINDOW.state_key: 2}, [], {}, by_key)
    assert (counters.rules[JVM_WINDOW.id].input, counters.rules[JVM_WINDOW.id].matches) == (150, 5)


def test_a_failed_rule_s_matches_are_not_counted_and_a_quarantine_is_recorded() -> None:
    counters = JobCounters()
    failed = {WINDOW.state_key: "ZeroDivisionError"}
    reports = [metrics(WINDOW, rows=8, micros=10, state=1, late=0, emitted=2),
               Report(FAILURE, WINDOW.state_key, "ZeroDivisionError", 1), Report(EMIT, WINDOW.state_key, None, 1)]
    counters.account(8, {}, reports, failed, BY_KEY)
    counters.quarantine(WINDOW, "ZeroDivisionError")
    windowed = counters.rules[WINDOW.id]
    assert (windowed.input, windowed.matches, windowed.quarantined) == (8, 0, 1)
    assert counters.quarantined == [("per-minute", "ZeroDivisionError")]


def test_restarts_and_reloads_are_counted() -> None:
    counters = JobCounters()
    counters.restarted()
    counters.reloaded()
    counters.reloaded()
    assert (counters.restarts, counters.reloads) == (1, 2)
