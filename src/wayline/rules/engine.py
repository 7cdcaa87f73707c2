"""Stateful rules over one group of the rules job's stateful operator, in plain Python.

The job keys its stateful operator by (partition-key columns, shard): one group holds the
events of many partition keys, for every window and pattern rule that partitions by those
columns. ``GroupEvaluator`` takes one group's rows and watermark and returns what the
rules emit, which rules failed, and per-rule metrics; its state (``snapshot()``, a
``GroupState``) is, per rule, numpy columns over the partition keys (``RuleState``: wake
times, sizes, where each key's own state is), and the keys' own states in segments, one
pickle per snapshot of those that changed, decoded only when one of their keys is visited.

Isolation: each rule runs inside its own ``try``, and against its own clock. A rule that
raises (``GiveUp``: a division by zero, a type error, too many ways to match) or that uses
more than its time budget in a micro-batch is reported as a ``Failure``; its state in the
group and its output are dropped, and every other rule's output is what it would have been
without it. A rule whose state for one partition key outgrows its ``state_budget`` entries
fails the same way. The job quarantines failed rules in the registry.

State is keyed by ``rule.state_key`` (id and revision): a changed rule starts empty, and
the state of a rule that is no longer active is dropped when its group is next loaded.

An evaluator is meant to live across micro-batches (the job keeps one per group in each
Python worker): its matchers and windows stay built, a partition key is visited only when
it has new rows or when the watermark reaches the time it waits for (``wake``), and
``snapshot()`` re-encodes only the keys that changed. Building each key's matcher from the
stored state on every micro-batch was most of the Python time (docs/benchmarks.md). An
evaluator resumed from a snapshot (a worker without the group's evaluator) loads each
rule's columns and visits, and decodes, exactly the keys a kept one would visit: before,
it built every stored key to learn its wake time.

A rule sees only the rows its ``prefilter`` admits (``wayline.rules.prefilter``; the job
passes them in, worked out on the whole batch at once). A window rule ignores the others.
A pattern cannot quite: a row no variable accepts still ends a search running through its
time, so a key's rows all go to the matcher when the key has a search or rows waiting, or
when one of its new rows is admitted. Only a key with nothing but rows no variable
accepts skips the matcher: the rows still ahead of the watermark are kept as the
matcher's waiting rows, without building it (a *barrier*), and dropped as the watermark
passes them; the rest are forgotten at once (when no PREV reaches before a match).
"""

from __future__ import annotations

import hashlib
import pickle
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import orjson

from wayline.core.errors import WaylineError
from wayline.rules.columns import key_name
from wayline.rules.expression import ColumnPath, Row
from wayline.rules.matcher import PartitionMatcher
from wayline.rules.prefilter import Prefilter
from wayline.rules.rule import CompiledRule, RuleKind
from wayline.rules.session import SessionWindowState
from wayline.rules.sliding import SlidingWindowState
from wayline.rules.window import KeyWindows, WindowKind, WindowSpec, WindowState, micros_of, time_of

OUTPUT_SOURCE_PREFIX = "wayline.rules/"
_WINDOWS: dict[WindowKind, Callable[[WindowSpec, Mapping[str, Any] | None], KeyWindows]] = {
    WindowKind.FIXED: WindowState,
    WindowKind.SLIDING: SlidingWindowState,
    WindowKind.SESSION: SessionWindowState,
}


@dataclass(frozen=True)
class ActiveRule:
    """A deployed rule as the job runs it."""

    id: str
    revision: int
    name: str
    compiled: CompiledRule
    output_topic: str
    output_type: str
    state_budget: int
    time_budget_ms: int

    @property
    def state_key(self) -> str:
        return f"{self.id}@{self.revision}"

    @property
    def key_spec(self) -> str:
        """The partition-key columns as one string: rules with the same spec share a group."""
        return ",".join(key_name(path) for path in self.compiled.partition_key)


@dataclass(frozen=True, slots=True)
class Emitted:
    """One output event of a rule, before it is encoded as a CloudEvent."""

    rule: ActiveRule
    id: str
    subject: str | None
    time: datetime | None
    tenantid: str | None
    data: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Failure:
    rule: ActiveRule
    error: str


@dataclass
class RuleMetrics:
    rows: int = 0
    emitted: int = 0
    micros: int = 0
    state: int = 0
    late: int = 0


