from datetime import UTC, datetime, timedelta

import orjson

from wayline.delivery.batch import BatchItem, BatchKey, BatchLimits
from wayline.delivery.bucket import Bucket, Bundle, ReadyBatch, Source

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
HOUR = timedelta(hours=1)
LIMITS = BatchLimits(max_count=3, max_wait=SECOND)
RUN = "run-1"


def bundle(sub: str, shard: int, batch_id: int, *ids: str, run: str = RUN, limits: BatchLimits = LIMITS) -> Bundle:
    items = tuple(BatchItem(i, orjson.dumps({"id": i, "note": "é"})) for i in ids)
    return Bundle(BatchKey(sub, shard), f"ep-{sub}", limits, items, Source(run, batch_id))


def shape(ready: list[ReadyBatch]) -> list[tuple[str, int, str, tuple[str, ...]]]:
    return [(r.batch.key.subscription_id, r.batch.key.shard, r.endpoint_id, r.batch.event_ids) for r in ready]


def reloaded(bucket: Bucket, now: datetime) -> Bucket:
    return Bucket.load(bucket.dump(now), HOUR)


def test_keys_batch_independently_and_carry_their_endpoint() -> None:
    bucket = Bucket(HOUR)
    ready = bucket.add([bundle("s1", 0, 1, "a", "b"), bundle("s2", 0, 1, "x"), bundle("s1", 1, 1, "c")], T0)
    assert ready == []
    ready = bucket.add([bundle("s1", 0, 2, "d", "e")], T0 + 0.5 * SECOND)
    assert shape(ready) == [("s1", 0, "ep-s1", ("a", "b", "d"))]
    assert bucket.wake_at() == T0 + SECOND
    assert sorted(shape(bucket.due(T0 + SECOND))) == [("s1", 1, "ep-s1", ("c",)), ("s2", 0, "ep-s2", ("x",))]
    assert bucket.wake_at() == T0 + 1.5 * SECOND
    assert shape(bucket.due(T0 + 1.5 * SECOND)) == [("s1", 0, "ep-s1", ("e",))]


def test_state_survives_a_dump_and_load_exactly() -> None:
    bucket = Bucket(HOUR)
    bucket.add([bundle("s1", 0, 1, "a"), bundle("s2", 3, 1, "x", "y")], T0)
    again = reloaded(bucket, T0)
    assert again.wake_at() == T0 + SECOND
    first, second = again.due(T0 + SECOND)
    assert shape([first, second]) == [("s1", 0, "ep-s1", ("a",)), ("s2", 3, "ep-s2", ("x", "y"))]
    assert second.batch.body == b"[" + orjson.dumps({"id": "x", "note": "é"}) + b"," + orjson.dumps(
        {"id": "y", "note": "é"}) + b"]"


def test_a_bundle_handed_over_twice_is_dropped_even_after_a_restart() -> None:
    bucket = Bucket(HOUR)
    bucket.add([bundle("s1", 0, 7, "a")], T0)
    bucket = reloaded(bucket, T0)
    assert bucket.add([bundle("s1", 0, 7, "a"), bundle("s1", 0, 6, "z")], T0) == []
    assert bucket.duplicates == 2
    assert shape(bucket.due(T0 + SECOND)) == [("s1", 0, "ep-s1", ("a",))]
    # A later micro-batch, or the same number from another run (a new checkpoint), is new.
    bucket.add([bundle("s1", 0, 8, "b"), bundle("s1", 0, 1, "c", run="run-2")], T0 + 2 * SECOND)
    assert shape(bucket.due(T0 + 3 * SECOND)) == [("s1", 0, "ep-s1", ("b", "c"))]


def test_the_replay_guard_outlives_the_batch_then_is_forgotten() -> None:
    bucket = Bucket(HOUR)
    bucket.add([bundle("s1", 0, 7, "a")], T0)
    bucket.due(T0 + SECOND)
    assert bucket.wake_at() == T0 + HOUR, "nothing pending: wake up to forget the guard"
    kept = reloaded(bucket, T0 + SECOND)
    assert kept.add([bundle("s1", 0, 7, "a")], T0 + 2 * SECOND) == [] and kept.duplicates == 1
    idle = Bucket(HOUR)
    idle.add([bundle("s1", 0, 7, "a")], T0)
    idle.due(T0 + SECOND)
    assert idle.dump(T0 + HOUR) is None
    assert idle.wake_at() is None


def test_full_bundles_go_out_at_once_in_max_count_chunks() -> None:
    bucket = Bucket(HOUR)
    bucket.add([bundle("s1", 0, 1, "a", "b")], T0)
    ready = bucket.add([bundle("s1", 0, 2, "c", "d", "e", "f", "g")], T0)
    assert shape(ready) == [("s1", 0, "ep-s1", ("a", "b", "c")), ("s1", 0, "ep-s1", ("d", "e", "f"))]
    assert shape(bucket.due(T0 + SECOND)) == [("s1", 0, "ep-s1", ("g",))]


def test_a_subscription_whose_limits_change_uses_the_new_ones() -> None:
    bucket = Bucket(HOUR)
    bucket.add([bundle("s1", 0, 1, "a", "b")], T0)
    ready = bucket.add([bundle("s1", 0, 2, "c", limits=BatchLimits(max_count=2, max_wait=SECOND))], T0)
    assert shape(ready) == [("s1", 0, "ep-s1", ("a", "b"))]
    assert shape(bucket.due(T0 + SECOND)) == [("s1", 0, "ep-s1", ("c",))]
