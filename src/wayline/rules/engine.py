"""Stateful rules over one group of the rules job's stateful operator, in plain Python.

The job keys its stateful operator by (partition-key columns, shard): one group holds the
events of many partition keys, for every window and pattern rule that partitions by those
columns. ``GroupEvaluator`` takes one group's rows and watermark and returns what the
rules emit, which rules failed, and per-rule metrics; its state (``snapshot()``, a
``GroupState``) is encoded by ``wayline.rules.group_state``: per rule, columns over the
partition keys, and the keys' own states in segments, decoded only when one of their keys
is visited.

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
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from wayline.core.errors import WaylineError
from wayline.rules.columns import key_name
from wayline.rules.expression import ColumnPath, Row

# GroupState and RuleState are exported here too: state blobs written before group_state.py
# existed name them in this module (pickle records a class by its module).
from wayline.rules.group_state import GroupState, RuleKeys, RuleState, Segments, encode, from_key_dicts
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
        self._keys: dict[str, RuleKeys] = {}
        self._rules: list[ActiveRule] = []
        self._spent: dict[str, float] = {}
        self.watermark = watermark
        if isinstance(state, Mapping):
            state = from_key_dicts(state)
        self._segments = Segments(state.segments, state.lengths) if state is not None else Segments((), ())
        self.use(rules, spent if spent is not None else {})
        for state_key, stored in (state.rules if state is not None else {}).items():
            if state_key in self._keys:
                self._keys[state_key] = RuleKeys(self._segments, stored)

    def use(self, rules: Sequence[ActiveRule], spent: dict[str, float]) -> None:
        """Run these rules from now on, with ``spent`` as the micro-batch's time account:
        a rule no longer among them loses its state, a new one starts empty."""
        self._rules = [rule for rule in rules if rule.compiled.stateful]
        self._spent = spent
        self._keys = {rule.state_key: self._keys.get(rule.state_key) or RuleKeys(self._segments)
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
        """Every rule's state that has keys: the keys changed since the last snapshot in a new
        segment (``wayline.rules.group_state.encode``)."""
        return encode(self._segments, self._keys)

    # -- one rule -------------------------------------------------------------------------

    @staticmethod
    def _pattern_rows(rule: ActiveRule, keys: RuleKeys, batch: _Batch, mark: int | None,
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
            self._keys[rule.state_key] = RuleKeys(self._segments)
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


def _check_state(rule: ActiveRule, keys: RuleKeys, key: str) -> None:
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


def _hold_barrier(keys: RuleKeys, key: str, rows: list[Row], mark: int | None) -> bool:
    """Rows no variable accepts, for a key with no state: keep what a fresh matcher would
    keep of them (the rows the watermark has not passed, waiting in time and arrival
    order) as its state, without building it. False if a row has no usable time (the
    matcher judges such rows)."""
    times = [row.get("event_time") for row in rows]
    if not all(isinstance(time, datetime) for time in times):
        return False
    waiting = sorted((micros, arrival, row) for arrival, (micros, row) in
                     enumerate(zip(map(micros_of, times), rows, strict=True)) if mark is None or micros >= mark)
    if waiting:
        keys.keep(key, _Barrier(waiting, len(rows), mark), len(waiting), waiting[0][0] + 1, last=waiting[-1][0])
    return True


def _pass_barrier(keys: RuleKeys, key: str, mark: int | None) -> None:
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


def _pattern_step(rule: ActiveRule, keys: RuleKeys, key: str, rows: list[Row], previous: datetime | None,
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


def _window_step(rule: ActiveRule, keys: RuleKeys, key: str, rows: list[Row], watermark: datetime | None
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