@dataclass
class GroupResult:
    emitted: list[Emitted] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    metrics: dict[str, RuleMetrics] = field(default_factory=lambda: defaultdict(RuleMetrics))
    # The earliest event time (epoch µs) at which the watermark would make this group emit.
    wake_at: int | None = None


class BudgetExceeded(WaylineError):
    """A rule used more time or state than its budget allows."""


# A key's wake time when only rows can wake it.
_NEVER = np.iinfo(np.int64).max
# The columns of a rule's keys besides the keys themselves, with their empty values.
_COLUMNS = {"wake": _NEVER, "sizes": 0, "barrier": False, "last": 0, "segment": -1, "index": -1}
_TYPES = {"barrier": np.bool_}


@dataclass
class RuleState:
    """One rule's state in a group as stored: columns over its partition keys.

    ``wake``: epoch µs at which the watermark wakes the key (``_NEVER``: only rows can);
    ``sizes``: entries held (state budgets, metrics); ``barrier``: the key holds rows no
    variable accepts only, the latest at ``last`` (µs); ``segment`` and ``index``: where the
    key's own state (its matcher's or window's ``snapshot()``) is among the group's segments.
    """

    keys: list[str]
    columns: dict[str, np.ndarray]


@dataclass
class GroupState:
    """What ``GroupEvaluator.snapshot()`` returns: per rule its columns, and the segments.

    A segment is one pickle of the states of the keys (of every rule) that changed before
    one snapshot: rows that several rules keep are encoded once. A segment is decoded only
    when one of its keys is visited, and dropped once no key refers to it.
    """

    rules: dict[str, RuleState]
    segments: list[bytes]
    lengths: list[int]  # each segment's number of entries


class _Segments:
    """A group's segments (``GroupState``), decoded on first use."""

    def __init__(self, encoded: Sequence[bytes], lengths: Sequence[int]) -> None:
        self.encoded: list[bytes] = list(encoded)
        self.lengths: list[int] = list(lengths)
        self.decoded: dict[int, list[Any]] = {}

    def state(self, segment: int, index: int) -> Any:
        states = self.decoded.get(segment)
        if states is None:
            states = self.decoded[segment] = pickle.loads(self.encoded[segment])
        return states[index]

    def referring(self, rules: Sequence[_RuleKeys]) -> np.ndarray:
        """How many keys refer to each segment."""
        counts = np.zeros(len(self.encoded), dtype=np.int64)
        for keys in rules:
            used = keys.columns["segment"][:len(keys.keys)]
            counts += np.bincount(used[used >= 0], minlength=len(counts))
        return counts

    def renumber(self, rules: Sequence[_RuleKeys]) -> None:
        """Drop the segments no key refers to, and forget what was decoded: the keys that
        needed it are built."""
        kept = np.flatnonzero(self.referring(rules)).tolist()
        if len(kept) < len(self.encoded):
            number = np.full(len(self.encoded), -1, dtype=np.int64)
            number[kept] = np.arange(len(kept))
            for keys in rules:
                column = keys.columns["segment"][:len(keys.keys)]
                column[column >= 0] = number[column[column >= 0]]
            self.encoded = [self.encoded[old] for old in kept]
            self.lengths = [self.lengths[old] for old in kept]
        self.decoded = {}


