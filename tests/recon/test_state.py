"""The reconciler on plain records: every case the job must get right, without Spark."""

from __future__ import annotations

import pickle

from wayline.recon.periods import Periods
from wayline.recon.state import Bucket, Counts, Record

S = 1000
# o = 1 min, n = 10 s, m = 60 s, z = 30 s
PERIODS = Periods(o=60 * S, n=10 * S, m=60 * S, z=30 * S)
W0 = 0  # the first metric window


def exp(id_: str, t: float, source: str = "src") -> Record:
    return Record("expected", id_, source, int(t * S))


def act(id_: str, t: float, source: str = "src") -> Record:
    return Record("actual", id_, source, int(t * S))


def beat(t: float) -> Record:
    return Record("heartbeat", "", "", int(t * S))


def run(bucket: Bucket, *batches: list[Record], now: int = 0):
    """Each batch in turn; returns every emitted event as (kind, id) and the summed figures."""
    events, totals = [], {}
    for batch in batches:
        step = bucket.process(batch, now)
        events += [(e.kind, e.id) for e in step.emitted]
        for key, counts in step.counts.items():
            totals.setdefault(key, Counts()).add(counts)
    return events, totals


def test_all_present() -> None:
    events, totals = run(Bucket(PERIODS), [exp("a", 1), exp("b", 2), act("b", 2), act("a", 3)], [beat(50)])
    assert events == []
    assert totals == {("src", W0): Counts(expected=2, matched=2)}


def test_missing_once_the_watermark_passes_time_plus_n_and_never_found() -> None:
    bucket = Bucket(PERIODS)
    events, _ = run(bucket, [exp("a", 1), exp("b", 5), act("b", 6)], [beat(20.999)])
    assert events == []  # watermark 10.999 < 1 + 10
    events, totals = run(bucket, [beat(21)], [beat(200)])
    assert events == [("missing", "a")]
    assert totals[("src", W0)] == Counts(missing=1)
    assert bucket.size == 0  # past m: dropped


def test_missing_then_found_within_m() -> None:
    bucket = Bucket(PERIODS)
    events, totals = run(bucket, [exp("a", 1)], [beat(30)], [act("a", 40)])
    assert events == [("missing", "a"), ("found", "a")]
    assert totals[("src", W0)] == Counts(expected=1, matched=1, missing=0, found=1)


def test_an_actual_after_m_does_not_find() -> None:
    bucket = Bucket(PERIODS)
    events, totals = run(bucket, [exp("a", 1)], [beat(30)], [act("a", 62)], [beat(200)])
    assert events == [("missing", "a")]
    assert totals[("src", W0)] == Counts(expected=1, missing=1)
    assert set(totals) == {("src", W0)}  # the actual matched nothing and counts nowhere


def test_a_record_past_its_retention_is_too_late_and_counted() -> None:
    bucket = Bucket(PERIODS)
    events, totals = run(bucket, [exp("a", 100)], [beat(200)], [act("a", 100)])
    assert events == [("missing", "a")]
    assert totals[("src", 60 * S)] == Counts(expected=1, missing=1, too_late=1)


def test_out_of_order_within_n() -> None:
    events, totals = run(Bucket(PERIODS), [act("a", 12), exp("b", 14)], [exp("a", 5), act("b", 9)], [beat(100)])
    assert events == []
    assert totals[("src", W0)] == Counts(expected=2, matched=2)


def test_duplicates_on_either_side_are_counted_once_each() -> None:
    events, totals = run(Bucket(PERIODS), [exp("a", 1), exp("a", 2), act("a", 3)], [act("a", 4), act("a", 5)],
                         [beat(100)])
    assert events == []
    assert totals[("src", W0)] == Counts(expected=1, matched=1, duplicates=3)


def test_a_late_audit_record_matches_without_a_missing() -> None:
    bucket = Bucket(PERIODS)
    events, totals = run(bucket, [act("a", 1)], [beat(30)], [exp("a", 1)], [beat(200)])
    assert events == []
    assert totals[("src", W0)] == Counts(expected=1, matched=1, late=1)


def test_a_late_actual_finds_and_is_counted_late() -> None:
    events, totals = run(Bucket(PERIODS), [exp("a", 1)], [beat(30)], [act("a", 2)])
    assert events == [("missing", "a"), ("found", "a")]
    assert totals[("src", W0)] == Counts(expected=1, matched=1, found=1, late=1)


def test_a_stalled_clock_moves_on_after_z_of_processing_time() -> None:
    bucket = Bucket(PERIODS)
    assert bucket.process([exp("a", 1), beat(5)], now=1_000_000).emitted == []
    assert bucket.wake_at == 1_000_000 + 30 * S
    assert bucket.process([], now=1_000_000 + 29 * S).emitted == []  # not stalled yet
    step = bucket.process([], now=1_000_000 + 30 * S)  # clock 5 + 30 = 35 s, watermark 25 s
    assert [(e.kind, e.id, e.watermark) for e in step.emitted] == [("missing", "a", 25 * S)]


def test_heartbeats_only_move_the_watermark() -> None:
    bucket = Bucket(PERIODS)
    events, totals = run(bucket, [beat(10)], [beat(70)])
    assert (events, totals, bucket.watermark, bucket.wake_at) == ([], {}, 60 * S, None)


def test_figures_go_to_the_expected_ids_window_and_source() -> None:
    events, totals = run(Bucket(PERIODS), [exp("a", 59, "s1"), exp("b", 61, "s2"), act("a", 62, "s9")], [beat(200)])
    assert events == [("missing", "b")]
    assert totals == {("s1", W0): Counts(expected=1, matched=1), ("s2", 60 * S): Counts(expected=1, missing=1)}


def _stored(bucket: Bucket, store: dict) -> Bucket:
    """What the job does between micro-batches: write the changed chunks, rebuild from the store."""
    for number, chunk in bucket.take_changed().items():
        if chunk is None:
            store.pop(number, None)
        else:
            store[number] = pickle.dumps(chunk)
    return Bucket.restore(bucket.periods, bucket.clock, bucket.moved_at, (pickle.loads(b) for b in store.values()))


def test_a_bucket_rebuilt_from_its_chunks_after_every_batch_decides_the_same() -> None:
    batches = [[exp("a", 1), exp("b", 2), act("b", 3), exp("c", 70)], [beat(30)], [act("a", 40), act("a", 41)],
               [exp("d", 130), act("c", 71)], [beat(300)], [act("d", 131)]]
    live = Bucket(PERIODS)
    expected = run(live, *batches)
    store: dict = {}
    rebuilt, events, totals = Bucket(PERIODS), [], {}
    for batch in batches:
        more_events, more_totals = run(rebuilt, batch)
        events += more_events
        for key, counts in more_totals.items():
            totals.setdefault(key, Counts()).add(counts)
        rebuilt = _stored(rebuilt, store)
    assert (events, totals) == expected
    assert expected[0] == [("missing", "a"), ("found", "a"), ("missing", "d")]
    assert (rebuilt.size, store) == (live.size, {})  # past m everything is dropped, chunks too


def test_a_batch_changes_only_the_chunks_it_touches() -> None:
    bucket = Bucket(PERIODS)
    bucket.process([exp(f"e{t}", t) for t in range(0, 300, 5)], now=0)  # watermark 285: 0..215 expired
    assert sorted(bucket.take_changed()) == [0, 1, 2, 3, 4]
    bucket.process([exp("late", 290), act("e280", 281)], now=0)
    assert sorted(bucket.take_changed()) == [4]
