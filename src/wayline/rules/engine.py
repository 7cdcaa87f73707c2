"""Stateful rules over one group of the rules job's stateful operator, in plain Python.

The job keys its stateful operator by (partition-key columns, shard): one group holds the
events of many partition keys, for every window and pattern rule that partitions by those
columns. ``GroupEvaluator`` takes one group's rows and watermark and returns what the
rules emit, which rules failed, and per-rule metrics; its state is plain data
(``snapshot()``), one entry per (rule, partition key).

Isolation: each rule runs inside its own ``try``, and against its own clock. A rule that
raises (``GiveUp``: a division by zero, a type error, too many ways to match) or that uses
more than its time budget in a micro-batch is reported as a ``Failure``; its state in the
group and its output are dropped, and every other rule's output is what it would have been
without it. A rule whose state for one partition key outgrows its ``state_budget`` entries
fails the same way. The job quarantines failed rules in the registry.

State is keyed by ``rule.state_key`` (id and revision): a changed rule starts empty, and
the state of a rule that is no longer active is dropped when its group is next loaded.
"""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import orjson

from wayline.core.errors import WaylineError
from wayline.rules.expression import ColumnPath, Row
from wayline.rules.matcher import PartitionMatcher
from wayline.rules.rule import CompiledRule, RuleKind, key_name
from wayline.rules.window import WindowState, micros_of, time_of

OUTPUT_SOURCE_PREFIX = "wayline.rules/"
_MICRO = timedelta(microseconds=1)


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


class GroupEvaluator:
    """The window and pattern rules of one stateful group; ``state`` is a previous ``snapshot()``.

    ``clock`` reads monotonic seconds (the time budget); ``spent`` carries each rule's time
    used so far in this micro-batch across the groups one task evaluates.
    """

    def __init__(
        self, rules: Sequence[ActiveRule], state: Mapping[str, Any] | None = None, *,
        clock: Callable[[], float] = time.perf_counter, spent: dict[str, float] | None = None,
    ) -> None:
        self._rules = [rule for rule in rules if rule.compiled.stateful]
        self._clock = clock
        self._spent = spent if spent is not None else {}
        # rule state key -> partition key (JSON text) -> that key's state, as plain data.
        self._state: dict[str, dict[str, Any]] = {
            rule.state_key: dict((state or {}).get(rule.state_key, {})) for rule in self._rules
        }

    def process(self, rows: Iterable[tuple[str, Row]], watermark: datetime | None) -> GroupResult:
        """Feed ``(partition key, row)`` pairs and the watermark; rows carry ``event_time``."""
        by_key: dict[str, list[Row]] = defaultdict(list)
        for key, row in rows:
            by_key[key].append(row)
        result = GroupResult()
        for rule in self._rules:
            self._run(rule, by_key, watermark, result)
        return result

    def snapshot(self) -> dict[str, Any]:
        return {key: keys for key, keys in self._state.items() if keys}

    # -- one rule -------------------------------------------------------------------------

    def _run(self, rule: ActiveRule, by_key: Mapping[str, list[Row]], watermark: datetime | None,
             result: GroupResult) -> None:
        started = self._clock()
        budget = rule.time_budget_ms / 1000
        states = self._state[rule.state_key]
        emitted: list[Emitted] = []
        metrics = RuleMetrics()
        wake: list[int] = []
        try:
            # Keys with new rows, then keys with state only (the watermark may settle them).
            for key in [*by_key, *(k for k in states if k not in by_key)]:
                rows = by_key.get(key, [])
                metrics.rows += len(rows)
                if rule.compiled.kind == RuleKind.PATTERN:
                    state, out, size, late, next_wake = _pattern_step(rule, key, states.get(key), rows, watermark)
                else:
                    state, out, size, late, next_wake = _window_step(rule, key, states.get(key), rows, watermark)
                if size > rule.state_budget:
                    raise BudgetExceeded(
                        f"state budget exceeded: {size} entries for partition key {key} "
                        f"(budget {rule.state_budget})"
                    )
                if state is None:
                    states.pop(key, None)
                else:
                    states[key] = state
                emitted.extend(out)
                metrics.state += size
                metrics.late += late
                if next_wake is not None:
                    wake.append(next_wake)
                if self._spent.get(rule.state_key, 0.0) + self._clock() - started > budget:
                    raise BudgetExceeded(
                        f"time budget exceeded: more than {rule.time_budget_ms} ms in one micro-batch"
                    )
        except Exception as exc:  # noqa: BLE001 - any error of one rule must not reach the others
            self._state[rule.state_key] = {}
            result.failures.append(Failure(rule, _describe(exc)))
            return
        finally:
            elapsed = self._clock() - started
            self._spent[rule.state_key] = self._spent.get(rule.state_key, 0.0) + elapsed
            metrics.micros = int(elapsed * 1_000_000)
        metrics.emitted = len(emitted)
        result.emitted.extend(emitted)
        result.metrics[rule.state_key] = metrics
        if wake:
            result.wake_at = min([*wake, *([result.wake_at] if result.wake_at is not None else [])])


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