class _RuleKeys:
    """One rule's partition keys in a group: the columns of ``RuleState``, and the keys built.

    ``live`` holds the keys' matchers, windows or barriers once built (decoded, or made by a
    visit); ``dirty`` those changed since the last snapshot, the only ones it re-encodes.
    A forgotten key leaves a dead slot (key None), dropped at the next snapshot.
    """

    def __init__(self, segments: _Segments, stored: RuleState | None = None) -> None:
        self.segments = segments
        self.keys: list[str | None] = list(stored.keys) if stored is not None else []
        self.slots: dict[str, int] = dict(zip(self.keys, range(len(self.keys))))  # type: ignore[arg-type]
        self.columns = _empty_columns(len(self.keys))
        if stored is not None:
            for name, column in self.columns.items():
                column[:len(self.keys)] = stored.columns[name]
        self.live: dict[str, Any] = {}
        self.dirty: set[str] = set()
        self.dead = 0

    def _slot(self, key: str) -> int:
        slot = self.slots.get(key)
        if slot is None:
            slot = self.slots[key] = len(self.keys)
            self.keys.append(key)
            if slot == len(self.columns["wake"]):
                old, self.columns = self.columns, _empty_columns(slot)
                for name, column in self.columns.items():
                    column[:slot] = old[name]
        return slot

    def built(self, key: str) -> Any:
        """The key's live object, None if it has none yet."""
        return self.live.get(key)

    def stored(self, key: str) -> Any:
        """The key's state as last encoded, decoded; None for a key without state."""
        slot = self.slots.get(key)
        if slot is None or self.columns["segment"][slot] < 0:
            return None
        return self.segments.state(int(self.columns["segment"][slot]), int(self.columns["index"][slot]))

    def is_barrier(self, key: str) -> bool:
        slot = self.slots.get(key)
        return slot is not None and bool(self.columns["barrier"][slot])

    def passed(self, key: str, watermark: int | None) -> bool:
        """Whether the watermark has passed every row of a barrier key."""
        return watermark is not None and bool(self.columns["last"][self.slots[key]] < watermark)

    def size(self, key: str) -> int:
        slot = self.slots.get(key)
        return int(self.columns["sizes"][slot]) if slot is not None else 0

    def keep(self, key: str, live: Any, size: int, wake: int | None, last: int | None = None) -> None:
        """The key's state is ``live`` now; ``last``: the latest row of a barrier key."""
        slot = self._slot(key)
        self.live[key] = live
        self.dirty.add(key)
        columns = self.columns
        columns["sizes"][slot] = size
        columns["wake"][slot] = _NEVER if wake is None else wake
        columns["barrier"][slot] = last is not None
        columns["last"][slot] = last or 0

    def forget(self, key: str) -> None:
        slot = self.slots.pop(key, None)
        if slot is None:
            return
        self.keys[slot] = None
        for name, empty in _COLUMNS.items():
            self.columns[name][slot] = empty
        self.live.pop(key, None)
        self.dirty.discard(key)
        self.dead += 1

    def due(self, watermark: int | None) -> list[str]:
        """Keys to visit without new rows: those whose wake time the watermark has reached."""
        if watermark is None:
            return []
        keys = self.keys
        return [keys[slot] for slot in np.flatnonzero(self.columns["wake"][:len(keys)] <= watermark).tolist()]  # type: ignore[misc]

    @property
    def total(self) -> int:
        return int(self.columns["sizes"][:len(self.keys)].sum())

    @property
    def wake_at(self) -> int | None:
        if not self.keys:
            return None
        wake = int(self.columns["wake"][:len(self.keys)].min())
        return None if wake == _NEVER else wake

    def compact(self) -> None:
        """Drop the dead slots."""
        if not self.dead:
            return
        alive = [slot for slot, key in enumerate(self.keys) if key is not None]
        self.keys = [self.keys[slot] for slot in alive]
        self.slots = dict(zip(self.keys, range(len(alive))))  # type: ignore[arg-type]
        old, self.columns = self.columns, _empty_columns(len(alive))
        for name, column in self.columns.items():
            column[:len(alive)] = old[name][alive]
        self.dead = 0

    def stored_state(self) -> RuleState:
        count = len(self.keys)
        return RuleState(list(self.keys), {name: column[:count].copy() for name, column in self.columns.items()})  # type: ignore[arg-type]


def _empty_columns(count: int) -> dict[str, np.ndarray]:
    """Empty columns with room for ``count`` keys and as many again."""
    capacity = max(16, 2 * count)
    return {name: np.full(capacity, empty, dtype=_TYPES.get(name, np.int64)) for name, empty in _COLUMNS.items()}


def _from_key_dicts(state: Mapping[str, Mapping[str, Any]]) -> GroupState:
    """A group's state in the layout before ``GroupState`` (per rule, one plain-data entry
    per key): one segment; the keys wake at the first watermark (epoch 0), whose visit
    learns their sizes and wake times."""
    rules, states = {}, []
    for state_key, keys in state.items():
        count = len(keys)
        columns = {name: np.full(count, empty, dtype=_TYPES.get(name, np.int64)) for name, empty in _COLUMNS.items()}
        columns["wake"][:] = 0
        columns["segment"][:] = 0
        columns["index"][:] = np.arange(len(states), len(states) + count)
        states.extend(keys.values())
        rules[state_key] = RuleState(list(keys), columns)
    return GroupState(rules, [pickle.dumps(states, protocol=pickle.HIGHEST_PROTOCOL)], [len(states)])


