import pickle
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wayline.core.errors import RejectedInput
from wayline.delivery.batch import Batch, Batcher, BatchItem, BatchKey, BatchLimits, shard_for
from wayline.delivery.signing import batch_message_id

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
LIMITS = {"s1": BatchLimits(max_count=3, max_wait=SECOND), "s2": BatchLimits(max_count=5, max_wait=2.5 * SECOND)}
K1, K2 = BatchKey("s1"), BatchKey("s2")


def items(*ids: str) -> list[BatchItem]:
    return [BatchItem(i, orjson.dumps({"specversion": "1.0", "id": i})) for i in ids]


def ids(batches: list[Batch]) -> list[tuple[str, ...]]:
    return [b.event_ids for b in batches]


@pytest.fixture
def batcher() -> Batcher:
    return Batcher(LIMITS.__getitem__)


def test_a_full_batch_goes_out_at_once_without_holding_state(batcher: Batcher) -> None:
    assert ids(batcher.add(K1, items("a", "b", "c"), T0)) == [("a", "b", "c")]
    assert batcher.export(K1) is None
    assert batcher.next_deadline() is None


def test_a_bulk_add_is_cut_into_full_batches_and_the_rest_waits(batcher: Batcher) -> None:
    ready = batcher.add(K1, items(*"abcdefgh"), T0)
    assert ids(ready) == [tuple("abc"), tuple("def")]
    assert batcher.deadline(K1) == T0 + SECOND
    assert batcher.due(T0 + 0.999 * SECOND) == []
    assert ids(batcher.due(T0 + SECOND)) == [("g", "h")]


def test_the_wait_counts_from_the_first_pending_item(batcher: Batcher) -> None:
    batcher.add(K1, items("a"), T0)
    batcher.add(K1, items("b"), T0 + 0.8 * SECOND)
    assert ids(batcher.due(T0 + SECOND)) == [("a", "b")]


def test_after_a_count_flush_the_wait_restarts_with_the_leftovers(batcher: Batcher) -> None:
    batcher.add(K1, items("a", "b"), T0)
    assert ids(batcher.add(K1, items("c", "d"), T0 + 0.5 * SECOND)) == [("a", "b", "c")]
    assert batcher.deadline(K1) == T0 + 1.5 * SECOND
    assert batcher.due(T0 + SECOND) == []
    assert ids(batcher.due(T0 + 1.5 * SECOND)) == [("d",)]


def test_items_arriving_after_a_missed_deadline_go_out_with_the_overdue_ones(batcher: Batcher) -> None:
    batcher.add(K1, items("a"), T0)
    assert ids(batcher.add(K1, items("b"), T0 + 2 * SECOND)) == [("a", "b")]
    assert batcher.next_deadline() is None


def test_keys_batch_independently_and_the_next_deadline_is_the_earliest(batcher: Batcher) -> None:
    batcher.add(K2, items("x"), T0)
    batcher.add(K1, items("a"), T0 + 0.1 * SECOND)
    assert batcher.next_deadline() == T0 + 1.1 * SECOND
    assert [(b.key, b.event_ids) for b in batcher.due(T0 + 2 * SECOND)] == [(K1, ("a",))]
    assert batcher.next_deadline() == T0 + 2.5 * SECOND
    assert [(b.key, b.event_ids) for b in batcher.due(T0 + 3 * SECOND)] == [(K2, ("x",))]


def test_a_lower_limit_applies_to_the_next_add() -> None:
    limits = {"s1": BatchLimits(max_count=10, max_wait=SECOND)}
    batcher = Batcher(limits.__getitem__)
    batcher.add(K1, items(*"abcdefgh"), T0)
    limits["s1"] = BatchLimits(max_count=5, max_wait=SECOND)
    assert ids(batcher.add(K1, items("i"), T0 + 0.5 * SECOND)) == [tuple("abcde")]
    # The leftovers arrived before the flush: their wait still counts from T0.
    assert batcher.deadline(K1) == T0 + SECOND


def test_a_lower_limit_splits_what_the_timer_hands_back() -> None:
    limits = {"s1": BatchLimits(max_count=10, max_wait=SECOND)}
    batcher = Batcher(limits.__getitem__)
    batcher.add(K1, items(*"abcd"), T0)
    limits["s1"] = BatchLimits(max_count=3, max_wait=SECOND)
    assert ids(batcher.due(T0 + SECOND)) == [("a", "b", "c"), ("d",)]


