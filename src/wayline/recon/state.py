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

Figures are kept per (source, window of ``o``): expected, matched, missing (reported
and not found since), found, duplicates, late and too-late records. An expected id's
figures go to its own source and window; an actual's duplicates and late records to the
actual's source and window. ``process`` returns the changes, which the job adds up.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Literal

from wayline.recon.periods import Periods, window_start

Side = Literal["expected", "actual", "heartbeat"]
SIDE_ORDER = {"expected": 0, "actual": 1, "heartbeat": 2}
PENDING, MATCHED, MISSING = 0, 1, 2


@dataclass(frozen=True)
class Record:
    side: Side
    id: str
    source: str
    time: int  # event time, ms since the epoch


@dataclass
class Counts:
    expected: int = 0
    matched: int = 0
    missing: int = 0
    found: int = 0
    duplicates: int = 0
    late: int = 0
    too_late: int = 0

    def add(self, other: Counts) -> None:
        for name in COUNT_NAMES:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def __bool__(self) -> bool:
        return any(getattr(self, name) for name in COUNT_NAMES)


COUNT_NAMES = tuple(f.name for f in fields(Counts))


@dataclass(frozen=True)
class Emitted:
    kind: Literal["missing", "found"]
    id: str
    source: str
    expected_time: int
    actual_time: int | None
    watermark: int


@dataclass
class Step:
    """What one call changed: events to emit, figure changes per (source, window), the watermark."""

    emitted: list[Emitted] = field(default_factory=list)
    counts: dict[tuple[str, int], Counts] = field(default_factory=lambda: defaultdict(Counts))
    watermark: int | None = None


# Event time per chunk of stored state: a micro-batch rewrites only the chunks it changed.
CHUNK_MS = 60_000
Chunk = tuple[dict[str, list], dict[str, list]]  # (expected ids, actual ids) with times in one chunk


class Bucket:
    """Per-id state of one bucket: expected ids ``[time, source, status]``, actual ids ``[time, source, matched]``.

    Deadlines are heaps of ``(time, id)``, so a micro-batch visits only the ids whose
    ``n`` or ``m`` has come, not every id held. The ids are also filed by chunk of event
    time (:data:`CHUNK_MS`), and the chunks a call changed are remembered
    (:meth:`take_changed`), so the job stores only those.
    """

    def __init__(self, periods: Periods, clock: int | None = None, moved_at: int | None = None) -> None:
        self.periods = periods
        self.clock = clock  # the newest event time seen
        self.moved_at = moved_at  # processing time the clock last moved
        self.expected: dict[str, list] = {}
        self.actual: dict[str, list] = {}
        self._chunks: dict[int, Chunk] = {}
        self._changed: set[int] = set()
        self._due: list[tuple[int, str]] = []  # expected ids not yet decided, by time
        self._expiry: list[tuple[int, int, str]] = []  # (time, side: 0 expected / 1 actual, id)

    @classmethod
    def restore(cls, periods: Periods, clock: int | None, moved_at: int | None, chunks: Iterable[Chunk]) -> Bucket:
        """A bucket from its stored chunks (as :meth:`take_changed` gave them)."""
        bucket = cls(periods, clock, moved_at)
        for expected, actual in chunks:
            for id_, entry in expected.items():
                bucket._file(0, id_, entry)
            for id_, actual_entry in actual.items():
                bucket._file(1, id_, actual_entry)
        bucket._changed.clear()
        return bucket

    @property
    def watermark(self) -> int | None:
        return None if self.clock is None else self.clock - self.periods.n

    @property
    def size(self) -> int:
        return len(self.expected) + len(self.actual)

    @property
    def wake_at(self) -> int | None:
        """When (processing time) the clock counts as stalled, if anything waits on it."""
        if self.moved_at is None or not self.expected:
            return None
        return self.moved_at + self.periods.z

    def take_changed(self) -> dict[int, Chunk | None]:
        """The chunks changed since the last call, by chunk number; None for one now empty."""
        out: dict[int, Chunk | None] = {}
        for number in self._changed:
            chunk = self._chunks.get(number)
            out[number] = chunk if chunk is not None and (chunk[0] or chunk[1]) else None
            if out[number] is None:
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
        if times:
            newest = times[-1] if newest is None else max(newest, times[-1])
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


__all__ = ["Bucket", "CHUNK_MS", "COUNT_NAMES", "Chunk", "Counts", "Emitted", "MATCHED", "MISSING", "PENDING", "Record", "SIDE_ORDER", "Step"]