@dataclass(slots=True)
class _Barrier:
    """A pattern key's rows that no variable accepts, waiting for the watermark: ``(time µs,
    arrival, row)`` in time and arrival order; the matcher's own waiting-row state, unbuilt."""

    pending: list[Any]
    arrivals: int
    watermark: int | None

    def snapshot(self) -> dict[str, Any]:
        return PartitionMatcher.waiting_state(self.pending, self.watermark, self.arrivals)


class GroupEvaluator:
    """The window and pattern rules of one stateful group; ``state`` is a previous ``snapshot()``.

    ``clock`` reads monotonic seconds (the time budget); ``spent`` carries each rule's time
    used so far in this micro-batch across the groups one task evaluates. ``watermark`` is
    the last watermark the group was evaluated with, when resuming from a snapshot.
    """

    def __init__(
        self, rules: Sequence[ActiveRule], state: GroupState | Mapping[str, Any] | None = None, *,
        clock: Callable[[], float] = time.perf_counter, spent: dict[str, float] | None = None,
        watermark: datetime | None = None,
    ) -> None:
        self._clock = clock
        # rule state key -> its partition keys (JSON text) in this group.
        self._keys: dict[str, _RuleKeys] = {}
        self._rules: list[ActiveRule] = []
        self._spent: dict[str, float] = {}
        self.watermark = watermark
        if isinstance(state, Mapping):
            state = _from_key_dicts(state)
        self._segments = _Segments(state.segments, state.lengths) if state is not None else _Segments((), ())
        self.use(rules, spent if spent is not None else {})
        for state_key, stored in (state.rules if state is not None else {}).items():
            if state_key in self._keys:
                self._keys[state_key] = _RuleKeys(self._segments, stored)

    def use(self, rules: Sequence[ActiveRule], spent: dict[str, float]) -> None:
        """Run these rules from now on, with ``spent`` as the micro-batch's time account:
        a rule no longer among them loses its state, a new one starts empty."""
        self._rules = [rule for rule in rules if rule.compiled.stateful]
        self._spent = spent
        self._keys = {rule.state_key: self._keys.get(rule.state_key) or _RuleKeys(self._segments)
                      for rule in self._rules}

    @property
    def prefilters(self) -> set[Prefilter]:
        """The rules' prefilters, for a caller that works out the rows they admit itself."""
        return {rule.compiled.prefilter for rule in self._rules if rule.compiled.prefilter is not None}

    def process(self, rows: Sequence[tuple[str, Row]], watermark: datetime | None,
                admitted: Mapping[Prefilter, Sequence[int]] | None = None) -> GroupResult:
        """Feed ``(partition key, row)`` pairs and the watermark; rows carry ``event_time``.

        ``admitted`` gives, for a prefilter, the indexes of the rows it admits, in order;
        a prefilter missing from it is applied here.
        """
        batch = _Batch(rows, admitted)
        result = GroupResult()
        previous = self.watermark
        for rule in self._rules:
            self._run(rule, batch, previous, watermark, result)
        if watermark is not None:
            self.watermark = watermark
        return result

    def snapshot(self) -> GroupState:
        """Every rule's state that has keys. The keys changed since the last snapshot go to a
        new segment, with those of segments that less than half of their entries still
        refer to (rewritten rather than kept for a few keys); a segment no key refers to is
        dropped."""
        segments = self._segments
        rules = list(self._keys.values())
        for keys in rules:
            keys.compact()
        referring = segments.referring(rules)
        sparse = {number for number, (count, length) in enumerate(zip(referring.tolist(), segments.lengths))
                  if 0 < 2 * count < length}
        fresh: list[Any] = []
        for keys in rules:
            column = keys.columns["segment"]
            moved = [key for key in map(keys.keys.__getitem__, np.flatnonzero(np.isin(
                column[:len(keys.keys)], list(sparse))).tolist()) if key not in keys.dirty] if sparse else []
            for key in moved:
                live = keys.live.get(key)
                fresh.append(live.snapshot() if live is not None else keys.stored(key))
                keys.columns["index"][keys.slots[key]] = len(fresh) - 1
            for key in keys.dirty:
                fresh.append(keys.live[key].snapshot())
                keys.columns["index"][keys.slots[key]] = len(fresh) - 1
            for key in (*moved, *keys.dirty):
                column[keys.slots[key]] = len(segments.encoded)
            keys.dirty.clear()
        if fresh:
            segments.encoded.append(pickle.dumps(fresh, protocol=pickle.HIGHEST_PROTOCOL))
            segments.lengths.append(len(fresh))
        segments.renumber(rules)
        return GroupState({state_key: keys.stored_state() for state_key, keys in self._keys.items() if keys.keys},
                          list(segments.encoded), list(segments.lengths))  # type: ignore[arg-type]

    # -- one rule -------------------------------------------------------------------------

    @staticmethod
    def _pattern_rows(rule: ActiveRule, keys: _RuleKeys, batch: _Batch, mark: int | None,
                      metrics: RuleMetrics) -> dict[str, list[Row]]:
        """The keys a pattern visits with their rows; keys with barrier rows only keep them
        as barriers (or drop them) without a visit."""
        by_key = batch.by_key
        prefilter = rule.compiled.prefilter
        spec = rule.compiled.pattern
        assert spec is not None
        if prefilter is None or spec.lookback or spec.then_by:
            # Every row may start a match, or be read by PREV from a later match (or the
            # matcher orders a time's rows by ORDER BY's further columns, which a barrier does not).
            return {key: [batch.rows[index][1] for index in indexes] for key, indexes in by_key.items()}
        rows = batch.rows
        chosen = {rows[index][0] for index in batch.admitted(prefilter)}
        chosen.update(by_key.keys() & keys.slots.keys())
        for key in by_key.keys() - chosen:
            if _hold_barrier(keys, key, [rows[index][1] for index in by_key[key]], mark):
                metrics.rows += len(by_key[key])
                _check_state(rule, keys, key)
            else:
                chosen.add(key)
        return {key: [rows[index][1] for index in by_key[key]] for key in chosen}

    def _run(self, rule: ActiveRule, batch: _Batch, previous: datetime | None,
             watermark: datetime | None, result: GroupResult) -> None:
        started = self._clock()
        budget = rule.time_budget_ms / 1000
        keys = self._keys[rule.state_key]
        pattern = rule.compiled.kind == RuleKind.PATTERN
        emitted: list[Emitted] = []
        metrics = RuleMetrics()
        mark = micros_of(watermark) if watermark is not None else None
        try:
            if pattern:
                visit = self._pattern_rows(rule, keys, batch, mark, metrics)
            else:
                # A row that fails WHERE does nothing to a window rule: its key is not visited for it.
                keep = rule.compiled.window.where  # type: ignore[union-attr]
                visit = defaultdict(list)
                admitted = batch.admitted(rule.compiled.prefilter)
                metrics.rows += len(batch.rows) - len(admitted)  # input counts every row, as for a pattern
                for index in admitted:
                    row = batch.rows[index]
                    if keep is None or keep(row[1]) is True:
                        visit[row[0]].append(row[1])
                    else:
                        metrics.rows += 1
            for key in keys.due(mark):
                if key not in visit and keys.is_barrier(key):
                    _pass_barrier(keys, key, mark)
                else:
                    visit.setdefault(key, [])
            for key, rows in visit.items():
                metrics.rows += len(rows)
                if pattern:
                    out, late = _pattern_step(rule, keys, key, rows, previous, watermark)
                else:
                    out, late = _window_step(rule, keys, key, rows, watermark)
                _check_state(rule, keys, key)
                emitted.extend(out)
                metrics.late += late
                if self._spent.get(rule.state_key, 0.0) + self._clock() - started > budget:
                    raise BudgetExceeded(
                        f"time budget exceeded: more than {rule.time_budget_ms} ms in one micro-batch"
                    )
        except Exception as exc:  # noqa: BLE001 - any error of one rule must not reach the others
            self._keys[rule.state_key] = _RuleKeys(self._segments)
            result.failures.append(Failure(rule, _describe(exc)))
            return
        finally:
            elapsed = self._clock() - started
            self._spent[rule.state_key] = self._spent.get(rule.state_key, 0.0) + elapsed
            metrics.micros = int(elapsed * 1_000_000)
        metrics.emitted = len(emitted)
        metrics.state = keys.total
        result.emitted.extend(emitted)
        result.metrics[rule.state_key] = metrics
        wake = keys.wake_at
        if wake is not None and (result.wake_at is None or wake < result.wake_at):
            result.wake_at = wake


