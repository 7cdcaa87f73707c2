"""The reconciler on plain records: every case the job must get right, without Spark."""

from __future__ import annotations

import pickle

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from wayline.recon.figures import Counts
from wayline.recon.packing import clocked, pack
from wayline.recon.periods import Periods
from wayline.recon.state import Bucket, Record, Step

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


def test_records_it_cannot_read_are_counted_in_their_window_and_source_and_move_nothing() -> None:
    bucket = Bucket(PERIODS)
    step = bucket.process([exp("a", 1), act("a", 2)], now=0)
    bucket.count_unreadable(["s1", "s1", ""], [1 * S, 59 * S, 61 * S], step)
    assert dict(step.counts) == {("src", W0): Counts(expected=1, matched=1), ("s1", W0): Counts(unreadable=2),
                                 ("", 60 * S): Counts(unreadable=1)}
    assert (bucket.clock, bucket.size) == (2 * S, 2)


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


# -- the column-wise settling of pairs against the per-record rules ------------------------------

RECORDS = st.builds(
    Record, st.sampled_from(["expected", "expected", "actual", "actual", "heartbeat"]),
    st.sampled_from([f"i{n}" for n in range(12)]), st.sampled_from(["s1", "s2"]),
    st.integers(0, 240).map(lambda seconds: seconds * 500))


def _outputs(step: Step) -> tuple:
    return ([(e.kind, e.id, e.source, e.expected_time, e.actual_time, e.watermark) for e in step.emitted],
            {key: counts for key, counts in step.counts.items()}, step.watermark)


def _compare(batches: list[tuple[list[Record], int]], periods: Periods = PERIODS, restore: bool = False) -> int:
    """Feeds the batches to the per-record reference and the settling bucket; every output must agree.
    Returns how many records the settling bucket held in columns at some point (for the tests' own checks)."""
    reference, bucket = Bucket(periods, settle=False), Bucket(periods)
    store: dict = {}
    settled_seen = 0
    for records, now in batches:
        expected = _outputs(reference.process(records, now))
        assert _outputs(bucket.process(records, now)) == expected
        settled_seen = max(settled_seen, sum(r.num_rows for held in bucket._settled for r in held.values()))
        assert (bucket.clock, bucket.moved_at, bucket.watermark, bucket.wake_at, bucket.size) == (
            reference.clock, reference.moved_at, reference.watermark, reference.wake_at, reference.size)
        if restore:
            bucket = _stored(bucket, store)
    return settled_seen


def test_settled_pairs_count_as_record_by_record_and_later_records_of_their_ids_are_judged_alike() -> None:
    batches = [
        ([exp("a", 1), act("a", 2), exp("b", 3, "s2"), act("b", 4), exp("c", 5), act("d", 6)], 0),
        ([exp("a", 7), act("b", 8), act("c", 9), exp("d", 10)], 0),  # duplicates of settled ids; late pairs
        ([beat(40), exp("e", 20), act("e", 21), exp("f", 45), act("f", 46)], 0),  # late, and on time
        ([beat(62)], 0),  # the pairs' expected at 1..5 s expire; a late actual of one is then judged anew
        ([act("a", 2), exp("a", 5), exp("f", 100)], 0),
        ([], 40_000), ([beat(400)], 80_000),
    ]
    assert _compare(batches) > 0
    assert _compare(batches, restore=True) > 0


def test_an_id_held_on_one_side_settles_with_its_other_side_unless_the_rules_say_otherwise() -> None:
    batches = [
        ([exp("a", 1), act("b", 2), act("c", 3), exp("d", 4), exp("e", 5)], 0),
        ([beat(16)], 0),  # e is reported missing: its actual will find it, record by record
        ([act("a", 17), exp("b", 18), act("e", 19)], 0),  # a and b settle with their held other side
        ([exp("c", 70), act("d", 70)], 0),  # more than m from the held ones: both sides held, unmatched
        ([act("c", 71), exp("d", 71)], 0),  # so these are duplicates, not matches
        ([beat(400)], 0),
    ]
    assert _compare(batches) > 0
    assert _compare(batches, restore=True) > 0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(RECORDS, max_size=14), st.integers(0, 3)), max_size=10),
       st.sampled_from([PERIODS, Periods(o=30 * S, n=5 * S, m=5 * S, z=10 * S), Periods(o=60 * S, n=1, m=120 * S, z=S)]),
       st.booleans())
