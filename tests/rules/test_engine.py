"""Window and pattern rules over one stateful group, on plain rows: output, state, isolation."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import random
from typing import Any

import orjson

from tests.rules.groups import PER_MINUTE, SESSION, SLIDING, V_SHAPE, rows, rule
from tests.rules.streams import at
from wayline.rules.engine import GroupEvaluator, GroupState, cloudevent
from wayline.rules.rule import compile_rule

HOPPING = """SELECT tenantid, window.start AS start, COUNT(*) AS n
  FROM events GROUP BY tenantid, window(event_time, '2 minutes', '1 minute')"""
DIVIDE = """SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY tenantid ORDER BY event_time
  MEASURES A.id AS a PATTERN (A) WITHIN INTERVAL '1' MINUTE DEFINE A AS A.data.price / 0 > 1)"""
HOARD = """SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY tenantid ORDER BY event_time
  MEASURES COUNT(*) AS n PATTERN (A+ B) WITHIN INTERVAL '1' HOUR DEFINE B AS B.type = 'never')"""


def test_a_pattern_emits_once_the_watermark_passes_its_rows() -> None:
    evaluator = GroupEvaluator([rule(V_SHAPE, "v")])
    first = evaluator.process(rows("t1", 10, 8, 6, 9), None)
    assert first.emitted == [] and first.wake_at is not None  # rows wait for the watermark
    settled = GroupEvaluator([rule(V_SHAPE, "v")], evaluator.snapshot()).process([], at(120))
    [match] = settled.emitted
    assert (match.subject, match.data, match.time) == ("t1", {"tenantid": "t1", "top": 10, "bottom": 6}, at(30))
    event = cloudevent(match)
    assert (event["type"], event["source"], event["subject"], event["time"]) == (
        "alert.v", "wayline.rules/v", "t1", "2026-03-01T09:00:30Z")


def test_each_partition_key_matches_on_its_own() -> None:
    result = GroupEvaluator([rule(V_SHAPE, "v")]).process(rows("t1", 10, 8) + rows("t2", 6, 9), at(600))
    assert result.emitted == []  # t1 only falls, t2 only rises: no V in either


def test_tumbling_windows_close_at_the_watermark_and_apply_having() -> None:
    spec = rule(PER_MINUTE, "w")
    evaluator = GroupEvaluator([spec])
    evaluator.process(rows("t1", 2, 4, 0, 6, step=20) + rows("t2", 5, start=5), at(0))
    assert evaluator.process([], at(59)).emitted == []
    closed = evaluator.process([], at(60)).emitted
    # t1's minute has 2, 4 (0 fails WHERE; 6 is at 60 s, the next minute); t2 has one row.
    assert [(e.subject, e.data["n"], e.data["mean"], e.data["start"], e.data["end"]) for e in closed] == [
        ("t1", 2, 3.0, at(0), at(60))]
    assert evaluator.snapshot().rules["rule_w@1"].keys == ['["t1"]']  # t1's second minute is open


def test_hopping_windows_count_an_event_in_every_window_that_holds_it() -> None:
    evaluator = GroupEvaluator([rule(HOPPING, "h")])
    evaluator.process(rows("t1", 1, 1, start=70, step=5), at(0))
    closed = evaluator.process([], at(600)).emitted
    assert [(e.data["start"], e.data["n"]) for e in closed] == [(at(0), 2), (at(60), 2)]


def test_events_behind_the_watermark_are_dropped_and_counted() -> None:
    result = GroupEvaluator([rule(PER_MINUTE, "w")]).process(rows("t1", 1, 2), at(3600))
    assert result.emitted == [] and result.metrics["rule_w@1"].late == 2


def test_a_failing_rule_is_reported_and_the_others_keep_their_output() -> None:
    alone = GroupEvaluator([rule(V_SHAPE, "v")]).process(rows("t1", 10, 8, 6, 9), at(600))
    together = GroupEvaluator([rule(DIVIDE, "d"), rule(V_SHAPE, "v")])
    result = together.process(rows("t1", 10, 8, 6, 9), at(600))
    assert [f.rule.name for f in result.failures] == ["d"]
    assert "division by zero" in result.failures[0].error
    assert [e.data for e in result.emitted] == [e.data for e in alone.emitted]
    assert "rule_d@1" not in together.snapshot().rules


def test_a_rule_over_its_state_budget_fails() -> None:
    result = GroupEvaluator([rule(HOARD, "hoard", state_budget=5)]).process(rows("t1", *range(10)), at(0))
    [failure] = result.failures
    assert "state budget exceeded" in failure.error and "budget 5" in failure.error


def test_a_rule_over_its_time_budget_fails() -> None:
    ticks = itertools.count()
    clock = lambda: next(ticks) * 0.5  # noqa: E731 - every reading is half a second later
    result = GroupEvaluator([rule(V_SHAPE, "v", time_budget_ms=100)], clock=clock).process(rows("t1", 1, 2), None)
    assert "time budget exceeded: more than 100 ms" in result.failures[0].error


def test_a_changed_rule_starts_with_fresh_state_and_a_removed_rules_state_is_dropped() -> None:
    evaluator = GroupEvaluator([rule(V_SHAPE, "v"), rule(PER_MINUTE, "w")])
    evaluator.process(rows("t1", 10, 8, 6), None)
    state = evaluator.snapshot()
    assert set(state.rules) == {"rule_v@1", "rule_w@1"}
    changed = GroupEvaluator([rule(V_SHAPE, "v", revision=2)], state)
    assert changed.snapshot().rules == {}
    # The new revision sees only the rows after the change: 9 alone cannot end a V.
    assert changed.process(rows("t1", 9, start=40), at(600)).emitted == []


def test_an_evaluator_kept_between_batches_answers_as_one_rebuilt_from_each_snapshot() -> None:
    # The job keeps evaluators alive in its Python workers and rebuilds them from the stored
    # snapshot only on a miss; both paths must emit the same events. Rows arrive out of
    # order within the lateness, and keys go quiet for several batches (skipped, then
    # caught up to the watermark they missed).
    rng = random.Random(11)
    rules = [rule(V_SHAPE, "v"), rule(PER_MINUTE, "w"), rule(HOPPING, "h"), rule(SLIDING, "s"),
             rule(SESSION, "g")]
    batches = []
    for batch in range(12):
        tenants = rng.sample(["t1", "t2", "t3", "t4"], rng.randint(1, 4))
        batch_rows = []
        for tenant in tenants:
            for _ in range(rng.randint(1, 6)):
                seconds = batch * 30 + rng.uniform(-8, 30)
                batch_rows += rows(tenant, rng.randint(0, 20), start=seconds)
        batches.append((batch_rows, at(batch * 30 - 5) if batch else None))
    batches.append(([], at(3600)))

    kept = GroupEvaluator(rules)
    state: GroupState | None = None
    mark = None
    live_out, rebuilt_out = [], []
    for batch_rows, watermark in batches:
        live_out += [e.id for e in kept.process(batch_rows, watermark).emitted]
        kept.snapshot()
        rebuilt = GroupEvaluator(rules, state, watermark=mark)
        rebuilt_out += [e.id for e in rebuilt.process(batch_rows, watermark).emitted]
        state, mark = copy.deepcopy(rebuilt.snapshot()), rebuilt.watermark
    assert live_out and sorted(live_out) == sorted(rebuilt_out)


LOGINS = """SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY tenantid ORDER BY event_time
  MEASURES COUNT(F.*) AS failures, LAST(S.id) AS ok PATTERN (F{2,} S) WITHIN INTERVAL '2' MINUTE
  DEFINE F AS F.type = 'failed', S AS type IN ('ok', 'sso') AND S.data.price >= 0)"""
DROPS = """SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY tenantid ORDER BY event_time
  MEASURES FIRST(A.data.price) AS top, LAST(B.data.price) AS bottom PATTERN (A B+) WITHIN INTERVAL '2' MINUTE
  DEFINE A AS A.type = 'price', B AS B.type = 'price' AND B.data.price < PREV(B.data.price))"""
ORDERS = """SELECT tenantid, window.start AS start, COUNT(*) AS n, SUM(data.price) AS total
  FROM events WHERE type = 'order' AND data.price > 2 GROUP BY tenantid, window(event_time, '1 minute')"""


def test_rules_given_only_the_rows_their_prefilter_admits_answer_as_with_every_row() -> None:
    # Rows no variable accepts still end a search through their time, even when they come
    # before the rows of the search they end (out of order, in an earlier batch): the
    # engine keeps them as barriers for keys with no state. Same output with and without.
    rng = random.Random(5)
    sqls = {"logins": LOGINS, "drops": DROPS, "orders": ORDERS}
    assert all(compile_rule(sql).prefilter is not None for sql in sqls.values())
    batches = []
    for batch in range(60):
        batch_rows = []
        for _ in range(rng.randint(0, 8)):
            tenant = rng.choice(["t1", "t2", "t3"])
            [(key, row)] = rows(tenant, rng.randint(0, 9), start=batch * 10 + rng.uniform(-9, 10))
            row["type"] = rng.choice(["failed", "failed", "ok", "sso", "price", "price", "order", "other"])
            batch_rows.append((key, row))
        batches.append((batch_rows, at(batch * 10 - 10) if batch else None))
    batches.append(([], at(3600)))

    def run(prefiltered: bool, rebuild: bool) -> list[tuple[str, str]]:
        active = []
        for name, sql in sqls.items():
            made = rule(sql, name)
            if not prefiltered:
                made = dataclasses.replace(made, compiled=dataclasses.replace(made.compiled, prefilter=None))
            active.append(made)
        evaluator, state, mark, out = GroupEvaluator(active), None, None, []
        for batch_rows, watermark in batches:
            if rebuild:
                evaluator = GroupEvaluator(active, state, watermark=mark)
            out += [(e.id, orjson.dumps(e.data).decode()) for e in evaluator.process(batch_rows, watermark).emitted]
            state, mark = copy.deepcopy(evaluator.snapshot()), evaluator.watermark
        return sorted(out)

    every_row = run(prefiltered=False, rebuild=False)
    assert len(every_row) > 20
    assert len({data for _, data in every_row}) > 10
    assert run(prefiltered=True, rebuild=False) == every_row
    assert run(prefiltered=True, rebuild=True) == every_row


def test_a_row_no_variable_accepts_ends_a_search_that_arrives_after_it() -> None:
    def login(kind: str, seconds: float) -> tuple[str, dict[str, Any]]:
        [(key, row)] = rows("t1", 1, start=seconds)
        row["type"] = kind
        return key, row

    for rebuild in (False, True):
        evaluator = GroupEvaluator([rule(LOGINS, "logins")])
        # The key has no state when the 'other' row comes: it is kept as a barrier.
        assert evaluator.process([login("other", 50)], at(0)).emitted == []
        if rebuild:
            evaluator = GroupEvaluator([rule(LOGINS, "logins")], copy.deepcopy(evaluator.snapshot()), watermark=at(0))
        late = [login("failed", 20), login("failed", 30), login("ok", 60)]
        assert evaluator.process(late, at(10)).emitted == []
        assert evaluator.process([], at(3600)).emitted == []
        # Without the barrier between them, the same rows match.
        assert len(GroupEvaluator([rule(LOGINS, "logins")]).process(late, at(3600)).emitted) == 1


PEERS = """SELECT tenantid, id AS at, COUNT(*) AS n
  FROM events GROUP BY tenantid, sliding_window(event_time, '1 minute') HAVING COUNT(*) >= 2"""
STEPS = """SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY tenantid ORDER BY event_time
  MEASURES FIRST(A.id) AS a, LAST(B.id) AS b AFTER MATCH SKIP TO NEXT ROW PATTERN (A B)
  WITHIN INTERVAL '1' MINUTE DEFINE A AS A.tenantid = 't3', B AS B.data.price > A.data.price)"""


def test_output_ids_follow_the_input_not_its_batching_or_order_within_a_batch() -> None:
    # A restarted job replays its last micro-batch, or splits the stream differently, and a
    # shuffle hands a group its rows in any order: each output must keep its id. Rows come
    # in event-time order (nothing is late); t1 and t2 have ties, which only the rows' ids
    # tell apart (a pattern's rows in a tie come in arrival order, so t3 has none).
    rng = random.Random(3)
    stream = []
    for second in range(0, 600, 4):
        for tenant in ("t1", "t2"):
            stream += rows(tenant, *(rng.randint(0, 9) for _ in range(rng.randint(1, 3))), start=second, step=0)
        stream += rows("t3", rng.randint(0, 9), start=second)
    rules = [rule(PEERS, "peers"), rule(STEPS, "steps"), rule(PER_MINUTE, "w"), rule(SESSION, "g")]

    def run(cuts: list[int], shuffled: bool) -> list[tuple[str, str]]:
        evaluator, state, mark, out = GroupEvaluator(rules), None, None, []
        for start, end in itertools.pairwise([0, *cuts, len(stream)]):
            batch_rows = stream[start:end]
            if shuffled:
                batch_rows = rng.sample(batch_rows, len(batch_rows))
            newest = max((row["event_time"] for _, row in batch_rows), default=None)
            evaluator = GroupEvaluator(rules, state, watermark=mark)
            out += [(e.id, orjson.dumps(e.data).decode()) for e in evaluator.process(batch_rows, mark).emitted]
            state = copy.deepcopy(evaluator.snapshot())
            mark = newest if newest is not None else mark
        out += [(e.id, orjson.dumps(e.data).decode())
                for e in GroupEvaluator(rules, state, watermark=mark).process([], at(7200)).emitted]
        return sorted(out)

    whole = run([], shuffled=False)
    assert len(whole) > 100 and len({item_id for item_id, _ in whole}) == len(whole)
    assert run(sorted(rng.sample(range(1, len(stream)), 40)), shuffled=True) == whole
    assert run(list(range(7, len(stream), 7)), shuffled=True) == whole


NUMBERED = """SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY data.k ORDER BY event_time
  MEASURES MATCH_NUMBER() AS n, A.id AS at PATTERN (A) WITHIN INTERVAL '1' MINUTE DEFINE A AS A.type = 'up')"""


def test_match_number_counts_a_key_s_matches_however_the_stream_is_cut() -> None:
    # Key a's matches at 1 s and 2 s, then none while key b's events move the watermark,
    # then one at 50 s. The count lapses WITHIN (a minute) after a key's last match: a's
    # match at 200 s starts afresh, however the stream is cut.
    def event(key: str, seconds: float) -> tuple[str, dict[str, Any]]:
        return orjson.dumps([key]).decode(), {"id": f"{key}@{seconds:g}", "type": "up", "tenantid": "t",
                                              "event_time": at(seconds), "data": {"k": key}}

    stream = [event("a", 1), event("a", 2), event("b", 30), event("b", 40), event("a", 50), event("b", 150),
              event("a", 200)]
    numbered = rule(NUMBERED, "numbered")

    def run(batches: list[list[tuple[str, dict[str, Any]]]]) -> tuple[dict[str, int], Any]:
        evaluator, mark, out = GroupEvaluator([numbered]), None, []
        for batch in batches:
            out += evaluator.process(batch, mark).emitted
            mark = max(row["event_time"] for _, row in batch)  # the next batch's watermark
        out += evaluator.process([], at(7200)).emitted
        return {e.data["at"]: e.data["n"] for e in out}, evaluator.snapshot().rules.get("rule_numbered@1")

    # The issue's case: one micro-batch, or one event per micro-batch.
    issue = {"a@1": 1, "a@2": 2, "b@30": 1, "b@40": 2, "a@50": 3}
    assert (run([stream[:5]])[0], run([[row] for row in stream[:5]])[0]) == (issue, issue)
    whole, state = run([stream])
    assert whole == {**issue, "b@150": 1, "a@200": 1}
    assert state is None  # once the watermark has passed every count's lapse, nothing is kept
    assert run([[row] for row in stream])[0] == whole
    # A key's count waits in its state, with nothing else, until it lapses.
    evaluator = GroupEvaluator([numbered])
    evaluator.process(stream[:2], None)
    evaluator.process([], at(30))
    assert evaluator.snapshot().rules["rule_numbered@1"].keys == ['["a"]']
    assert [e.data["n"] for e in evaluator.process(stream[4:5], at(40)).emitted + evaluator.process([], at(60)).emitted] == [3]
    evaluator.process([], at(110))
    assert "rule_numbered@1" not in evaluator.snapshot().rules


def test_a_rule_without_match_number_keeps_nothing_once_its_matches_are_out() -> None:
    sql = NUMBERED.replace("MATCH_NUMBER() AS n, ", "")
    evaluator = GroupEvaluator([rule(sql, "plain")])
    rows_ = [(orjson.dumps(["a"]).decode(), {"id": "x", "type": "up", "tenantid": "t", "event_time": at(1),
                                             "data": {"k": "a"}})]
    assert len(evaluator.process(rows_, None).emitted + evaluator.process([], at(30)).emitted) == 1
    assert "rule_plain@1" not in evaluator.snapshot().rules


def test_a_where_around_match_recognize_drops_matches_after_matching() -> None:
    # Pairs of rows; the WHERE drops the pairs whose second price is low, and the search
    # still goes on past them, as if their output had been made.
    sql = """SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY tenantid ORDER BY event_time
      MEASURES FIRST(A.data.price) AS a, LAST(A.data.price) AS b PATTERN (A A) WITHIN INTERVAL '1' HOUR
      DEFINE A AS TRUE) AS m WHERE m.b > 5 AND tenantid = 't1'"""
    result = GroupEvaluator([rule(sql, "where")]).process(rows("t1", 1, 9, 2, 3, 4, 8) + rows("t2", 1, 9), at(600))
    assert [(e.subject, e.data) for e in result.emitted] == [("t1", {"tenantid": "t1", "a": 1, "b": 9}),
                                                             ("t1", {"tenantid": "t1", "a": 4, "b": 8})]
