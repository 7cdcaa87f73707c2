"""The streaming matcher: one partition's rows in, in micro-batches; MATCH_RECOGNIZE matches out.

Semantics are the SQL standard's (as in Oracle, Trino, Snowflake) for ONE ROW PER MATCH:
candidate start rows are tried in order; from a start row the *preferred* match is taken
(left alternatives first, greedy quantifiers taking as many rows as still let the rest of
the pattern match, reluctant ones as few); after a match, AFTER MATCH SKIP says where the
next search starts, and after a start row without a match the search moves to the next row.
MEASURES are evaluated once on the finished match (FINAL). Patterns that can match zero
rows are rejected when the rule is parsed, so there are no empty matches.

How a search runs. The search from the current start row is a priority-ordered NFA
simulation (a Pike VM): each *thread* is one way of mapping the rows seen so far, kept in
preference order, carrying its automaton state, its DEFINE context (see
``wayline.rules.expression``) and its labels. On each row every thread tests its next
variable; survivors branch into their successor states in order. A thread that can end the
match records it as the candidate and discards every less preferred thread; more preferred
threads keep running, since one of them may still end in a match that wins. Two threads in
the same state with the same context have the same future, so only the more preferred one
is kept — this keeps the work per row bounded by the automaton's size when conditions read
only the current row. The search is *resolved* when no thread is left: the candidate, if
any, is the preferred match. Only then is it emitted — a greedy match that could still grow
waits for the row that ends it, for WITHIN to close it, or for ``finish``.

Searches from later start rows run only once the earlier one is resolved, replaying the
rows kept since; so the matcher holds the rows from the current start row on (plus the few
rows PREV may look back at), one search's threads, and nothing else.

Time. Row order is the ORDER BY column, a ``datetime``. WITHIN bounds a match as Flink's
does: every row of the match lies in ``[first row's time, first row's time + WITHIN)``.
The watermark says no row older than it will come: with ``reorder=False`` rows must arrive
in event-time order, and a row older than the latest row or than the watermark is dropped
(and counted); with ``reorder=True`` rows may arrive in any order and wait until the
watermark passes them, then enter the automaton in time order (ties in the order of
ORDER BY's further columns, then in arrival order). A rule with such columns is always
matched with ``reorder``: rows of one time cannot be put in order as they arrive. Both
let the watermark close a search whose WITHIN window has ended, so its match is emitted
without waiting for the partition's next row.

Where the answers differ from Flink's (details in ``docs/rules-semantics.md``): Flink's
greedy quantifiers never give a row back, so where neighbouring variables' conditions
overlap it misses matches the standard finds. Over the rows (price 15, up), (16, down),
(11, flat), ``PATTERN (A+ B C)`` with ``A AS A.price > 12, B AS B.kind = 'down',
C AS C.kind = 'flat'`` finds nothing in Flink 2.3 and A=[15], B=[16], C=[11] here. Wayline
also runs patterns Flink refuses (a greedy quantifier at the end, ``A??``, alternation,
quantified groups) and refuses when a rule is submitted what the standard would fail on at
run time (see ``wayline.rules.recognize``).

State. ``snapshot()`` returns plain lists, dicts and numbers (plus the rows themselves,
as given) for a stateful operator to store; ``PartitionMatcher(spec, state=...)`` resumes
from it. ``size`` measures it, for state budgets.

MATCH_NUMBER(). A partition's matches are numbered 1, 2, 3, ... in the order they are
found, for as long as the matcher lives, as the standard says. A caller that cannot keep an
idle partition's count for ever gives a ``count_lapse``: a match that starts that long or
longer after the end of the partition's previous match (event times) is numbered 1 again.
That depends on event times only, never on when the watermark moved or how the rows were
cut into micro-batches; a matcher that holds nothing but its count (``size`` 0) asks to be
woken when the count lapses (``wake_at``), and may be dropped once the watermark is there.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from wayline.core.errors import GiveUp
from wayline.rules.automaton import MATCH
from wayline.rules.expression import Context, DefineFrame, MatchView, Row
from wayline.rules.recognize import PatternSpec, SkipTo

# A search whose threads outnumber this is thrashing on ambiguous, match-dependent
# conditions (each thread is a distinct way to map the rows); stopping is kinder than
# running out of memory.
DEFAULT_MAX_THREADS = 10_000

# Dropping consumed rows from the front of the buffer costs a copy; do it in large steps.
_TRIM_STEP = 4096

_STATE_FORMAT = 1
_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)

# A thread's labels: (variable, earlier labels) links, newest first, shared between threads.
Labels = tuple[int, Any] | None


@dataclass(frozen=True, slots=True)
class Match:
    """One match: ``start`` and ``end`` are row numbers in the partition's event-time order.

    ``labels`` names the variable of each row; ``measures`` follow the MEASURES clause.
    """

    number: int
    start: int
    labels: tuple[str, ...]
    measures: Mapping[str, Any]
    # The match's first and last rows: the buffer may drop them as soon as the match settles.
    first: Row = field(default_factory=dict, compare=False, repr=False)
    last: Row = field(default_factory=dict, compare=False, repr=False)

    @property
    def end(self) -> int:
        return self.start + len(self.labels) - 1


@dataclass(frozen=True, slots=True)
class MatcherSize:
    """Rows kept for live searches, rows waiting for the watermark, live threads, labels they carry."""

    rows: int
    pending: int
    threads: int
    labels: int

    @property
    def total(self) -> int:
        return self.rows + self.pending + self.threads + self.labels


class PartitionMatcher:
    """Runs one pattern over one partition's rows (mappings from column name to value).

    After a ``GiveUp`` (a rule that cannot run on this data) the matcher is left mid-batch
    and must be discarded with its rule's state.
    """

    def __init__(
        self, spec: PatternSpec, state: Mapping[str, Any] | None = None, *,
        reorder: bool = False, max_threads: int = DEFAULT_MAX_THREADS, count_lapse: timedelta | None = None,
    ) -> None:
        self._spec = spec
        self._reorder = reorder or bool(spec.then_by)
        self._then_by = [(path[0], path[1:], nulls_first) for path, nulls_first in spec.then_by]
        self._max_threads = max_threads
        program = _program(spec)
        self._variables = spec.automaton.variables
        self._states = program.states
        self._fresh = program.fresh
        self._has_context = program.has_context
        self._within = program.within
        self._count_lapse_micros = count_lapse // _MICROSECOND if count_lapse is not None else None
        self._lookback = program.lookback
        self._time_column, self._time_path = program.time_column, program.time_path
        self._frame = DefineFrame()
        self._load(state or {})

    # -- public API ---------------------------------------------------------------------

    def feed(self, rows: Iterable[Row], watermark: datetime | None = None) -> list[Match]:
        """Take a micro-batch of rows (and optionally the new watermark); return settled matches."""
        for row in rows:
            time = self._time_of(row)
            if time is None or (self._watermark is not None and time < self._watermark):
                self._dropped += 1
            elif self._reorder:
                heapq.heappush(self._pending, (time, self._tie(row), row))
                self._arrivals += 1
            elif self._latest is not None and time < self._latest:
                self._dropped += 1
            else:
                self._rows.append(row)
                self._times.append(time)
                self._latest = time
        if watermark is not None:
            self._move_watermark(watermark)
        return self._settle(closing=False)

    def advance_watermark(self, watermark: datetime) -> list[Match]:
        """No row older than ``watermark`` will come; return the matches that settles."""
        self._move_watermark(watermark)
        return self._settle(closing=False)

    def finish(self) -> list[Match]:
        """The input has ended: settle every search with the rows there are."""
        while self._pending:
            self._append_pending()
        return self._settle(closing=True)

    @property
    def dropped(self) -> int:
        """Rows dropped as late (older than the watermark or, in order, than the latest row) or untimed."""
        return self._dropped

    @property
    def size(self) -> MatcherSize:
        """What the state holds, for state budgets."""
        labels = len(self._threads) * (self._pos - self._start) if self._start >= 0 else 0
        return MatcherSize(len(self._rows), len(self._pending), len(self._threads), labels)

    @property
    def wake_at(self) -> int | None:
        """The earliest watermark (epoch µs) that would settle something: a waiting row
        becomes usable, or the current search's WITHIN window ends. None: only rows can."""
        candidates = [self._pending[0][0] + 1] if self._pending else []
        if self._start >= 0 and self._within is not None:
            candidates.append(self._times[self._start - self._base] + self._within)
        lapse = self._count_lapse
        if lapse is not None and (self._watermark is None or self._watermark < lapse):
            candidates.append(lapse)
        return min(candidates) if candidates else None

    @property
    def _count_lapse(self) -> int | None:
        """When (epoch µs) the count of matches lapses, if it is kept and there is one."""
        if self._count_lapse_micros is None or self._last_match is None:
            return None
        return self._last_match + self._count_lapse_micros

    def snapshot(self) -> dict[str, Any]:
        """The state as plain data; ``PartitionMatcher(spec, state=...)`` resumes from it."""
        search = None
        if self._start >= 0:
            search = {
                "start": self._start,
                "position": self._pos,
                "threads": [[state, list(context), _unwind(labels)]
                            for state, context, labels in self._threads],
                "candidate": None if self._candidate is None
                else [self._candidate[0], _unwind(self._candidate[1])],
            }
        return {
            "format": _STATE_FORMAT,
            "base": self._base,
            "rows": list(self._rows),
            "times": list(self._times),
            "pending": [list(entry) for entry in self._pending],
            "arrivals": self._arrivals,
            "watermark": self._watermark,
            "latest": self._latest,
            "next": self._next,
            "search": search,
            "matches": self._number,
            "last_match": self._last_match,
            "dropped": self._dropped,
        }

    @staticmethod
    def waiting_state(waiting: Iterable[tuple[int, int, Row]], watermark: int | None, arrivals: int) -> dict[str, Any]:
        """The state of a matcher that has only rows waiting for the watermark: ``(time µs,
        arrival, row)`` in time and arrival order, after ``arrivals`` rows fed and ``watermark``
        (µs) seen. Lets a caller that knows no search can start keep rows without a matcher."""
        return {
            "format": _STATE_FORMAT, "base": 0, "rows": [], "times": [],
            "pending": [list(entry) for entry in waiting], "arrivals": arrivals, "watermark": watermark,
            "latest": None, "next": 0, "search": None, "matches": 0, "last_match": None, "dropped": 0,
        }

    # -- state ----------------------------------------------------------------------------

    def _load(self, state: Mapping[str, Any]) -> None:
        if state and state.get("format") != _STATE_FORMAT:
            raise GiveUp(f"matcher state format {state.get('format')!r} is not {_STATE_FORMAT}")
        self._base: int = state.get("base", 0)
        self._rows: list[Row] = list(state.get("rows", ()))
        self._times: list[int] = list(state.get("times", ()))
        self._pending: list[tuple[int, Any, Row]] = [
            (time, tuple(tie) if isinstance(tie, list) else tie, row) for time, tie, row in state.get("pending", ())]
        self._arrivals: int = state.get("arrivals", 0)
        self._watermark: int | None = state.get("watermark")
        self._latest: int | None = state.get("latest")
        self._next: int = state.get("next", 0)
        self._number: int = state.get("matches", 0)
        # The event time (µs) of the last row of the latest match.
        self._last_match: int | None = state.get("last_match")
        self._dropped: int = state.get("dropped", 0)
        search = state.get("search")
        self._start = -1
        self._pos = 0
        self._threads: list[tuple[int, Context, Labels]] = []
        self._candidate: tuple[int, Labels] | None = None
        if search:
            thaw = self._spec.conditions.thaw
            self._start = search["start"]
            self._pos = search["position"]
            self._threads = [(state_, thaw(context), _wind(labels)) for state_, context, labels in search["threads"]]
            if search["candidate"] is not None:
                self._candidate = (search["candidate"][0], _wind(search["candidate"][1]))

    def _time_value(self, row: Row) -> Any:
        value = row.get(self._time_column)
        for key in self._time_path:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    def _time_of(self, row: Row) -> int | None:
        value = self._time_value(row)
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise GiveUp(f"ORDER BY {'.'.join(self._spec.order_by)} must be a timestamp, not {value!r}")
        epoch = _EPOCH if value.tzinfo is None else _EPOCH_UTC
        return (value - epoch) // _MICROSECOND

    def _tie(self, row: Row) -> Any:
        """What orders a waiting row among those of its time: its arrival, after ORDER BY's
        further columns if there are any (as one flat tuple, which survives a round trip
        through plain data as a list)."""
        if not self._then_by:
            return self._arrivals
        tie: list[Any] = []
        for column, path, nulls_first in self._then_by:
            value = row.get(column)
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            tie.extend(_sort_key(value, nulls_first, column, path))
        tie.append(self._arrivals)
        return tuple(tie)

    def _move_watermark(self, watermark: datetime) -> None:
        micros = (watermark - (_EPOCH if watermark.tzinfo is None else _EPOCH_UTC)) // _MICROSECOND
        if self._watermark is None or micros > self._watermark:
            self._watermark = micros
        while self._pending and self._pending[0][0] < self._watermark:
            self._append_pending()

    def _append_pending(self) -> None:
        time, _, row = heapq.heappop(self._pending)
        self._rows.append(row)
        self._times.append(time)

    # -- matching -------------------------------------------------------------------------

    def _settle(self, closing: bool) -> list[Match]:
        out: list[Match] = []
        while True:
            if self._start < 0:
                if self._next >= self._base + len(self._rows):
                    break
                self._start = self._pos = self._next
                self._threads = self._fresh
                self._candidate = None
            self._consume()
            if self._threads and (closing or self._window_closed()):
                self._threads = []
            if self._threads:
                break
            self._resolve(out)
        self._trim(0)
        return out

    def _window_closed(self) -> bool:
        return (self._within is not None and self._watermark is not None
                and self._watermark >= self._times[self._start - self._base] + self._within)

    def _consume(self) -> None:
        end = self._base + len(self._rows)
        limit = None
        if self._within is not None:
            limit = self._times[self._start - self._base] + self._within
        times = self._times
        while self._threads and self._pos < end:
            if limit is not None and times[self._pos - self._base] >= limit:
                self._threads = []
                return
            self._threads = self._step(self._pos)
            self._pos += 1

    def _step(self, number: int) -> list[tuple[int, Context, Labels]]:
        """Advance every thread over row ``number``, in preference order."""
        rows = self._rows
        index = number - self._base
        row = rows[index]
        frame = self._frame
        frame.rows = rows
        frame.base = self._base
        frame.index = index
        states = self._states
        has_context = self._has_context
        verdicts: list[bool | None] = [None] * len(self._variables)
        survivors: list[tuple[int, Context, Labels]] = []
        seen: set[Any] = set()
        for state, context, labels in self._threads:
            variable, test, update, cacheable, follow = states[state]
            if update is not None:
                context = update(context, number, row)
            if test is not None:
                if cacheable:
                    verdict = verdicts[variable]
                    if verdict is None:
                        frame.context = context
                        verdict = verdicts[variable] = test(frame) is True
                    if not verdict:
                        continue
                else:
                    frame.context = context
                    if test(frame) is not True:
                        continue
            labels = (variable, labels)
            ended = False
            for successor in follow:
                if successor == MATCH:
                    ended = True
                    break
                key = (successor, context) if has_context else successor
                if key not in seen:
                    seen.add(key)
                    survivors.append((successor, context, labels))
            if ended:
                # Every thread after this one, and every branch after MATCH, is less preferred.
                self._candidate = (number, labels)
                break
        if len(survivors) > self._max_threads:
            raise GiveUp(
                f"the pattern keeps more than {self._max_threads} ways of matching the rows from "
                f"row {self._start} on; its conditions are too ambiguous for its WITHIN window"
            )
        return survivors

    def _resolve(self, out: list[Match]) -> None:
        start = self._start
        if self._candidate is None:
            self._next = start + 1
        else:
            end, linked = self._candidate
            labels = _unwind(linked)
            lapse = self._count_lapse
            if lapse is not None and self._times[start - self._base] >= lapse:
                self._number = 0
            self._number += 1
            end_time = self._times[end - self._base]
            self._last_match = end_time if self._last_match is None else max(self._last_match, end_time)
            view = MatchView(self._rows, self._base, start, labels, self._number, self._variables,
                             self._time_value(self._rows[end - self._base]))
            out.append(Match(
                number=self._number,
                start=start,
                labels=tuple(self._variables[label] for label in labels),
                measures={measure.name: measure.evaluate(view) for measure in self._spec.measures},
                first=self._rows[start - self._base],
                last=self._rows[end - self._base],
            ))
            self._next = self._skip(start, end, labels)
        self._start = -1
        self._threads = []
        self._candidate = None
        self._trim(_TRIM_STEP)

    def _skip(self, start: int, end: int, labels: list[int]) -> int:
        skip = self._spec.skip
        if skip.to == SkipTo.PAST_LAST_ROW:
            return end + 1
        if skip.to == SkipTo.NEXT_ROW:
            return start + 1
        # The rule was rejected unless the variable is always in the match and past its first row.
        variable = self._variables.index(skip.variable)  # type: ignore[arg-type]
        if skip.to == SkipTo.FIRST:
            return start + labels.index(variable)
        return end - labels[::-1].index(variable)

    def _trim(self, slack: int) -> None:
        """Forget rows no search can reach, once more than ``slack`` of them have piled up."""
        keep_from = (self._start if self._start >= 0 else self._next) - self._lookback
        drop = keep_from - self._base
        if drop > slack:
            del self._rows[:drop]
            del self._times[:drop]
            self._base = keep_from


