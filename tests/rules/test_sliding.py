"""Sliding windows: one row per event over its key's trailing interval, in event-time order
behind the watermark; hand-written cases, then a random comparison with a plain recount."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from wayline.rules.engine import ActiveRule, GroupEvaluator
from wayline.rules.rule import compile_rule
from wayline.rules.window import WindowKind

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)

FAILED_LOGINS = """SELECT data.user, id AS last_failure, COUNT(*) AS failures, window.start AS since
  FROM events WHERE type = 'login.failed'
  GROUP BY data.user, sliding_window(event_time, '10 minutes') HAVING COUNT(*) >= 5"""
COUNTS = """SELECT data.user, id, COUNT(*) AS n, window.start AS start, window.end AS end
  FROM events GROUP BY data.user, sliding_window(event_time, '10 minutes')"""
AMOUNTS = """SELECT id, SUM(data.amount) AS total, AVG(data.amount) AS mean, MIN(data.amount) AS low,
  MAX(data.amount) AS high, COUNT(data.amount) AS priced
  FROM events GROUP BY data.user, sliding_window(event_time, INTERVAL '1' HOUR) HAVING SUM(data.amount) > 100"""

_ids = itertools.count()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def rule(sql: str, name: str = "s") -> ActiveRule:
    return ActiveRule(f"rule_{name}", 1, name, compile_rule(sql), f"out.{name}", f"alert.{name}", 10_000, 10_000)


def event(user: str, seconds: float, kind: str = "login.failed", **data: Any) -> tuple[str, dict[str, Any]]:
    number = next(_ids)
    return orjson.dumps([user]).decode(), {
        "id": f"{user}-{seconds:g}-{number}", "type": kind, "tenantid": f"tenant-{user}",
        "event_time": at(seconds), "data": {"user": user, **data},
    }


def settled(evaluator: GroupEvaluator, batch: list[tuple[str, dict[str, Any]]], watermark: datetime) -> list[Any]:
    """What a batch gives once the watermark has moved on (the batch itself arrived on time)."""
    return evaluator.process(batch, None).emitted + evaluator.process([], watermark).emitted


def micros(time: datetime) -> int:
    return (time - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1)


def counts(emitted: list[Any]) -> list[tuple[str, float, int]]:
    """Each output as (subject, its event's second, the window's count)."""
    return [(e.subject, (e.time - T0).total_seconds(), e.data["n"]) for e in emitted]


def test_the_rule_compiles_to_a_sliding_window() -> None:
    compiled = compile_rule(FAILED_LOGINS)
    assert compiled.window is not None and compiled.window.kind is WindowKind.SLIDING
    assert compiled.partition_key == (("data", "user"),)
    assert compiled.time_bound == timedelta(minutes=10)


def test_five_failures_within_ten_minutes_fire_on_the_fifth_once_the_watermark_passes_it() -> None:
    evaluator = GroupEvaluator([rule(FAILED_LOGINS)])
    logins = [event("u1", s) for s in (0, 60, 120, 180, 240)]
    batch = logins + [event("u1", 200, kind="login.ok"), *(event("u2", s) for s in (0, 60, 120, 180))]
    assert evaluator.process(batch, None).emitted == []  # no watermark yet: every event waits
    assert evaluator.process([], at(240)).emitted == []  # the fifth is at the watermark: still on time
    [alert] = evaluator.process([], at(241)).emitted
    assert (alert.subject, alert.time, alert.tenantid) == ("u1", at(240), "tenant-u1")
    assert alert.data == {"user": "u1", "last_failure": logins[4][1]["id"], "failures": 5, "since": at(-360)}


def test_out_of_order_events_across_micro_batches_are_counted_in_event_time_order() -> None:
    evaluator = GroupEvaluator([rule(COUNTS)])
    assert evaluator.process([event("u1", 0), event("u1", 240), event("u1", 120)], None).emitted == []
    first = evaluator.process([event("u1", 180), event("u1", 60)], at(50)).emitted
    assert counts(first) == [("u1", 0, 1)]
    rest = evaluator.process([event("u2", 400)], at(300)).emitted
    assert counts(rest) == [("u1", 60, 2), ("u1", 120, 3), ("u1", 180, 4), ("u1", 240, 5)]
    assert (rest[0].data["start"], rest[0].data["end"]) == (at(-540), at(60))
    # Behind the watermark: dropped and counted, never in a window.
    late = evaluator.process([event("u1", 250), event("u1", 700)], at(300))
    assert late.emitted == [] and late.metrics["rule_s@1"].late == 1
    # 700 reaches back to 100: 120, 180, 240 and itself.
    assert sorted(counts(evaluator.process([], at(701)).emitted)) == [("u1", 700, 4), ("u2", 400, 1)]


def test_the_trailing_window_includes_its_start_and_forgets_older_events() -> None:
    evaluator = GroupEvaluator([rule(COUNTS)])
    batch = [event("u1", s) for s in (0, 600, 601, 1300)]
    # 600 reaches back to 0 exactly; 601 no longer does; 1300's window holds only itself.
    assert counts(settled(evaluator, batch, at(2000))) == [("u1", 0, 1), ("u1", 600, 2), ("u1", 601, 2),
                                                               ("u1", 1300, 1)]


def test_events_at_the_same_time_are_peers_and_see_one_another() -> None:
    evaluator = GroupEvaluator([rule(COUNTS)])
    emitted = settled(evaluator, [event("u1", 0), event("u1", 60), event("u1", 60)], at(61))
    assert counts(emitted) == [("u1", 0, 1), ("u1", 60, 3), ("u1", 60, 3)]
    assert len({e.id for e in emitted}) == 3


def test_aggregates_and_having_over_the_trailing_hour() -> None:
    evaluator = GroupEvaluator([rule(AMOUNTS)])
    batch = [event("u1", 0, amount=40), event("u1", 600, amount=70), event("u1", 1200),
             event("u1", 3700, amount=50)]
    emitted = settled(evaluator, batch, at(4000))
    # 0 alone is 40 and 3700 (back to 100 s) is 120 with 0 gone; the event at 1200 has no amount.
    assert [e.data for e in emitted] == [
        {"id": batch[1][1]["id"], "total": 110, "mean": 55.0, "low": 40, "high": 70, "priced": 2},
        {"id": batch[2][1]["id"], "total": 110, "mean": 55.0, "low": 40, "high": 70, "priced": 2},
        {"id": batch[3][1]["id"], "total": 120, "mean": 60.0, "low": 50, "high": 70, "priced": 2},
    ]


def test_state_holds_only_what_a_later_window_can_reach_and_an_idle_key_is_forgotten() -> None:
    evaluator = GroupEvaluator([rule(COUNTS)])
    evaluator.process([event("u1", s) for s in (0, 100, 500, 900)], None)
    result = evaluator.process([], at(650))
    # 900 waits; 100 and 500 may be in the window of an event still to come (at 650 or
    # later, reaching back to 50); 0 cannot, and is gone.
    assert result.metrics["rule_s@1"].state == 3
    assert result.wake_at == micros(at(900)) + 1
    after = evaluator.process([], at(901))
    assert counts(after.emitted) == [("u1", 900, 2)]
    # Nothing waits: the key wakes when its newest event has aged out of every window.
    assert after.wake_at == micros(at(1500)) + 1
    assert evaluator.process([], at(1501)).metrics["rule_s@1"].state == 0
    assert evaluator.snapshot().rules == {}


def test_a_sliding_rule_over_its_state_budget_fails() -> None:
    hoarder = ActiveRule("rule_h", 1, "h", compile_rule(COUNTS), "out.h", "alert.h", 5, 10_000)
    result = GroupEvaluator([hoarder]).process([event("u1", s) for s in range(10)], None)
    assert "state budget exceeded: 10 entries" in result.failures[0].error


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(["u1", "u2"]), st.integers(0, 1500)), max_size=8),
                min_size=1, max_size=8),
       st.lists(st.integers(0, 400), min_size=8, max_size=8))
def test_micro_batches_give_what_a_recount_over_the_on_time_events_gives(
        batches: list[list[tuple[str, int]]], steps: list[int]) -> None:
    """Each batch's watermark moves on by a random step; the expected output counts, for each
    event that was not behind its batch's watermark, the on-time events of its key in
    [t - 600 s, t] (a straightforward recount, not the streaming state)."""
    evaluator = GroupEvaluator([rule(COUNTS)])
    got, on_time = [], []
    mark = -300
    for batch, step in zip(batches, steps, strict=False):  # up to 8 batches, 8 steps
        watermark = at(mark) if mark >= 0 else None
        on_time += [(user, s) for user, s in batch if watermark is None or at(s) >= watermark]
        got += counts(evaluator.process([event(user, s) for user, s in batch], watermark).emitted)
        mark += step
    got += counts(evaluator.process([], at(2200)).emitted)
    expected = [(user, float(s), sum(1 for other, o in on_time if other == user and s - 600 <= o <= s))
                for user, s in on_time]
    assert sorted(got) == sorted(expected)
    assert evaluator.snapshot().rules == {}