def test_random_streams_give_the_same_outputs_settled_or_record_by_record(
        batches: list[tuple[list[Record], int]], periods: Periods, restore: bool) -> None:
    now = 0
    timed = []
    for records, pause in batches:
        now += pause * 10 * S  # processing time moves too, so the z timeout comes into play
        timed.append((records, now))
    _compare(timed, periods, restore)


def test_chunks_stored_before_pairs_were_settled_in_columns_restore_as_they_were() -> None:
    batches = [[exp("a", 1), act("a", 2), exp("b", 3)], [act("c", 4), exp("a", 5)]]
    old, live = Bucket(PERIODS, settle=False), Bucket(PERIODS, settle=False)
    run(old, *batches)
    run(live, *batches)
    # The earlier layout: per chunk only the per-id entries of both sides.
    stored = [(chunk[0], chunk[1]) for chunk in old.take_changed().values() if chunk is not None]
    restored = Bucket.restore(PERIODS, old.clock, old.moved_at, stored)
    later = [[act("b", 6), exp("c", 7), act("a", 8)], [beat(200)]]
    assert run(restored, *later) == run(live, *later) == ([], {("src", W0): Counts(expected=1, matched=2,
                                                                                     duplicates=1)})


# -- one clock per reconciliation, across its buckets (issue 23, item 13) ------------------------


def through_buckets(batches: list[list[tuple[Record, int]]], periods: Periods,
                    buckets: int = 16) -> tuple[list[tuple], list[Bucket]]:
    """The job's path without Spark: each micro-batch's records, with the bucket routing gave
    them, clocked and packed as the job does, then each key's records to that key's bucket.
    Per micro-batch: the events as (kind, id, expected time, watermark), the summed figures,
    and the published watermark (the newest of the buckets', as the store keeps it)."""
    state = [Bucket(periods) for _ in range(buckets)]
    out = []
    for records in batches:
        routed = pa.RecordBatch.from_pylist(
            [{"recon_id": "r", "side": r.side, "id": r.id, "source": r.source, "time": r.time, "bucket": b}
             for r, b in records],
            schema=pa.schema([("recon_id", pa.string()), ("side", pa.string()), ("id", pa.string()),
                              ("source", pa.string()), ("time", pa.int64()), ("bucket", pa.int32())]))
        per_key = {row["bucket"]: row for row in pa.Table.from_batches(list(pack([clocked(routed, buckets)])))
                   .to_pylist()}
        events, totals, marks = [], {}, []
        for number, bucket in enumerate(state):
            row = per_key.get(number)
            got = [] if row is None else [Record(*values) for values in zip(
                row["side"], row["id"], row["source"], row["time"], strict=True)]
            step = bucket.process(got, now=0)
            events += [(e.kind, e.id, e.expected_time, e.watermark) for e in step.emitted]
            for key, counts in step.counts.items():
                totals.setdefault(key, Counts()).add(counts)
            marks.append(step.watermark)
        out.append((events, totals, max(mark for mark in marks if mark is not None)))
    return out, state


def test_a_missing_id_is_reported_by_the_reconciliations_clock_not_only_its_buckets() -> None:
    """The issue's reproduction: 16 buckets; x expected at 1 s; other ids' records up to 60 s,
    in other buckets. The watermark that closes x's window reports x missing in the same
    micro-batch, and x's actual at 1.5 s, more than m behind it, is too late."""
    periods = Periods(o=10 * S, n=10 * S, m=30 * S, z=3600 * S)
    x, y, z = 3, 7, 11  # the buckets of the ids x, y, z
    out, state = through_buckets([
        [(exp("x", 1), x), (exp("y", 2), y), (act("y", 2), y)],
        [(exp("z", 60), z), (act("z", 60), z)],
        [(act("x", 1.5), x)],
    ], periods)
    assert out == [
        ([], {("src", W0): Counts(expected=2, matched=1)}, -8 * S),
        ([("missing", "x", 1 * S, 50 * S)], {("src", W0): Counts(missing=1), ("src", 60 * S): Counts(expected=1, matched=1)},
         50 * S),
        ([], {("src", W0): Counts(too_late=1)}, 50 * S),
    ]
    assert {bucket.watermark for bucket in state} == {50 * S}  # every bucket on the reconciliation's clock