def _check_state(rule: ActiveRule, keys: _RuleKeys, key: str) -> None:
    size = keys.size(key)
    if size > rule.state_budget:
        raise BudgetExceeded(
            f"state budget exceeded: {size} entries for partition key {key} (budget {rule.state_budget})"
        )


class _Batch:
    """One micro-batch's rows, grouped by key, and the rows each prefilter admits."""

    def __init__(self, rows: Sequence[tuple[str, Row]], admitted: Mapping[Prefilter, Sequence[int]] | None) -> None:
        self.rows = rows
        self.by_key: dict[str, list[int]] = defaultdict(list)
        for index, (key, _) in enumerate(rows):
            self.by_key[key].append(index)
        self._admitted: dict[Prefilter, Sequence[int]] = dict(admitted or {})

    def admitted(self, prefilter: Prefilter | None) -> Sequence[int]:
        if prefilter is None:
            return range(len(self.rows))
        found = self._admitted.get(prefilter)
        if found is None:
            found = self._admitted[prefilter] = [
                index for index, (_, row) in enumerate(self.rows) if prefilter.admits(row)]
        return found


def _hold_barrier(keys: _RuleKeys, key: str, rows: list[Row], mark: int | None) -> bool:
    """Rows no variable accepts, for a key with no state: keep what a fresh matcher would
    keep of them (the rows the watermark has not passed, waiting in time and arrival
    order) as its state, without building it. False if a row has no usable time (the
    matcher judges such rows)."""
    times = [row.get("event_time") for row in rows]
    if not all(isinstance(time, datetime) for time in times):
        return False
    waiting = sorted((micros, arrival, row) for arrival, (micros, row) in
                     enumerate(zip(map(micros_of, times), rows)) if mark is None or micros >= mark)
    if waiting:
        keys.keep(key, _Barrier(waiting, len(rows), mark), len(waiting), waiting[0][0] + 1, last=waiting[-1][0])
    return True