def test_state_survives_export_and_restore_in_a_new_batcher(batcher: Batcher) -> None:
    batcher.add(K1, items("a", "b"), T0)
    state = pickle.loads(pickle.dumps(batcher.export(K1)))
    batcher.forget(K1)
    assert batcher.export(K1) is None and batcher.due(T0 + 5 * SECOND) == []
    restored = Batcher(LIMITS.__getitem__)
    restored.restore(K1, state)
    assert restored.next_deadline() == T0 + SECOND
    assert ids(restored.add(K1, items("c"), T0 + 0.5 * SECOND)) == [("a", "b", "c")]


def test_the_batch_body_is_a_json_array_of_the_events_as_given() -> None:
    batch = Batch(K1, tuple(items("a", "b")))
    assert orjson.loads(batch.body) == [{"specversion": "1.0", "id": "a"}, {"specversion": "1.0", "id": "b"}]
    assert batch.body == b"[" + batch.items[0].body + b"," + batch.items[1].body + b"]"
    assert batch.webhook_id == batch_message_id("s1", ["b", "a"])


def test_shards_are_deterministic_and_spread() -> None:
    assert shard_for("evt-1", 8) == shard_for("evt-1", 8)
    # CRC-32 values Spark SQL's crc32() gives too (pinned).
    assert [shard_for(e, 1000) for e in ("evt-1", "evt-2", "ü")] == [457, 699, 789]
    counts = [0] * 4
    for n in range(4000):
        counts[shard_for(f"evt-{n}", 4)] += 1
    assert min(counts) > 800
    with pytest.raises(RejectedInput):
        shard_for("evt-1", 0)


def test_bad_limits_are_rejected() -> None:
    with pytest.raises(RejectedInput):
        BatchLimits(max_count=0)
    with pytest.raises(RejectedInput):
        BatchLimits(max_wait=timedelta(0))


KEYS = [BatchKey("s1", 0), BatchKey("s1", 1), BatchKey("s2", 0)]
operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 1500), st.sampled_from(KEYS), st.integers(1, 12)),
        st.tuples(st.just("due"), st.integers(0, 1500), st.none(), st.none()),
        st.tuples(st.just("restart"), st.just(0), st.none(), st.none()),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_batching_properties(ops: list[tuple[str, int, BatchKey | None, int | None]]) -> None:
    batcher = Batcher(LIMITS.__getitem__)
    now = T0
    arrived: dict[str, tuple[BatchKey, datetime]] = {}
    sent: dict[BatchKey, list[str]] = {key: [] for key in KEYS}
    emitted: list[Batch] = []
    counter = 0

    def take(batches: list[Batch]) -> None:
        for batch in batches:
            assert 1 <= len(batch.items) <= LIMITS[batch.key.subscription_id].max_count
            for event_id in batch.event_ids:
                assert arrived[event_id][0] == batch.key, "a batch mixed keys"
            sent[batch.key].extend(batch.event_ids)
            emitted.append(batch)

    for op, step_ms, key, count in ops:
        now += timedelta(milliseconds=step_ms)
        if op == "add":
            assert key is not None and count is not None
            new = [f"e{counter + n}" for n in range(count)]
            counter += count
            arrived.update({event_id: (key, now) for event_id in new})
            take(batcher.add(key, items(*new), now))
        elif op == "due":
            take(batcher.due(now))
            waiting = set(arrived) - {e for events in sent.values() for e in events}
            for event_id in waiting:
                k, at = arrived[event_id]
                assert now < at + LIMITS[k.subscription_id].max_wait, f"{event_id} waited past max_wait"
        else:
            # A restart: every key's state goes through the state store into a new batcher.
            states = {k: batcher.export(k) for k in KEYS}
            batcher = Batcher(LIMITS.__getitem__)
            for k, state in states.items():
                if state is not None:
                    batcher.restore(k, pickle.loads(pickle.dumps(state)))
        deadline = batcher.next_deadline()
        pending = [d for d in (batcher.deadline(k) for k in KEYS) if d is not None]
        assert deadline == (min(pending) if pending else None)

    take(batcher.due(now + timedelta(days=1)))
    assert batcher.next_deadline() is None
    all_sent = [e for events in sent.values() for e in events]
    assert sorted(all_sent) == sorted(arrived), "every item in exactly one batch"
    for key in KEYS:
        in_order = [e for e, (k, _) in sorted(arrived.items(), key=lambda kv: int(kv[0][1:])) if k == key]
        assert sent[key] == in_order, "items of a key keep their order"