class _Program:
    """What every matcher of one pattern shares, built once per spec, not once per partition."""

    def __init__(self, spec: PatternSpec) -> None:
        conditions = spec.conditions
        automaton = spec.automaton
        self.states = tuple(
            (variable, conditions.tests[variable], conditions.updates[variable],
             conditions.cacheable[variable], automaton.follow[state])
            for state, variable in enumerate(automaton.variable_of)
        )
        self.fresh: list[tuple[int, Context, Labels]] = [
            (state, conditions.initial, None) for state in automaton.start
        ]
        self.has_context = bool(conditions.initial)
        self.within = spec.within // _MICROSECOND if spec.within else None
        self.lookback = spec.lookback
        self.time_column, *self.time_path = spec.order_by


# id(spec) -> (spec, program); the spec is kept so that its id cannot be reused.
_PROGRAMS: dict[int, tuple[PatternSpec, _Program]] = {}


def _program(spec: PatternSpec) -> _Program:
    entry = _PROGRAMS.get(id(spec))
    if entry is None or entry[0] is not spec:
        entry = _PROGRAMS[id(spec)] = (spec, _Program(spec))
    return entry[1]


def _sort_key(value: Any, nulls_first: bool, column: str, path: list[str]) -> tuple[int, Any]:
    """(rank, value): values of one kind in their order, the kinds apart (NULLs first or last)."""
    if value is None:
        return (0 if nulls_first else 5), 0
    if isinstance(value, bool):
        return 1, int(value)
    if isinstance(value, (int, float)):
        return 2, value
    if isinstance(value, str):
        return 3, value
    if isinstance(value, datetime):
        return 4, (value - (_EPOCH if value.tzinfo is None else _EPOCH_UTC)) // _MICROSECOND
    raise GiveUp(f"ORDER BY {'.'.join([column, *path])}: cannot order by {value!r}")


def _unwind(labels: Labels) -> list[int]:
    out = []
    while labels is not None:
        out.append(labels[0])
        labels = labels[1]
    out.reverse()
    return out


def _wind(labels: Iterable[int]) -> Labels:
    linked: Labels = None
    for label in labels:
        linked = (label, linked)
    return linked


__all__ = ["DEFAULT_MAX_THREADS", "Match", "MatcherSize", "PartitionMatcher"]
