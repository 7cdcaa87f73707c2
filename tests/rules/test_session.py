"""Session windows: a key's events less than the gap apart, emitted once the gap has passed."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import orjson

from wayline.rules.engine import ActiveRule, GroupEvaluator
from wayline.rules.rule import compile_rule
from wayline.rules.window import WindowKind

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)

VISITS = """SELECT data.user, window.start AS start, window.end AS end, COUNT(*) AS clicks, SUM(data.ms) AS ms
  FROM events WHERE type = 'click'
  GROUP BY data.user, session_window(event_time, '5 minutes') HAVING COUNT(*) >= 2"""


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def rule(sql: str = VISITS) -> ActiveRule:
    return ActiveRule("rule_s", 1, "s", compile_rule(sql), "out.s", "alert.s", 10_000, 10_000)


def click(user: str, seconds: float, ms: int = 1, kind: str = "click") -> tuple[str, dict[str, Any]]:
    return orjson.dumps([user]).decode(), {
        "id": f"{user}-{seconds:g}", "type": kind, "tenantid": f"tenant-{user}-{seconds:g}",
        "event_time": at(seconds), "data": {"user": user, "ms": ms},
    }


def sessions(emitted: list[Any]) -> list[tuple[str | None, float, float, int, int]]:
    return [(e.subject, (e.data["start"] - T0).total_seconds(), (e.data["end"] - T0).total_seconds(),
             e.data["clicks"], e.data["ms"]) for e in emitted]


def test_the_rule_compiles_to_a_session_window() -> None:
    compiled = compile_rule(VISITS)
    assert compiled.window is not None and compiled.window.kind is WindowKind.SESSION
    assert compiled.partition_key == (("data", "user"),)


def test_out_of_order_events_form_sessions_that_close_when_the_watermark_reaches_their_end() -> None:
    evaluator = GroupEvaluator([rule()])
    assert evaluator.process([click("u1", 200, 5), click("u1", 0, 1), click("u2", 0, kind="view")], None).emitted == []
    assert evaluator.process([click("u1", 60, 3), click("u1", 600, 7)], at(10)).emitted == []
    assert evaluator.process([], at(499)).emitted == []  # 0, 60, 200: the session ends at 200 + 5 min
    [visit] = evaluator.process([], at(500)).emitted
    assert sessions([visit]) == [("u1", 0, 500, 3, 9)]
    assert (visit.time, visit.tenantid) == (at(500), "tenant-u1-200")  # the session's last event
    # 600 starts a session of its own (400 s after 200) that HAVING turns down; then nothing is kept.
    late = evaluator.process([click("u1", 450)], at(1000))
    assert late.emitted == [] and late.metrics["rule_s@1"].late == 1
    assert evaluator.snapshot().rules == {}


def test_an_event_exactly_a_gap_after_the_last_starts_a_new_session() -> None:
    evaluator = GroupEvaluator([rule()])
    evaluator.process([click("u1", s) for s in (0, 100, 400, 699)], None)
    # 400 is 300 s after 100: a new session, which 699 (299 s later) joins.
    assert sessions(evaluator.process([], at(2000)).emitted) == [("u1", 0, 400, 2, 2), ("u1", 400, 999, 2, 2)]


def test_a_session_keeps_its_partial_aggregates_not_its_events() -> None:
    evaluator = GroupEvaluator([rule()])
    evaluator.process([click("u1", s) for s in range(0, 1000, 10)], None)
    result = evaluator.process([], at(995))
    assert result.emitted == [] and result.metrics["rule_s@1"].state == 1
    assert sessions(evaluator.process([], at(1290)).emitted) == [("u1", 0, 1290, 100, 100)]