def _pass_barrier(keys: _RuleKeys, key: str, mark: int | None) -> None:
    """The watermark reached a barrier key: the rows it passed would only end searches
    that do not exist; drop them, and the key once none is left."""
    if keys.passed(key, mark):
        keys.forget(key)  # without decoding it
        return
    barrier = keys.built(key)
    if barrier is None:
        state = keys.stored(key)
        assert state is not None
        barrier = _Barrier(state["pending"], state["arrivals"], state["watermark"])
    waiting = [entry for entry in barrier.pending if mark is None or entry[0] >= mark]
    keys.keep(key, _Barrier(waiting, barrier.arrivals, mark), len(waiting), waiting[0][0] + 1, last=waiting[-1][0])


def cloudevent(emitted: Emitted) -> dict[str, Any]:
    """The output event: ``type`` the rule's output type, ``subject`` the partition key."""
    event: dict[str, Any] = {
        "specversion": "1.0",
        "id": emitted.id,
        "source": OUTPUT_SOURCE_PREFIX + emitted.rule.name,
        "type": emitted.rule.output_type,
        "datacontenttype": "application/json",
        "data": emitted.data,
    }
    if emitted.subject is not None:
        event["subject"] = emitted.subject
    if emitted.time is not None:
        event["time"] = emitted.time.isoformat().replace("+00:00", "Z")
    if emitted.tenantid is not None:
        event["tenantid"] = emitted.tenantid
    return event


