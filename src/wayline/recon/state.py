"""The reconciler of one bucket of ids: a plain class the job keeps one of per (reconciliation, bucket).

A micro-batch's records go through :meth:`Bucket.process` together, in event-time order:

1. each record is judged against the watermark as it stood when the batch began:
   *too late* if its own state would already be dropped (``time + m <= watermark``:
   counted, never matched), *late* if older than the watermark (counted, and applied);
2. an expected id is added, or counted as a duplicate while its first record is kept; an
   actual likewise. An expected and an actual of the same id whose times are at most
   ``m`` apart match: the expected's window counts one more matched, and if the expected
   had been reported missing, a ``found`` is emitted and the window's missing drops by one;
3. the clock moves to the newest event time seen (heartbeats included); if it has not
   moved for ``z`` of processing time, it moves on by the processing time that passed;
4. every expected still unmatched with ``time + n <= watermark`` is reported ``missing``;
5. ids with ``time + m <= watermark`` are dropped: their answer is final.

Most records of a healthy stream end as *settled pairs*: an id whose one expected and one
actual arrive in the same micro-batch, neither too late, at most ``m`` apart, and nothing of
it held before. Step 2 for those is done column-wise (:meth:`Bucket._settle`): the figures
they add are tallied per window at once and the pairs are kept as Arrow arrays per chunk of
event time rather than as per-id entries, until their ``m`` passes. A later record of a
settled id is found by a vectorised look-up, and the pair is moved into the per-id entries
before the rules above run on it, so every record is judged exactly as one by one.

Figures are kept per (source, window of ``o``): expected, matched, missing (reported
and not found since), found, duplicates, late and too-late records, and the records of
the reconciliation's topics it could not read (:meth:`Bucket.count_unreadable`). An
expected id's figures go to its own source and window; an actual's duplicates and late
records to the actual's source and window. ``process`` returns the changes, which the job
adds up.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from wayline.recon.figures import Counts, Emitted
from wayline.recon.periods import Periods, window_start

Side = Literal["expected", "actual", "heartbeat"]
SIDE_ORDER = {"expected": 0, "actual": 1, "heartbeat": 2}
# The routed side of a record the reconciliation cannot read: counted, never judged.
UNREADABLE = "unreadable"
PENDING, MATCHED, MISSING = 0, 1, 2


@dataclass(frozen=True)
class Record:
    side: Side
    id: str
    source: str
    time: int  # event time, ms since the epoch


@dataclass
class Step:
    """What one call changed: events to emit, figure changes per (source, window), the watermark."""

    emitted: list[Emitted] = field(default_factory=list)
    counts: dict[tuple[str, int], Counts] = field(default_factory=lambda: defaultdict(Counts))
    watermark: int | None = None


# Event time per chunk of stored state: a micro-batch rewrites only the chunks it changed.
CHUNK_MS = 60_000
# A chunk's settled records of one side, in columns (time order within a micro-batch's filing).
SETTLED_SCHEMA = pa.schema([("id", pa.string()), ("time", pa.int64()), ("source", pa.string())])
# (expected ids, actual ids, settled expected records, settled actual records) with times in one chunk
Chunk = tuple[dict[str, list], dict[str, list], pa.RecordBatch | None, pa.RecordBatch | None]


class Bucket:
    """Per-id state of one bucket: expected ids ``[time, source, status]``, actual ids ``[time, source, matched]``,
    and the settled pairs' records in columns.

    Deadlines are heaps of ``(time, id)``, so a micro-batch visits only the ids whose
    ``n`` or ``m`` has come, not every id held. The ids are also filed by chunk of event
    time (:data:`CHUNK_MS`), and the chunks a call changed are remembered
    (:meth:`take_changed`), so the job stores only those.

    ``settle=False`` sends every record through the per-record rules: the reference the
    column-wise path is tested against.
    """

    def __init__(self, periods: Periods, clock: int | None = None, moved_at: int | None = None,
                 settle: bool = True) -> None:
        self.periods = periods
        self.clock = clock  # the newest event time seen
        self.moved_at = moved_at  # processing time the clock last moved
        self.settle = settle
        self.expected: dict[str, list] = {}
        self.actual: dict[str, list] = {}
        # Per side (0 expected, 1 actual): chunk number -> that chunk's settled records.
        self._settled: tuple[dict[int, pa.RecordBatch], dict[int, pa.RecordBatch]] = ({}, {})
        self._chunks: dict[int, tuple[dict[str, list], dict[str, list]]] = {}
        self._changed: set[int] = set()
        self._due: list[tuple[int, str]] = []  # expected ids not yet decided, by time
        self._expiry: list[tuple[int, int, str]] = []  # (time, side: 0 expected / 1 actual, id)

    @classmethod
    def restore(cls, periods: Periods, clock: int | None, moved_at: int | None, chunks: Iterable[Chunk]) -> Bucket:
        """A bucket from its stored chunks (as :meth:`take_changed` gave them)."""
        bucket = cls(periods, clock, moved_at)
        # A chunk stored before pairs were settled in columns is just (expected, actual).
        for expected, actual, *settled in chunks:
            for id_, entry in expected.items():
                bucket._file(0, id_, entry)
            for id_, actual_entry in actual.items():
                bucket._file(1, id_, actual_entry)
            for side, records in enumerate(settled):
                if records is not None:
                    bucket._settled[side][records.column(1)[0].as_py() // CHUNK_MS] = records
        bucket._changed.clear()
        return bucket

    @property
    def watermark(self) -> int | None:
        return None if self.clock is None else self.clock - self.periods.n

    @property
    def size(self) -> int:
        """Ids held, per side (a settled pair counts two)."""
        return len(self.expected) + len(self.actual) + sum(
            records.num_rows for held in self._settled for records in held.values())

    @property
    def wake_at(self) -> int | None:
        """When (processing time) the clock counts as stalled, if anything waits on it."""
        if self.moved_at is None or not (self.expected or self._settled[0]):
            return None
        return self.moved_at + self.periods.z

    def take_changed(self) -> dict[int, Chunk | None]:
        """The chunks changed since the last call, by chunk number; None for one now empty."""
        out: dict[int, Chunk | None] = {}
        for number in self._changed:
            expected, actual = self._chunks.get(number) or ({}, {})
            settled = (self._settled[0].get(number), self._settled[1].get(number))
            if expected or actual or settled != (None, None):
                out[number] = (expected, actual, *settled)
            else:
                out[number] = None
                self._chunks.pop(number, None)
        self._changed.clear()
        return out

    def process(self, records: Iterable[Record], now: int) -> Step:
        ordered = sorted(records, key=lambda r: (r.time, SIDE_ORDER[r.side], r.id))
        return self.process_sorted([r.side for r in ordered], [r.id for r in ordered],
                                   [r.source for r in ordered], [r.time for r in ordered], now)

    def process_sorted(self, sides: Sequence[str], ids: Sequence[str], sources: Sequence[str],
                       times: Sequence[int], now: int) -> Step:
        """:meth:`process` on columns already in (time, side, id) order (expected, actual, heartbeat)."""
        step = Step()
        before = self.watermark
        m, o = self.periods.m, self.periods.o
        newest = self.clock
        if len(times):
            newest = int(times[-1]) if newest is None else max(newest, int(times[-1]))
        if self.settle and len(times):
            sides, ids, sources, times = self._settle(np.asarray(sides, dtype=object), np.asarray(ids, dtype=object),
                                                      np.asarray(sources, dtype=object),
                                                      np.asarray(times, dtype=np.int64), before, step)
        for side, id_, source, time_ in zip(sides, ids, sources, times, strict=True):
            if side == "heartbeat":
                continue
            window = (source, time_ // o * o)
            if before is not None and time_ + m <= before:
                step.counts[window].too_late += 1
                continue
            if before is not None and time_ < before:
                step.counts[window].late += 1
            if side == "expected":
                self._expected(id_, source, time_, step, window)
            else:
                self._actual(id_, source, time_, step, window)
        self._advance(newest, now)
        step.watermark = self.watermark
        self._decide(step)
        return step

    def count_unreadable(self, sources: Sequence[str], times: Sequence[int], step: Step) -> None:
        """Counts records of the reconciliation's topics that it could not read (not an event,
        or no id or time where a side reads them) in the window of ``times``; they move nothing else."""
        windows = np.asarray(times, dtype=np.int64) // self.periods.o * self.periods.o
        for key, count in _tally(np.asarray(sources, dtype=object), windows):
            step.counts[key].unreadable += count

    def _settle(self, sides: np.ndarray, ids: np.ndarray, sources: np.ndarray, times: np.ndarray,
                before: int | None, step: Step) -> tuple[list, list, list, list]:
        """Settles the micro-batch's pairs column-wise; returns the other records, in order, as lists.

        A pair settles when its id has exactly one expected and one actual record in the
        batch, neither too late, at most ``m`` apart, and nothing of the id is held; or when
        one side of the id is held, unmatched (an expected not yet reported missing), and
        the batch has exactly the other side's one record, not too late, at most ``m`` from
        it. The per-record rules would file the new records, count a new expected, match
        the two and count each new record late that is behind ``before`` — which is what
        is added here, per window.
        """
        m, o = self.periods.m, self.periods.o
        real = sides != "heartbeat"
        codes = np.full(len(ids), -1, dtype=np.int64)
        codes[real], uniques = pd.factorize(ids[real])
        if not len(uniques):
            return sides.tolist(), ids.tolist(), sources.tolist(), times.tolist()
        unique_ids = pa.array(uniques, type=pa.string())
        self._unsettle(unique_ids)
        is_exp, is_act = sides == "expected", sides == "actual"
        k = len(uniques)
        n_exp, n_act = np.bincount(codes[is_exp], minlength=k), np.bincount(codes[is_act], minlength=k)
        t_exp, t_act = np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64)
        t_exp[codes[is_exp]] = times[is_exp]
        t_act[codes[is_act]] = times[is_act]
        one_exp, one_act = n_exp == 1, n_act == 1
        if before is not None:
            one_exp &= t_exp + m > before
            one_act &= t_act + m > before
        held = np.zeros(k, dtype=bool)
        if self.expected or self.actual:
            held = pc.is_in(unique_ids, value_set=pa.array([*self.expected, *self.actual], type=pa.string())
                            ).to_numpy(zero_copy_only=False)
        pair = ~held & one_exp & one_act & (np.abs(t_exp - t_act) <= m)
        moved: tuple[list, list] = ([], [])  # held entries that settle now: (id, entry) per side
        for code in np.flatnonzero(held & (n_exp + n_act == 1) & (one_exp | one_act)):
            id_ = uniques[code]
            side = 0 if one_act[code] else 1  # the held side: the batch brings the other one
            entry = self._held_partner(side, id_, (t_act if side == 0 else t_exp)[code])
            if entry is not None:
                moved[side].append((id_, entry))
                pair[code] = True
        settled = np.zeros(len(ids), dtype=bool)
        settled[real] = pair[codes[real]]
        if not settled.any():
            return sides.tolist(), ids.tolist(), sources.tolist(), times.tolist()

        windows = times // o * o
        on_exp = settled & is_exp
        for key, count in _tally(sources[on_exp], windows[on_exp]):
            counts = step.counts[key]
            counts.expected += count
            counts.matched += count
        for _, entry in moved[0]:  # counted as expected when it came
            step.counts[(entry[1], window_start(entry[0], o))].matched += 1
        if before is not None:
            late = settled & (times < before)
            for key, count in _tally(sources[late], windows[late]):
                step.counts[key].late += count
        for side, on_side in enumerate((on_exp, settled & is_act)):
            self._file_settled(side, ids[on_side], times[on_side], sources[on_side])
            if moved[side]:
                for id_, _ in moved[side]:
                    self._unfile(side, id_)
                self._file_settled(side, np.array([id_ for id_, _ in moved[side]], dtype=object),
                                   np.array([entry[0] for _, entry in moved[side]], dtype=np.int64),
                                   np.array([entry[1] for _, entry in moved[side]], dtype=object))
        rest = ~settled
        return sides[rest].tolist(), ids[rest].tolist(), sources[rest].tolist(), times[rest].tolist()

    def _held_partner(self, side: int, id_: str, time_: np.int64) -> list | None:
        """``id_``'s held entry on ``side`` (0 expected, 1 actual) if a record of the other side
        at ``time_`` settles with it: unmatched, nothing of the id held on the other side, and
        at most ``m`` apart; else None."""
        if side == 0:
            entry = self.expected.get(id_)
            open_ = entry is not None and entry[2] == PENDING and id_ not in self.actual
        else:
            entry = self.actual.get(id_)
            open_ = entry is not None and not entry[2] and id_ not in self.expected
        return entry if open_ and abs(entry[0] - time_) <= self.periods.m else None

    def _file_settled(self, side: int, ids: np.ndarray, times: np.ndarray, sources: np.ndarray) -> None:
        """Appends settled records to their chunks' columns."""
        if not len(ids):
            return
        order = np.argsort(times, kind="stable")
        ids, times, sources = ids[order], times[order], sources[order]
        numbers = times // CHUNK_MS
        starts = np.flatnonzero(np.r_[True, numbers[1:] != numbers[:-1]])
        held = self._settled[side]
        for start, end in zip(starts, [*starts[1:], len(numbers)], strict=True):
            number = int(numbers[start])
            records = pa.RecordBatch.from_arrays(
                [pa.array(ids[start:end], type=pa.string()), pa.array(times[start:end]),
                 pa.array(sources[start:end], type=pa.string())], schema=SETTLED_SCHEMA)
            old = held.get(number)
            held[number] = records if old is None else pa.concat_batches([old, records])
            self._changed.add(number)

    def _unsettle(self, ids: pa.Array) -> None:
        """Moves the settled records of ``ids`` into the per-id entries, for the rules to judge their id's new records."""
        for side, held in enumerate(self._settled):
            if not held:
                continue
            numbers = list(held)
            # One look-up over the side's chunks (not copied together); the answer is sliced back by chunk.
            hit = pc.is_in(pa.chunked_array([held[number]["id"] for number in numbers], type=pa.string()),
                           value_set=ids).to_numpy()
            if not hit.any():
                continue
            offset = 0
            for number in numbers:
                records = held[number]
                mine = hit[offset:offset + records.num_rows]
                offset += records.num_rows
                if not mine.any():
                    continue
                status = MATCHED if side == 0 else True
                for row in records.filter(pa.array(mine)).to_pylist():
                    self._file(side, row["id"], [row["time"], row["source"], status])
                self._keep_settled(side, number, ~mine)

    def _unfile(self, side: int, id_: str) -> None:
        """Drops an id's per-id entry of one side (its heap items go stale and are skipped)."""
        entry = (self.expected if side == 0 else self.actual).pop(id_)
        number = entry[0] // CHUNK_MS
        del self._chunks[number][side][id_]
        self._changed.add(number)

    def _keep_settled(self, side: int, number: int, keep: np.ndarray) -> None:
        held = self._settled[side]
        if keep.any():
            held[number] = held[number].filter(pa.array(keep))
        else:
            del held[number]
        self._changed.add(number)

    def _file(self, side: int, id_: str, entry: list) -> None:
        time_ = entry[0]
        (self.expected if side == 0 else self.actual)[id_] = entry
        number = time_ // CHUNK_MS
        chunk = self._chunks.get(number)
        if chunk is None:
            chunk = self._chunks[number] = ({}, {})
        chunk[side][id_] = entry
        self._changed.add(number)
        if side == 0 and entry[2] == PENDING:
            heapq.heappush(self._due, (time_, id_))
        heapq.heappush(self._expiry, (time_, side, id_))

    def _expected(self, id_: str, source: str, time_: int, step: Step, window: tuple[str, int]) -> None:
        if id_ in self.expected:
            step.counts[window].duplicates += 1
            return
        entry = [time_, source, PENDING]
        self._file(0, id_, entry)
        step.counts[window].expected += 1
        actual = self.actual.get(id_)
        if actual is not None and not actual[2] and abs(actual[0] - time_) <= self.periods.m:
            self._match(id_, entry, actual, step)

    def _actual(self, id_: str, source: str, time_: int, step: Step, window: tuple[str, int]) -> None:
        if id_ in self.actual:
            step.counts[window].duplicates += 1
            return
        actual = [time_, source, False]
        self._file(1, id_, actual)
        entry = self.expected.get(id_)
        if entry is not None and entry[2] != MATCHED and abs(entry[0] - time_) <= self.periods.m:
            self._match(id_, entry, actual, step)

    def _match(self, id_: str, entry: list, actual: list, step: Step) -> None:
        counts = step.counts[(entry[1], window_start(entry[0], self.periods.o))]
        counts.matched += 1
        if entry[2] == MISSING:
            counts.missing -= 1
            counts.found += 1
            step.emitted.append(Emitted("found", id_, entry[1], entry[0], actual[0], self.watermark or 0))
        entry[2] = MATCHED
        actual[2] = True
        self._changed.add(entry[0] // CHUNK_MS)
        self._changed.add(actual[0] // CHUNK_MS)

    def _advance(self, newest: int | None, now: int) -> None:
        if newest is not None and (self.clock is None or newest > self.clock):
            self.clock, self.moved_at = newest, now
        elif self.clock is not None and self.moved_at is not None and now - self.moved_at >= self.periods.z:
            # Stalled: event time is taken to have passed as processing time did.
            self.clock += now - self.moved_at
            self.moved_at = now

    def _decide(self, step: Step) -> None:
        mark = self.watermark
        if mark is None:
            return
        n, m, o = self.periods.n, self.periods.m, self.periods.o
        due, expiry = self._due, self._expiry
        while due and due[0][0] + n <= mark:
            time_, id_ = heapq.heappop(due)
            entry = self.expected.get(id_)
            # The heap may hold an id since dropped, or decided (matched) since.
            if entry is not None and entry[0] == time_ and entry[2] == PENDING:
                entry[2] = MISSING
                step.counts[(entry[1], time_ // o * o)].missing += 1
                step.emitted.append(Emitted("missing", id_, entry[1], time_, None, mark))
                self._changed.add(time_ // CHUNK_MS)
        while expiry and expiry[0][0] + m <= mark:
            time_, side, id_ = heapq.heappop(expiry)
            held = self.expected if side == 0 else self.actual
            entry = held.get(id_)
            if entry is not None and entry[0] == time_:
                del held[id_]
                number = time_ // CHUNK_MS
                del self._chunks[number][side][id_]
                self._changed.add(number)
        for side, settled in enumerate(self._settled):
            for number in [number for number in settled if number * CHUNK_MS + m <= mark]:
                keep = settled[number].column(1).to_numpy() + m > mark
                if not keep.all():
                    self._keep_settled(side, number, keep)


def _tally(sources: np.ndarray, windows: np.ndarray) -> Iterable[tuple[tuple[str, int], int]]:
    """How many records fall in each (source, window)."""
    if not len(sources):
        return []
    tallied = pd.DataFrame({"source": sources, "window": windows}).value_counts(sort=False)
    return [((source, int(window)), int(count)) for (source, window), count in tallied.items()]


__all__ = ["Bucket", "CHUNK_MS", "Chunk", "MATCHED", "MISSING", "PENDING", "Record", "SETTLED_SCHEMA", "SIDE_ORDER",
           "Step", "UNREADABLE"]
