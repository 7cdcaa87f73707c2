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

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Literal

from wayline.recon.periods import Periods, window_start

Side = Literal["expected", "actual", "heartbeat"]
_SIDE_ORDER = {"expected": 0, "actual": 1, "heartbeat": 2}
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


class Bucket:
    """Per-id state of one bucket: expected ids ``[time, source, status]``, actual ids ``[time, source, matched]``."""

    def __init__(self, periods: Periods) -> None:
        self.periods = periods
        self.clock: int | None = None  # the newest event time seen
        self.moved_at: int | None = None  # processing time the clock last moved
        self.expected: dict[str, list] = {}
        self.actual: dict[str, list] = {}

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

    def process(self, records: Iterable[Record], now: int) -> Step:
        step = Step()
        before = self.watermark
        newest = self.clock
        for record in sorted(records, key=lambda r: (r.time, _SIDE_ORDER[r.side], r.id)):
            newest = record.time if newest is None else max(newest, record.time)
            if record.side == "heartbeat":
                continue
            window = (record.source, window_start(record.time, self.periods.o))
            if before is not None and record.time + self.periods.m <= before:
                step.counts[window].too_late += 1
                continue
            if before is not None and record.time < before:
                step.counts[window].late += 1
            if record.side == "expected":
                self._expected(record, step, window)
            else:
                self._actual(record, step, window)
        self._advance(newest, now)
        step.watermark = self.watermark
        self._decide(step)
        return step

    def _expected(self, record: Record, step: Step, window: tuple[str, int]) -> None:
        if record.id in self.expected:
            step.counts[window].duplicates += 1
            return
        entry = self.expected[record.id] = [record.time, record.source, PENDING]
        step.counts[window].expected += 1
        actual = self.actual.get(record.id)
        if actual is not None and not actual[2] and abs(actual[0] - record.time) <= self.periods.m:
            self._match(record.id, entry, actual, step)

    def _actual(self, record: Record, step: Step, window: tuple[str, int]) -> None:
        if record.id in self.actual:
            step.counts[window].duplicates += 1
            return
        actual = self.actual[record.id] = [record.time, record.source, False]
        entry = self.expected.get(record.id)
        if entry is not None and entry[2] != MATCHED and abs(entry[0] - record.time) <= self.periods.m:
            self._match(record.id, entry, actual, step)

    def _match(self, id_: str, entry: list, actual: list, step: Step) -> None:
        counts = step.counts[(entry[1], window_start(entry[0], self.periods.o))]
        counts.matched += 1
        if entry[2] == MISSING:
            counts.missing -= 1
            counts.found += 1
            step.emitted.append(Emitted("found", id_, entry[1], entry[0], actual[0], self.watermark or 0))
        entry[2] = MATCHED
        actual[2] = True

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
        for id_, entry in list(self.expected.items()):
            if entry[2] == PENDING and entry[0] + n <= mark:
                entry[2] = MISSING
                step.counts[(entry[1], window_start(entry[0], o))].missing += 1
                step.emitted.append(Emitted("missing", id_, entry[1], entry[0], None, mark))
            if entry[0] + m <= mark:
                del self.expected[id_]
        for id_, actual in list(self.actual.items()):
            if actual[0] + m <= mark:
                del self.actual[id_]


__all__ = ["Bucket", "COUNT_NAMES", "Counts", "Emitted", "MATCHED", "MISSING", "PENDING", "Record", "Step"]