def _describe(exc: BaseException) -> str:
    if isinstance(exc, WaylineError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _pattern_step(rule: ActiveRule, keys: _RuleKeys, key: str, rows: list[Row], previous: datetime | None,
                  watermark: datetime | None) -> tuple[list[Emitted], int]:
    spec = rule.compiled.pattern
    assert spec is not None
    matcher = keys.built(key)
    matches = []
    if not isinstance(matcher, PartitionMatcher):
        frozen = matcher.snapshot() if matcher is not None else keys.stored(key)
        # A key's count of matches is kept WITHIN after its last match, and only for a rule
        # that reads it: the state keeps no idle keys otherwise.
        matcher = PartitionMatcher(spec, frozen, reorder=True,
                                   count_lapse=spec.within if spec.numbers_matches else None)
        if frozen is not None and previous is not None:
            # The key was not visited while the watermark moved on (it waited for nothing):
            # catch up, so rows are judged late against the same watermark as if it had been.
            matches.extend(matcher.advance_watermark(previous))
    dropped = matcher.dropped
    matches.extend(matcher.feed(rows, watermark))
    out = []
    for match in matches:
        if spec.where_test is not None and not spec.keeps(
                {name: _measure_or_key(match.measures, rule.compiled.partition_key, key, name)
                 for name in spec.output_names}):
            continue
        first, last = match.first, match.last
        out.append(Emitted(
            rule=rule,
            # The match's first and last rows (by event id) tell it from the key's other
            # matches; their times alone did not when rows shared a time.
            id=_event_id(rule, key, str(first.get("id")), str(last.get("id"))),
            subject=_subject(key),
            time=last.get("event_time"),
            tenantid=last.get("tenantid"),
            data={column.name: _measure_or_key(match.measures, rule.compiled.partition_key, key, column.source)
                  for column in spec.select},
        ))
    late = matcher.dropped - dropped
    size = matcher.size.total
    wake = matcher.wake_at
    if size == 0 and wake is None:
        # Nothing kept: forget the key, so the state holds only keys with live searches
        # (or a count of matches that MATCH_NUMBER() still reads until ``wake``).
        keys.forget(key)
    else:
        keys.keep(key, matcher, size, wake)
    return out, late


def _window_step(rule: ActiveRule, keys: _RuleKeys, key: str, rows: list[Row], watermark: datetime | None
                 ) -> tuple[list[Emitted], int]:
    """``rows`` passed the rule's WHERE."""
    spec = rule.compiled.window
    assert spec is not None
    windows = keys.built(key)
    if windows is None:
        windows = _WINDOWS[spec.kind](spec, keys.stored(key))
    late = windows.late
    mark = micros_of(watermark) if watermark is not None else None
    windows.add(rows, mark)
    out = []
    # Most visits bring rows and close nothing: a fixed window's group key is built only
    # once one of its windows ends (the other kinds may change state at any watermark).
    wake = windows.wake_at if spec.kind == WindowKind.FIXED else mark
    if mark is not None and wake is not None and wake <= mark:
        group_key = _nest(rule.compiled.partition_key, _values(key))
        for closed in windows.close(mark, group_key):
            out.append(Emitted(
                rule=rule, id=_event_id(rule, key, closed.ident), subject=_subject(key),
                time=time_of(closed.end), tenantid=closed.tenantid, data=closed.data,
            ))
    late = windows.late - late
    if not windows.size:
        keys.forget(key)
    else:
        keys.keep(key, windows, windows.size, windows.wake_at)
    return out, late


def _values(key: str) -> list[Any]:
    return list(orjson.loads(key))


def _subject(key: str) -> str | None:
    values = _values(key)
    if not values:
        return None
    return "/".join("" if value is None else str(value) for value in values)


def _nest(paths: Sequence[ColumnPath], values: Sequence[Any]) -> dict[str, Any]:
    """``data.user`` = 7 as ``{"data": {"user": 7}}``, so group expressions read it like a row."""
    out: dict[str, Any] = {}
    for path, value in zip(paths, values, strict=True):
        target = out
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = value
    return out


def _measure_or_key(measures: Mapping[str, Any], partition_key: Sequence[ColumnPath], key: str, source: str) -> Any:
    if source in measures:
        return measures[source]
    for path, value in zip(partition_key, _values(key), strict=True):
        if path[-1] == source:
            return value
    return None


def _event_id(rule: ActiveRule, key: str, *parts: str) -> str:
    """Derived from the rule's id and revision, the partition key and what produced the
    output, never from the order or batching of the input: a replayed micro-batch, or the
    job restarted on its checkpoint, emits the same ids, so consumers can drop duplicates."""
    digest = hashlib.sha256("\x1f".join((rule.state_key, key, *parts)).encode()).hexdigest()
    return digest[:32]


__all__ = [
    "ActiveRule", "BudgetExceeded", "cloudevent", "Emitted", "Failure", "GroupEvaluator", "GroupResult",
    "OUTPUT_SOURCE_PREFIX", "GroupState", "RuleMetrics", "RuleState", "time_of",
]
