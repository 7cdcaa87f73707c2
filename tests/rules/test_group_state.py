"""A group's stored state: columns over each rule's keys, segments decoded only when used,
and the layouts written before (per key, and under the engine's module)."""

from __future__ import annotations

import pickle

import orjson

from tests.rules.groups import PER_MINUTE, SESSION, SLIDING, V_SHAPE, rows, rule
from tests.rules.streams import at
from wayline.rules.engine import GroupEvaluator
from wayline.rules.group_state import GroupState, RuleState


def test_a_rule_s_state_is_columns_over_its_keys_and_only_visited_keys_are_decoded() -> None:
    rules = [rule(V_SHAPE, "v"), rule(SLIDING, "s"), rule(SESSION, "g")]
    evaluator = GroupEvaluator(rules)
    evaluator.process(rows("t2", 7, 5, start=100), None)
    evaluator.snapshot()
    evaluator.process(rows("t1", 10, 8, 6, 9), at(0))
    state = evaluator.snapshot()
    # t2 did not change in the second batch: its states stay in the first segment.
    assert len(state.segments) == 2 and state.lengths == [3, 3]
    for columns in state.rules.values():
        assert columns.keys == ['["t2"]', '["t1"]']
        # Each key waits for the watermark to pass its first row (at 100 and at 0 seconds).
        assert columns.columns["wake"].tolist() == [int(at(100).timestamp() * 1_000_000) + 1,
                                                    int(at(0).timestamp() * 1_000_000) + 1]
        assert columns.columns["segment"].tolist() == [0, 1] and columns.columns["sizes"].tolist()[0] >= 2
    # t2's segment is unreadable; a batch that neither brings t2 rows nor reaches its wake
    # time must not read it, while t1 is woken and settles its match.
    state.segments[0] = b"not a pickle"
    resumed = GroupEvaluator(rules, state, watermark=at(0))
    result = resumed.process([], at(60))
    assert result.failures == []
    assert [(e.subject, e.data["top"]) for e in result.emitted if e.rule.name == "v"] == [("t1", 10)]
    woken = resumed.process([], at(150))
    assert {failure.rule.name for failure in woken.failures} == {"v", "s", "g"}  # t2 visited: decoded


def test_a_segment_that_few_keys_refer_to_is_rewritten_and_one_that_none_do_dropped() -> None:
    rules = [rule(SLIDING, "s")]
    evaluator = GroupEvaluator(rules)
    evaluator.process(rows("t1", 1, start=0) + rows("t2", 1, start=0) + rows("t3", 1, start=0), at(0))
    assert evaluator.snapshot().lengths == [3]
    evaluator.process(rows("t1", 2, start=30) + rows("t2", 2, start=30), at(10))
    state = evaluator.snapshot()
    # t1 and t2 moved to the second segment; t3 alone in the first: rewritten with them.
    assert state.lengths == [3] and state.rules["rule_s@1"].columns["segment"].tolist() == [0, 0, 0]
    evaluator.process([], at(3600))
    assert evaluator.snapshot() == GroupState({}, [], [])


def test_state_kept_one_entry_per_key_resumes_as_the_columns_do() -> None:
    # Checkpoints written before the columnar layout hold {rule: {key: the key's own state}}.
    rules = [rule(V_SHAPE, "v"), rule(SLIDING, "s"), rule(SESSION, "g"), rule(PER_MINUTE, "w")]
    first = rows("t1", 10, 8, 6, 9, 12) + rows("t2", 7, 5, 9, start=20)
    evaluator = GroupEvaluator(rules)
    evaluator.process(first, at(25))
    state, mark = evaluator.snapshot(), evaluator.watermark
    segments = [pickle.loads(encoded) for encoded in state.segments]
    old = {state_key: {key: segments[segment][index] for key, segment, index in zip(
        columns.keys, columns.columns["segment"].tolist(), columns.columns["index"].tolist(), strict=True)}
        for state_key, columns in state.rules.items()}
    later = rows("t1", 3, 4, start=60) + rows("t2", 1, start=70)
    outputs = []
    for resumed in (GroupEvaluator(rules, state, watermark=mark), GroupEvaluator(rules, old, watermark=mark)):
        emitted = resumed.process(later, at(90)).emitted + resumed.process([], at(3600)).emitted
        outputs.append(sorted((e.id, orjson.dumps(e.data).decode()) for e in emitted))
    assert len(outputs[0]) > 3 and outputs[0] == outputs[1]


def test_a_state_blob_that_names_the_engine_s_module_still_loads(monkeypatch) -> None:
    # The rules job's state store holds pickled GroupStates, and pickle names a class by its
    # module: those written before group_state.py name wayline.rules.engine.
    evaluator = GroupEvaluator([rule(SLIDING, "s")])
    evaluator.process(rows("t1", 1, 2, 3), at(0))
    for kind in (GroupState, RuleState):
        monkeypatch.setattr(kind, "__module__", "wayline.rules.engine")
    blob = pickle.dumps(evaluator.snapshot())
    monkeypatch.undo()
    assert b"wayline.rules.engine" in blob and b"wayline.rules.group_state" not in blob
    resumed = GroupEvaluator([rule(SLIDING, "s")], pickle.loads(blob), watermark=at(0))
    kept = evaluator.process([], at(3600)).emitted
    assert kept and [e.id for e in resumed.process([], at(3600)).emitted] == [e.id for e in kept]