def _pattern_step(rule: ActiveRule, key: str, state: Any, rows: list[Row], watermark: datetime | None
                  ) -> tuple[Any, list[Emitted], int, int, int | None]:
    spec = rule.compiled.pattern
    assert spec is not None
    matcher = PartitionMatcher(spec, state, reorder=True)
    dropped = matcher.dropped
    matches = matcher.feed(rows, watermark)
    size = matcher.size
    snapshot = matcher.snapshot()
    out = []
    for match in matches:
        first = _row_number(snapshot, match.start) or {}
        last = _row_number(snapshot, match.end) or {}
        out.append(Emitted(
            rule=rule,
            id=_event_id(rule, key, str(first.get("event_time", match.start)), str(last.get("event_time", match.end))),
            subject=_subject(key),
            time=last.get("event_time"),
            tenantid=last.get("tenantid"),
            data={column.name: _measure_or_key(match.measures, rule.compiled.partition_key, key, column.source)
                  for column in spec.select},
        ))
    late = matcher.dropped - dropped
    if size.total == 0:
        # Nothing kept: forget the key, so the state holds only keys with live searches.
        return None, out, 0, late, None
    return snapshot, out, size.total, late, _pattern_wake(snapshot, spec.within)


def _row_number(snapshot: Mapping[str, Any], number: int) -> Row | None:
    """Row ``number`` of the partition if the matcher still keeps it (it trims in large steps)."""
    base = snapshot["base"]
    kept = snapshot["rows"]
    if base <= number < base + len(kept):
        return kept[number - base]
    return None


def _pattern_wake(snapshot: Mapping[str, Any], within: Any) -> int | None:
    """When the watermark next matters: a waiting row becomes usable, or a search expires."""
    candidates = [entry[0] + 1 for entry in snapshot["pending"]]
    search = snapshot["search"]
    if search is not None and within is not None:
        start = snapshot["times"][search["start"] - snapshot["base"]]
        candidates.append(start + within // _MICRO)
    return min(candidates) if candidates else None


def _window_step(rule: ActiveRule, key: str, state: Any, rows: list[Row], watermark: datetime | None
                 ) -> tuple[Any, list[Emitted], int, int, int | None]:
    spec = rule.compiled.window
    assert spec is not None
    windows = WindowState(spec, state)
    late = windows.late
    mark = micros_of(watermark) if watermark is not None else None
    windows.add(rows, mark)
    out = []
    tenant = rows[-1].get("tenantid") if rows else (state or {}).get("tenant")
    if mark is not None:
        group_key = _nest(rule.compiled.partition_key, _values(key))
        for start, end, data in windows.close(mark, group_key):
            out.append(Emitted(
                rule=rule, id=_event_id(rule, key, str(start)), subject=_subject(key),
                time=time_of(end), tenantid=tenant, data=data,
            ))
    late = windows.late - late
    if not windows.open:
        return None, out, 0, late, None
    snapshot = windows.snapshot()
    snapshot["tenant"] = tenant
    return snapshot, out, windows.size, late, min(windows.open) + spec.size // _MICRO


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
    """Stable across replays of a micro-batch: the same match gets the same id."""
    digest = hashlib.sha256("\x1f".join((rule.state_key, key, *parts)).encode()).hexdigest()
    return digest[:32]


__all__ = [
    "ActiveRule", "BudgetExceeded", "cloudevent", "Emitted", "Failure", "GroupEvaluator", "GroupResult",
    "OUTPUT_SOURCE_PREFIX", "RuleMetrics", "time_of",
]
